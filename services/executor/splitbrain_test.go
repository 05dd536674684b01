package executor_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// TestTwoExecutorsGrantAtOnce: the split-brain race, made deterministic.
// Two executors fold the same log and decide the same grant; each is held
// before its append until both have decided, then both are let go at once.
// The queue stream's version (the fence of every grant, the first append of
// a grant op) lets exactly one of them land: one queue.granted, one
// scheduling and one scheduled for the head of the queue, the second waiter
// still waiting under max_concurrent 1, and the loser says in its log that
// it lost the race. On a single-stream log the queue append is the only
// fence: without it both grants land in the queue stream.
func TestTwoExecutorsGrantAtOnce(t *testing.T) {
	bothLogs(t, func(t *testing.T, single bool) {
		held := make(chan string, 2)
		release := make(chan struct{})
		h := newHarness(t, harnessConfig{single: single, noForwarder: true, executors: 2, beforeAppend: func(what string) {
			if strings.HasPrefix(what, "grant ") {
				select {
				case held <- what:
					<-release // the first two grants decided: held until both are
				default:
				}
			}
		}})
		released := false
		defer func() {
			if !released {
				close(release)
			}
		}()
		h.addWorker("w1", 4, time.Hour, nil)
		h.define(domain.Policy{Ref: "split.one", Runner: "core.noop", MaxConcurrent: 1})
		a := h.request("split.one", "")
		b := h.request("split.one", "")
		for i := range 2 {
			select {
			case what := <-held:
				if what != "grant split.one" {
					t.Fatalf("held %q", what)
				}
			case <-time.After(waitLimit):
				t.Fatalf("%d of the 2 executors decided the grant in %v", i, waitLimit)
			}
		}
		close(release)
		released = true
		h.waitStatus(a, domain.StatusScheduled)
		h.settle()
		head, err := h.store.Head(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		h.waitFor("the second executor to fold the log", func() bool { return h.more[0].Position() >= head })
		h.cycles(2)

		granted := 0
		for _, r := range h.stream(domain.QueueStream("split.one")) {
			if _, ok := r.ev.(domain.QueueGranted); ok {
				granted++
			}
		}
		if granted != 1 {
			t.Errorf("queue stream holds %d queue.granted, want 1 (two executors deciding at once)", granted)
		}
		if got, want := types(h.stream(domain.ExecutionStream(a))), []string{"requested", "scheduling", "scheduled"}; !slices.Equal(got, want) {
			t.Errorf("execution %s (the head) %v, want %v", a, got, want)
		}
		if got, want := types(h.stream(domain.ExecutionStream(b))), []string{"requested"}; !slices.Equal(got, want) {
			t.Errorf("execution %s (second, max_concurrent 1) %v, want %v", b, got, want)
		}
		h.auditClean()
		if !t.Failed() {
			h.waitFor("the losing executor to log its lost race", func() bool {
				return len(h.logs.find("lost a race, deciding again", "op", "grant split.one")) > 0
			})
		}
	})
}
