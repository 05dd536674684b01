// Package waitfor is the one way a test waits for something to happen:
// it polls a condition until it holds, and fails the test, naming what it
// waited for, when it does not hold in time.
package waitfor

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Limit is how long That waits before it fails the test. It is generous
// because it is only reached by a broken test, and the machines that run
// the race detector are slow.
const Limit = 60 * time.Second

// Interval is how often That checks the condition.
const Interval = 10 * time.Millisecond

// That returns as soon as cond returns true, checking it every Interval.
// If cond is still false after Limit, it fails the test with
// "gave up waiting for <what>" followed by each of show (for example a
// process's output so far). Inside a testing/synctest bubble it waits in
// the bubble's time.
func That(t testing.TB, what string, cond func() bool, show ...fmt.Stringer) {
	t.Helper()
	deadline := time.Now().Add(Limit)
	for !cond() {
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, s := range show {
				b.WriteString("\n")
				b.WriteString(s.String())
			}
			t.Fatalf("gave up waiting for %s after %s%s", what, Limit, b.String())
		}
		time.Sleep(Interval)
	}
}

// Note shows a value computed when That fails, such as the last state
// that was seen: waitfor.That(t, what, cond, waitfor.Note(func() string {…})).
type Note func() string

func (n Note) String() string { return n() }
