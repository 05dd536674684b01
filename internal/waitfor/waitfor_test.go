package waitfor

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// recorder is a testing.TB that records a failure instead of ending the
// test, so that That's failure can be checked.
type recorder struct {
	testing.TB
	msg    string
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = fmt.Sprintf(format, args...)
	// Fatalf does not return in a real test; stop the polling goroutine.
	panic(errStop)
}

type stop struct{}

var errStop = stop{}

func run(r *recorder, f func()) {
	defer func() {
		if v := recover(); v != nil && v != errStop {
			panic(v)
		}
	}()
	f()
}

type text string

func (s text) String() string { return string(s) }

// TestReturnsOnceTheConditionHolds: That returns as soon as the condition
// turns true (in bubble time: a few intervals, not Limit).
func TestReturnsOnceTheConditionHolds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var done atomic.Bool
		go func() {
			time.Sleep(time.Second)
			done.Store(true)
		}()
		start := time.Now()
		That(t, "the flag", done.Load)
		if took := time.Since(start); took < time.Second || took > time.Second+2*Interval {
			t.Fatalf("That returned after %s, want about 1s", took)
		}
	})
}

// TestFailsNamingWhatItWaitedFor: a condition that never holds fails the
// test after Limit with a message that names it and shows the extras.
func TestFailsNamingWhatItWaitedFor(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := &recorder{TB: t}
		start := time.Now()
		run(r, func() {
			That(r, "the moon", func() bool { return false }, text("output so far"), Note(func() string { return "last seen: 7" }))
		})
		if !r.failed {
			t.Fatal("That returned without failing")
		}
		if took := time.Since(start); took < Limit {
			t.Fatalf("That failed after %s, before Limit %s", took, Limit)
		}
		if !strings.Contains(r.msg, "gave up waiting for the moon") || !strings.Contains(r.msg, "output so far") || !strings.Contains(r.msg, "last seen: 7") {
			t.Fatalf("message %q does not name what it waited for and the extras", r.msg)
		}
	})
}
