package projections_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// lifecycleLog returns a memstore holding n executions of 10 actions, each
// requested, granted, handed over, run and completed (6 events), one after
// the other.
func lifecycleLog(tb testing.TB, n int) *memstore.Store {
	tb.Helper()
	store := memstore.New(memstore.Options{})
	ctx := context.Background()
	put := func(stream string, owner domain.Owner, writer string, ev domain.Event) {
		env, err := codec.Events.Encode(uuid.New(), ev, owner, writer)
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, env); err != nil {
			tb.Fatal(err)
		}
	}
	for a := range 10 {
		ref := fmt.Sprint("bench-", a)
		put(domain.ActionStream(ref), domain.OwnerAPI, "", domain.ActionDefined{Policy: domain.Policy{Ref: ref, Runner: "core.noop", MaxConcurrent: 4}.WithDefaults()})
	}
	for i := range n {
		ref, id := fmt.Sprint("bench-", i%10), fmt.Sprint("x", i)
		put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: ref})
		put(domain.QueueStream(ref), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: id})
		put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
		put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: ref, Runner: "core.noop"})
		put(domain.ExecutionStream(id), domain.OwnerWorker, "w1", domain.ExecutionRunning{Worker: "w1", Attempt: 1})
		put(domain.ExecutionStream(id), domain.OwnerWorker, "w1", domain.ExecutionCompleted{})
	}
	return store
}

// BenchmarkFoldState folds 20,000 executions' lifecycles (120,010 events)
// into a new State per iteration: the executor's, the audit's and the read
// model's fold, which counts the actions' statistics too.
func BenchmarkFoldState(b *testing.B) {
	evs := readAll(b, lifecycleLog(b, 20_000))
	b.ResetTimer()
	for range b.N {
		st := projections.NewState()
		for i := range evs {
			if err := st.Apply(&evs[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(evs)), "ns/event")
}

// checkpointedLog is lifecycleLog(n) with a checkpoint of the fold at 90 %
// of its events written into it, and that position.
func checkpointedLog(b *testing.B, n int) (*memstore.Store, *projections.StateSnapshot) {
	b.Helper()
	ctx := context.Background()
	src := readAll(b, lifecycleLog(b, n))
	store := memstore.New(memstore.Options{})
	cut := len(src) * 9 / 10
	copyLogTB(b, store, src[:cut])
	st := projections.NewState()
	evs := readAll(b, store)
	for i := range evs {
		if err := st.Apply(&evs[i]); err != nil {
			b.Fatal(err)
		}
	}
	sn := st.Snapshot()
	if _, err := projections.WriteCheckpoint(ctx, store, sn, evs[cut-1].Hash, "executor", nil); err != nil {
		b.Fatal(err)
	}
	copyLogTB(b, store, src[cut:])
	return store, sn
}

func copyLogTB(b *testing.B, store eventstore.Store, evs []domain.Envelope) {
	b.Helper()
	for _, e := range evs {
		e.Position, e.Version = 0, 0
		if _, err := store.Append(context.Background(), e.Stream, eventstore.Any, e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAsOf answers queue-stats as of the log's last event on a log of
// 20,000 lifecycles with a checkpoint at 90 %: folded from position 0
// (ViewsAsOf, what every as_of did before) and from the checkpoint
// (Queries.At).
func BenchmarkAsOf(b *testing.B) {
	ctx := context.Background()
	store, _ := checkpointedLog(b, 20_000)
	head, _ := store.Head(ctx)
	b.Run("from-0", func(b *testing.B) {
		for range b.N {
			if _, err := projections.ViewsAsOf(ctx, store, projections.Cut{Position: head - 1}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("from-checkpoint", func(b *testing.B) {
		q := projections.NewQueries(projections.NewViews(), store)
		for range b.N {
			if _, err := q.At(ctx, fmt.Sprint(head-1)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAuditLive audits a log of 20,000 lifecycles with a checkpoint at
// 90 %: whole, and trimmed at the checkpoint from it (AuditLive); events/s
// counts the events each audit reads.
func BenchmarkAuditLive(b *testing.B) {
	ctx := context.Background()
	store, sn := checkpointedLog(b, 20_000)
	for _, trimmed := range []bool{false, true} {
		name := "whole"
		if trimmed {
			name = "live-from-checkpoint"
			if err := store.Trim(ctx, sn.Next, append(projections.CheckpointKeep(sn), projections.LiveStreams(sn)...)); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			var events uint64
			for range b.N {
				rep, err := projections.AuditLive(ctx, store, nil)
				if err != nil || !rep.OK() {
					b.Fatalf("%v %+v", err, rep.Violations)
				}
				events += rep.Events
			}
			b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
		})
	}
}
