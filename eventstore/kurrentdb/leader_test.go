package kurrentdb

import (
	"strings"
	"testing"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// TestRequiresLeader: the server sees requires-leader on every call of the
// store by default, and on an append's own reads even when reads may go to
// a follower.
func TestRequiresLeader(t *testing.T) {
	t.Parallel()
	for _, followers := range []bool{false, true} {
		f, s := openFake(t, Options{FollowerReads: followers})
		ctx := t.Context()
		f.calls()
		mustAppend(t, s, "execution-1", eventstore.NoStream, storetest.NewEvent("test.l", nil))
		_, _ = s.Append(ctx, "execution-1", eventstore.Exact(5), storetest.NewEvent("test.l", nil)) // a wrong version: the search reads
		appendCalls := f.calls()
		if _, err := s.ReadStream(ctx, "execution-1", 0, 10); err != nil {
			t.Fatal(err)
		}
		mustReadAll(t, s)
		if _, err := s.Head(ctx); err != nil {
			t.Fatal(err)
		}
		subscribeN(t, s, 0, eventstore.Filter{}, 1)
		readCalls := f.calls()
		if len(appendCalls) < 4 || len(readCalls) < 4 {
			t.Fatalf("the fake saw %d calls for the appends and %d for the reads", len(appendCalls), len(readCalls))
		}
		checked := 0
		check := func(calls []fakeCall, want bool, what string) {
			for _, c := range calls {
				if !strings.HasPrefix(c.method, "/event_store.client.streams.Streams/") {
					continue
				}
				checked++
				if got := strings.Join(c.md.Get(requiresLeader), ",") == "true"; got != want {
					t.Errorf("FollowerReads %v: %s: %s carries requires-leader %q, want it %v", followers, what, c.method, c.md.Get(requiresLeader), want)
				}
			}
		}
		check(appendCalls, true, "an append")
		check(readCalls, !followers, "a read")
		if checked < 8 {
			t.Fatalf("only %d calls of the Streams service", checked)
		}
	}
}
