package command_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

// TestUnservedRunnerIsWarned: defining an action whose runner no live
// worker serves is accepted, with a warning in the log naming the action
// and the runner; Served tells live workers that serve a runner apart.
func TestUnservedRunnerIsWarned(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	var buf bytes.Buffer
	cmds := (&command.Service{Store: store, Writer: "test", Log: slog.New(slog.NewTextHandler(&buf, nil))}).WithViews(projections.NewViews())
	created, err := cmds.DefineAction(context.Background(), domain.Policy{Ref: "typo", Runner: "core.nosuch"})
	if err != nil || !created {
		t.Fatalf("define: %v %v, want it accepted", created, err)
	}
	if out := buf.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "action=typo") || !strings.Contains(out, "runner=core.nosuch") {
		t.Fatalf("log: %q, want a warning naming the action and its runner", out)
	}

	w := func(st domain.WorkerStatus, runners ...string) projections.WorkerView {
		return projections.WorkerView{ID: "w", Status: st, Runners: runners}
	}
	for _, tc := range []struct {
		workers []projections.WorkerView
		want    bool
	}{
		{nil, false},
		{[]projections.WorkerView{w(domain.WorkerActive, "core.echo")}, false},
		{[]projections.WorkerView{w(domain.WorkerLostStatus, "core.nosuch")}, false},
		{[]projections.WorkerView{w(domain.WorkerStoppedStatus, "core.nosuch"), w(domain.WorkerActive, "core.echo", "core.nosuch")}, true},
	} {
		if got := command.Served(tc.workers, "core.nosuch"); got != tc.want {
			t.Errorf("Served(%+v) = %v, want %v", tc.workers, got, tc.want)
		}
	}
}
