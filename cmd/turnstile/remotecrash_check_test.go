package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// TestRemoteCheckIncarnationsFails: the remote crash tests' check of
// incarnations (checkIncarnations) reports a worker-written execution event
// that comes after its incarnation was declared lost, and one after it was
// replaced, and passes the same log without them.
func TestRemoteCheckIncarnationsFails(t *testing.T) {
	type ev struct {
		stream string
		e      domain.Event
		owner  domain.Owner
	}
	exec, wk := domain.ExecutionStream("x1"), domain.WorkerStream("w")
	base := []ev{
		{wk, domain.WorkerRegistered{Slots: 1, Incarnation: "i1"}, domain.OwnerWorker},
		{exec, domain.ExecutionScheduled{Worker: "w", Incarnation: "i1", Attempt: 1}, domain.OwnerExecutor},
		{exec, domain.ExecutionRunning{Worker: "w", Attempt: 1}, domain.OwnerWorker},
	}
	for name, tc := range map[string]struct {
		log  []ev
		want string
	}{
		"clean": {log: append(append([]ev{}, base...), ev{exec, domain.ExecutionCompleted{}, domain.OwnerWorker})},
		"after lost": {log: append(append([]ev{}, base...),
			ev{wk, domain.WorkerLost{Incarnation: "i1", Reason: "lease"}, domain.OwnerExecutor},
			ev{exec, domain.ExecutionCompleted{}, domain.OwnerWorker}), want: "incarnation i1, which ended"},
		"after replaced": {log: append(append([]ev{}, base...),
			ev{wk, domain.WorkerRegistered{Slots: 1, Incarnation: "i2"}, domain.OwnerWorker},
			ev{exec, domain.ExecutionCompleted{}, domain.OwnerWorker}), want: "incarnation i1, which ended"},
	} {
		t.Run(name, func(t *testing.T) {
			var envs []domain.Envelope
			for i, e := range tc.log {
				env, err := codec.Events.Encode(uuid.New(), e.e, e.owner, "w")
				if err != nil {
					t.Fatal(err)
				}
				env.Stream, env.Position = e.stream, uint64(i)
				envs = append(envs, env)
			}
			rec := &recordingTB{TB: t}
			checkIncarnations(context.Background(), rec, sliceLog(envs))
			got := strings.Join(rec.errs, "\n")
			if tc.want == "" && got != "" || tc.want != "" && !strings.Contains(got, tc.want) {
				t.Errorf("reported %q, want %q", got, tc.want)
			}
		})
	}
}

// recordingTB records Errorf instead of failing.
type recordingTB struct {
	testing.TB
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recordingTB) Error(args ...any) { r.errs = append(r.errs, fmt.Sprint(args...)) }

// sliceLog is a log held in a slice, read as a store's ReadAll.
type sliceLog []domain.Envelope

func (l sliceLog) ReadAll(_ context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if from >= uint64(len(l)) {
		return nil, nil
	}
	return l[from:min(uint64(len(l)), from+uint64(limit))], nil
}
