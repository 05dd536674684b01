package postgres

import (
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

func mustRequest(t *testing.T, appends ...eventstore.StreamAppend) *request {
	t.Helper()
	r, err := newRequest(appends)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestDecideGroup: the requests of one group are decided one after another,
// each as if appended alone, and a failing one neither writes nor affects
// the others; positions stay dense across the ones that pass.
func TestDecideGroup(t *testing.T) {
	t.Parallel()
	stored := storetest.NewEvent("test.stored", nil)
	stored.Stream, stored.Version, stored.Position = "queue-q", 4, 9
	a, b, c := storetest.NewEvents("test.a", 2), storetest.NewEvents("test.b", 1), storetest.NewEvents("test.c", 3)
	group := []*request{
		mustRequest(t, eventstore.StreamAppend{Stream: "execution-x", Expected: eventstore.NoStream, Events: a}),
		// Stale once the first request is decided: fails, writes nothing.
		mustRequest(t, eventstore.StreamAppend{Stream: "execution-x", Expected: eventstore.NoStream, Events: b}),
		// Sees the first request's events.
		mustRequest(t, eventstore.StreamAppend{Stream: "execution-x", Expected: eventstore.Exact(1), Events: c}),
		// A re-append of the first request in the same group.
		mustRequest(t, eventstore.StreamAppend{Stream: "execution-x", Expected: eventstore.NoStream, Events: a}),
		// A re-append of a stored event.
		mustRequest(t, eventstore.StreamAppend{Stream: "queue-q", Expected: eventstore.Any, Events: []domain.Envelope{stored}}),
		// Half stored: a conflict.
		mustRequest(t, eventstore.StreamAppend{Stream: "queue-q", Expected: eventstore.Any, Events: []domain.Envelope{stored, storetest.NewEvent("test.new", nil)}}),
		// An AppendMulti whose second stream fails: nothing of it is written.
		mustRequest(t,
			eventstore.StreamAppend{Stream: "worker-w", Expected: eventstore.Any, Events: storetest.NewEvents("test.w", 1)},
			eventstore.StreamAppend{Stream: "queue-q", Expected: eventstore.Exact(3), Events: storetest.NewEvents("test.q", 1)},
		),
		mustRequest(t, eventstore.StreamAppend{Stream: "queue-q", Expected: eventstore.Exact(4), Events: b}),
	}
	p := decide(10, map[string]int64{"queue-q": 4}, map[uuid.UUID]*domain.Envelope{stored.ID: &stored}, group)

	want := []struct {
		res eventstore.AppendResult
		err error
	}{
		{eventstore.AppendResult{Version: 1, Position: 11}, nil},
		{err: eventstore.ErrWrongExpectedVersion},
		{eventstore.AppendResult{Version: 4, Position: 14}, nil},
		{eventstore.AppendResult{Version: 1, Position: 11}, nil},
		{eventstore.AppendResult{Version: 4, Position: 9}, nil},
		{err: eventstore.ErrIdempotencyConflict},
		{err: eventstore.ErrWrongExpectedVersion},
		{eventstore.AppendResult{Version: 5, Position: 15}, nil},
	}
	for i, w := range want {
		got := p.outcomes[i]
		if w.err != nil {
			if !errors.Is(got.err, w.err) {
				t.Errorf("request %d: error %v, want %v", i, got.err, w.err)
			}
			continue
		}
		if got.err != nil || got.res != w.res {
			t.Errorf("request %d: %+v, %v; want %+v", i, got.res, got.err, w.res)
		}
	}
	var wv *eventstore.WrongVersionError
	if !errors.As(p.outcomes[6].err, &wv) || wv.Stream != "queue-q" || wv.Actual != 4 || !wv.Exists {
		t.Errorf("AppendMulti failure: %v, want the WrongVersionError of queue-q at 4", p.outcomes[6].err)
	}
	if p.next != 16 {
		t.Errorf("next = %d, want 16", p.next)
	}
	wantRows := []struct {
		id       uuid.UUID
		stream   string
		version  uint64
		position uint64
	}{
		{a[0].ID, "execution-x", 0, 10}, {a[1].ID, "execution-x", 1, 11},
		{c[0].ID, "execution-x", 2, 12}, {c[1].ID, "execution-x", 3, 13}, {c[2].ID, "execution-x", 4, 14},
		{b[0].ID, "queue-q", 5, 15},
	}
	if len(p.rows) != len(wantRows) {
		t.Fatalf("%d rows to insert, want %d", len(p.rows), len(wantRows))
	}
	for i, w := range wantRows {
		r := p.rows[i]
		if r.ID != w.id || r.Stream != w.stream || r.Version != w.version || r.Position != w.position {
			t.Errorf("row %d: %s %s v%d p%d, want %s %s v%d p%d", i, r.ID, r.Stream, r.Version, r.Position, w.id, w.stream, w.version, w.position)
		}
	}
}

// TestNewRequest: what the store refuses before queueing, beyond
// eventstore.ValidateAppends: an id twice, and text PostgreSQL cannot hold.
func TestNewRequest(t *testing.T) {
	t.Parallel()
	e := storetest.NewEvent("test.e", nil)
	for name, c := range map[string]struct {
		spoil func(*domain.Envelope)
		ok    bool
	}{
		"fine":                {func(*domain.Envelope) {}, true},
		"unicode":             {func(e *domain.Envelope) { e.Type, e.Writer = "tëst.✓", "wörker-1" }, true},
		"NUL in type":         {func(e *domain.Envelope) { e.Type = "test\x00x" }, false},
		"bad UTF-8 in writer": {func(e *domain.Envelope) { e.Writer = "w\xff" }, false},
		"NUL in correlation":  {func(e *domain.Envelope) { e.CorrelationID = "\x00" }, false},
		"bad UTF-8 causation": {func(e *domain.Envelope) { e.CausationID = "\xc3" }, false},
	} {
		ev := e
		c.spoil(&ev)
		_, err := newRequest([]eventstore.StreamAppend{{Stream: "execution-1", Expected: eventstore.Any, Events: []domain.Envelope{ev}}})
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, eventstore.ErrInvalidEvent)) {
			t.Errorf("%s: %v, want ok=%v or ErrInvalidEvent", name, err, c.ok)
		}
	}
	_, err := newRequest([]eventstore.StreamAppend{
		{Stream: "execution-1", Expected: eventstore.Any, Events: []domain.Envelope{e}},
		{Stream: "execution-2", Expected: eventstore.Any, Events: []domain.Envelope{e}},
	})
	if !errors.Is(err, eventstore.ErrInvalidEvent) {
		t.Errorf("one id in two streams of one AppendMulti: %v, want ErrInvalidEvent", err)
	}
}
