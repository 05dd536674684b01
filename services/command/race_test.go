package command_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/services/command"
)

// TestConcurrentPolicyChangesAreNotLost: two different policy changes decided
// at the same action version, on the embedded store, must not both succeed
// silently with one of them lost: each lands (one after the other) or fails.
func TestConcurrentPolicyChangesAreNotLost(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		store, err := embedded.Open(filepath.Join(t.TempDir(), "log"), embedded.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = store.Close() }()
		ctx := context.Background()
		var st eventstore.Store = store
		if single {
			st = storetest.SingleStream(store)
		}
		cmds := &command.Service{Store: st, Writer: "api"}
		if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: "p", Runner: "core.noop"}); err != nil {
			t.Fatal(err)
		}
		for round := range 50 {
			before, err := cmds.LoadAction(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			changed := make([]bool, 2)
			for i := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ok, err := cmds.ChangePolicy(ctx, domain.Policy{Ref: "p", Runner: "core.noop", MaxConcurrent: 10 + 2*round + i})
					if err != nil && !errors.Is(err, domain.ErrConflict) {
						t.Error(err)
					}
					changed[i] = ok
				}()
			}
			wg.Wait()
			a, err := cmds.LoadAction(ctx, "p")
			if err != nil {
				t.Fatal(err)
			}
			landed := int64(0)
			for _, c := range changed {
				if c {
					landed++
				}
			}
			if a.Version() != before.Version()+landed {
				t.Fatalf("round %d: %d changes reported as landed, the action's version went from %d to %d", round, landed, before.Version(), a.Version())
			}
			got := a.Policy().MaxConcurrent
			// The policy in force must be one that a caller was told landed, and
			// the last one to land.
			if (got == 10+2*round && !changed[0]) || (got == 10+2*round+1 && !changed[1]) || (got != 10+2*round && got != 10+2*round+1) {
				t.Fatalf("round %d: policy max_concurrent %d, changed %v", round, got, changed)
			}
		}
	})
}

// bothLogs runs test on a store with atomic multi-stream appends and on one
// without.
func bothLogs(t *testing.T, test func(t *testing.T, single bool)) {
	t.Helper()
	for _, single := range []bool{false, true} {
		name := "multi-stream"
		if single {
			name = "single-stream"
		}
		t.Run(name, func(t *testing.T) { test(t, single) })
	}
}
