package postgres

import (
	"fmt"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// fedRows makes n committed-looking events at positions from first on.
func fedRows(first uint64, n int, typ string) []domain.Envelope {
	evs := storetest.NewEvents(typ, n)
	for i := range evs {
		evs[i].Stream = fmt.Sprintf("execution-%d", first)
		evs[i].Position, evs[i].Version = first+uint64(i), uint64(i)
	}
	return evs
}

// wantRead checks what a subscription at next gets from f.
func wantRead(t *testing.T, f *feed, next uint64, filter eventstore.Filter, what feedAnswer, from, upto uint64) {
	t.Helper()
	evs, gotUpto, got := f.read(next, filter, 1000)
	if got != what {
		t.Fatalf("read(%d): answer %d, want %d", next, got, what)
	}
	if what != feedServe {
		return
	}
	if gotUpto != upto {
		t.Fatalf("read(%d): up to %d, want %d", next, gotUpto, upto)
	}
	p := from
	for _, e := range evs {
		if e.Position < p {
			t.Fatalf("read(%d): position %d after %d", next, e.Position, p)
		}
		if !filter.Match(&e) {
			t.Fatalf("read(%d): event %s does not pass the filter", next, e.Type)
		}
		p = e.Position + 1
	}
}

// TestFeedOrder: groups published in commit order form one run; a group
// published before an earlier claimed one waits for it; a dropped claim lets
// the later group start a new run; positions the feed does not hold are
// read from the database once known, and waited for otherwise.
func TestFeedOrder(t *testing.T) {
	t.Parallel()
	var f feed
	all := eventstore.Filter{}
	wantRead(t, &f, 0, all, feedWait, 0, 0) // nothing known yet

	a := f.claim(0)
	f.publish(a, 0, fedRows(0, 3, "test.a"))
	wantRead(t, &f, 0, all, feedServe, 0, 3)
	wantRead(t, &f, 2, all, feedServe, 2, 3)
	wantRead(t, &f, 3, all, feedWait, 0, 0)

	// Two groups in flight; the second publishes first.
	b, c := f.claim(3), f.claim(5)
	f.publish(c, 5, fedRows(5, 2, "test.c"))
	wantRead(t, &f, 3, all, feedWait, 0, 0) // b is about to publish 3
	f.publish(b, 3, fedRows(3, 2, "test.b"))
	wantRead(t, &f, 0, all, feedServe, 0, 7)
	wantRead(t, &f, 0, eventstore.Filter{Types: []string{"test.c"}}, feedServe, 5, 7)

	// A claim that fails: the later group restarts the run after the gap,
	// which another writer filled.
	d, e := f.claim(7), f.claim(9)
	f.publish(e, 9, fedRows(9, 1, "test.e"))
	wantRead(t, &f, 7, all, feedWait, 0, 0)
	f.unclaim(d)
	wantRead(t, &f, 9, all, feedServe, 9, 10)
	wantRead(t, &f, 7, all, feedRead, 0, 0) // committed by someone, not here
	wantRead(t, &f, 0, all, feedRead, 0, 0) // dropped with the old run

	// Another writer's commit, heard of: read from the database.
	f.heard(12)
	wantRead(t, &f, 10, all, feedRead, 0, 0)
	wantRead(t, &f, 12, all, feedWait, 0, 0)
	if !f.covers(10) || f.covers(11) {
		t.Fatalf("covers: the run ends at 10")
	}
}

// TestFeedBounded: the feed keeps about feedSize events, dropping whole
// groups from the front, and its events do not share memory with the rows
// it was given.
func TestFeedBounded(t *testing.T) {
	t.Parallel()
	var f feed
	const per = 1000
	var first uint64
	var last []domain.Envelope
	for range feedSize/per + 5 {
		last = fedRows(first, per, "test.x")
		f.publish(f.claim(first), first, last)
		first += per
	}
	if f.events > feedSize || f.events < feedSize-per {
		t.Fatalf("feed holds %d events, want about %d", f.events, feedSize)
	}
	wantRead(t, &f, 0, eventstore.Filter{}, feedRead, 0, 0)
	wantRead(t, &f, first-per, eventstore.Filter{}, feedServe, first-per, first)
	want := string(last[0].Data)
	last[0].Data[0] ^= 0xff
	evs, _, _ := f.read(first-per, eventstore.Filter{}, 1)
	if string(evs[0].Data) != want {
		t.Fatalf("the feed's event changed with the appender's buffer: %q, want %q", evs[0].Data, want)
	}
	mine := copyEvents(evs)
	mine[0].Data[0] ^= 0xff
	if evs, _, _ = f.read(first-per, eventstore.Filter{}, 1); string(evs[0].Data) != want {
		t.Fatalf("the feed's event changed with a copy handed out: %q, want %q", evs[0].Data, want)
	}
}
