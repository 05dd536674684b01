package projections_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// TestAuditLiveFromACheckpoint audits, for each log of the audit's
// violation cases and viewsLog, and for every position C, the live log
// trimmed at a checkpoint at C (as the archiver trims it): the audit
// starts at C and says so; where the log before C broke no rule, it finds
// exactly the violations a whole audit finds (all of them after C: a
// violation after the checkpoint is still found, and a clean log stays
// clean); and it never reports a position before C.
func TestAuditLiveFromACheckpoint(t *testing.T) {
	t.Parallel()
	cases := append(auditCases(), auditCase{name: "views log", write: func(w logWriter) { copyLog(w.t, w.store, readAll(w.t, viewsLog(w.t))) }})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			src := memstore.New(memstore.Options{})
			tc.write(logWriter{t, src})
			evs := readAll(t, src)
			for cut := 1; cut <= len(evs); cut++ {
				store := memstore.New(memstore.Options{})
				copyLog(t, store, evs[:cut])
				st := projections.NewState()
				folded := true
				for _, e := range readAll(t, store) {
					folded = folded && st.Apply(&e) == nil
				}
				if !folded {
					continue // an event that does not decode: no checkpoint is written over it
				}
				sn := st.Snapshot()
				before := readAll(t, store)
				if _, err := projections.WriteCheckpoint(ctx, store, sn, before[cut-1].Hash, "executor", nil); err != nil {
					t.Fatal(err)
				}
				copyLog(t, store, evs[cut:])
				whole, err := projections.Audit(ctx, store, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := store.Trim(ctx, uint64(cut), append(projections.CheckpointKeep(sn), projections.LiveStreams(sn)...)); err != nil {
					t.Fatal(err)
				}
				if _, err := projections.Audit(ctx, store, nil); !errors.Is(err, eventstore.ErrTrimmed) {
					t.Fatalf("cut %d: a whole audit of the trimmed log: %v", cut, err)
				}
				live, err := projections.AuditLive(ctx, store, nil)
				if err != nil {
					t.Fatalf("cut %d: %v", cut, err)
				}
				if live.From == nil || live.From.Checkpoint != uint64(cut) || live.From.LiveStart != uint64(cut) || len(live.From.NotJudged) == 0 {
					t.Fatalf("cut %d: the report does not say where it started: %+v", cut, live.From)
				}
				cleanBefore := true
				for _, v := range whole.Violations {
					cleanBefore = cleanBefore && v.Position >= uint64(cut)
				}
				for _, v := range live.Violations {
					if v.Position < uint64(cut) {
						t.Fatalf("cut %d: a violation before the checkpoint: %+v", cut, v)
					}
				}
				if cleanBefore && fmt.Sprint(where(live.Violations)) != fmt.Sprint(where(whole.Violations)) {
					t.Fatalf("cut %d: from the checkpoint\n%v\nthe whole log\n%v", cut, live.Violations, whole.Violations)
				}
				if cleanBefore && tc.rule != "" && !slices.ContainsFunc(live.Violations, func(v projections.Violation) bool {
					return v.Rule == tc.rule || strings.Contains(v.Detail, "not live at the checkpoint")
				}) {
					t.Fatalf("cut %d: the %s violation after the checkpoint is not found: %v", cut, tc.rule, live.Violations)
				}
			}
		})
	}
}

// where is each violation's position, stream and type: an event for an
// execution that ended before the checkpoint breaks "terminal" in a whole
// audit and is reported with another rule from the checkpoint (which cannot
// tell an ended execution from one never requested), saying so.
func where(vs []projections.Violation) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = fmt.Sprint(v.Position, " ", v.Stream, " ", v.Type)
	}
	return out
}

// TestAuditLiveNeedsACheckpoint: a live log trimmed where no checkpoint
// reads cannot be audited alone; an untrimmed one audits whole.
func TestAuditLiveNeedsACheckpoint(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	copyLog(t, store, readAll(t, viewsLog(t)))
	rep, err := projections.AuditLive(ctx, store, nil)
	if err != nil || rep.From != nil || !rep.OK() {
		t.Fatalf("untrimmed: %v %+v", err, rep)
	}
	if err := store.Trim(ctx, 5, []string{domain.ActionStream("a"), domain.QueueStream("a")}); err != nil {
		t.Fatal(err)
	}
	if _, err := projections.AuditLive(ctx, store, nil); !errors.Is(err, projections.ErrNoCheckpointToAudit) {
		t.Fatalf("trimmed without a checkpoint: %v", err)
	}
}
