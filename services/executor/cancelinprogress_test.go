package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/runner"
)

// TestCancelInProgress: with on_limit cancel_in_progress a request whose
// key value has every slot taken gets one: the executor asks the oldest
// running execution of that value to cancel, its worker cancels it, and
// the new request is granted the freed slot. Another key value's run is
// untouched. Catches: on_limit cancel_in_progress refused or ignored (the
// new request waits behind the first), the wrong execution cancelled (the
// other key's), the cancellation not written by the executor.
func TestCancelInProgress(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	g := newGate()
	h.addWorker("w1", 4, time.Hour, map[string]runner.Runner{"test.job": g})
	h.define(domain.Policy{Ref: "cip", Runner: "test.job", MaxConcurrent: 1, ConcurrencyKey: "tenant", OnLimit: domain.OnLimitCancelInProgress})
	first := h.request("cip", `{"tenant":"a"}`)
	h.waitFor("the first to run", func() bool { return g.Waiting() == 1 })
	other := h.request("cip", `{"tenant":"b"}`)
	h.waitFor("b to run", func() bool { return g.Waiting() == 2 })
	second := h.request("cip", `{"tenant":"a"}`)
	h.advance(time.Second)
	checkCancelled(t, h, first, domain.OwnerWorker, "w1")
	asked := false
	for _, r := range h.stream(domain.ExecutionStream(first)) {
		if _, ok := r.ev.(domain.ExecutionCancelRequested); ok {
			asked = r.env.Owner == domain.OwnerExecutor
		}
	}
	if !asked {
		t.Fatal("the first's cancel_requested is not the executor's")
	}
	h.waitStatus(second, domain.StatusRunning)
	if x := h.loaded(other); x.Status() != domain.StatusRunning {
		t.Fatalf("the other key's run: %s", x.Status())
	}
	g.ReleaseAll()
	h.waitStatus(second, domain.StatusCompleted)
	h.waitStatus(other, domain.StatusCompleted)
	h.auditClean()
}

// TestCancelInProgressCountsTheAsked: with max_concurrent 3 and a worker
// slow to honour cancellations (its runs go on after they are asked to
// stop, until the test lets them), each new request of a full key value
// costs exactly one running execution its cancellation, the oldest not
// yet asked, however many cycles pass while the asked ones still hold
// their slots: two requests, two cancellations (never the third run);
// once the asked runs ended and the waiters hold their slots, nothing
// more is asked until a third request, which asks the oldest run left.
// Catches: runs already asked to cancel not counted against the waiters
// (mutant cip-recount-asked: every cycle asks one more, and all three
// runs are cancelled for one request); the audit's count (rule
// cancel_in_progress) passes the lawful history.
func TestCancelInProgressCountsTheAsked(t *testing.T) {
	h := newHarness(t, harnessConfig{})
	s := newStubborn()
	defer s.finishAll()
	h.addWorker("w1", 8, time.Hour, map[string]runner.Runner{"test.slow": s})
	h.define(domain.Policy{Ref: "cip3", Runner: "test.slow", MaxConcurrent: 3, ConcurrencyKey: "tenant", OnLimit: domain.OnLimitCancelInProgress})
	var runs []string
	for i := range 3 {
		runs = append(runs, h.request("cip3", `{"tenant":"a"}`))
		h.waitFor("the run to start", func() bool { return s.running() == i+1 })
		h.advance(time.Second) // distinct grant times: the oldest is runs[0]
	}
	asked := func() []string {
		var out []string
		for _, r := range h.all() {
			if _, ok := r.ev.(domain.ExecutionCancelRequested); ok && r.env.Owner == domain.OwnerExecutor {
				out = append(out, strings.TrimPrefix(r.env.Stream, "execution-"))
			}
		}
		return out
	}
	wantAsked := func(when string, want ...string) {
		t.Helper()
		for range 4 { // cycles enough for a recount to ask again
			h.advance(time.Second)
		}
		if got := asked(); !slices.Equal(got, want) {
			t.Fatalf("%s: the executor asked %v to cancel, want %v", when, got, want)
		}
		h.waitFor("the runs to see their cancellations", func() bool { return s.asked() == len(want) })
	}
	w1 := h.request("cip3", `{"tenant":"a"}`)
	wantAsked("one new request", runs[0])
	w2 := h.request("cip3", `{"tenant":"a"}`)
	wantAsked("two new requests", runs[0], runs[1])
	if x := h.loaded(runs[2]); x.Status() != domain.StatusRunning || x.CancelRequested() {
		t.Fatalf("the third run: %s, cancel requested %v", x.Status(), x.CancelRequested())
	}
	s.honour() // the asked runs stop now
	checkCancelled(t, h, runs[0], domain.OwnerWorker, "w1")
	checkCancelled(t, h, runs[1], domain.OwnerWorker, "w1")
	h.waitStatus(w1, domain.StatusRunning)
	h.waitStatus(w2, domain.StatusRunning)
	wantAsked("the waiters hold the freed slots", runs[0], runs[1])
	w3 := h.request("cip3", `{"tenant":"a"}`)
	wantAsked("a third request", runs[0], runs[1], runs[2])
	s.honour()
	checkCancelled(t, h, runs[2], domain.OwnerWorker, "w1")
	h.waitStatus(w3, domain.StatusRunning)
	s.finishAll()
	for _, id := range []string{w1, w2, w3} {
		h.waitStatus(id, domain.StatusCompleted)
	}
	h.auditClean()
}

// stubborn is a runner slow to honour cancellations: a run asked to stop
// goes on until honour, and every run ends (completed) at finishAll.
type stubborn struct {
	mu       sync.Mutex
	live     int
	stopping int
	stop     chan struct{} // closed by honour (and replaced)
	finish   chan struct{} // closed by finishAll
	once     sync.Once
}

func newStubborn() *stubborn {
	return &stubborn{stop: make(chan struct{}), finish: make(chan struct{})}
}

func (s *stubborn) Run(ctx context.Context, _ json.RawMessage) (json.RawMessage, error) {
	s.mu.Lock()
	s.live++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.live--
		s.mu.Unlock()
	}()
	select {
	case <-s.finish:
		return json.RawMessage(`{"done":true}`), nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.stopping++
	stop := s.stop
	s.mu.Unlock()
	select {
	case <-stop:
	case <-s.finish:
	}
	return nil, &runner.Interrupted{Err: fmt.Errorf("test.slow: %w", ctx.Err())}
}

// running returns how many runs are under way (asked to stop or not).
func (s *stubborn) running() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live
}

// asked returns how many runs have seen a request to stop.
func (s *stubborn) asked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopping
}

// honour lets the runs asked to stop so far stop.
func (s *stubborn) honour() {
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.stop)
	s.stop = make(chan struct{})
}

// finishAll ends every run, now and later.
func (s *stubborn) finishAll() { s.once.Do(func() { close(s.finish) }) }
