package codec

import (
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// TestHotEventsNeedNoDecoding: the events of every execution's lifecycle
// are remembered by Encode without decoding (their types have a plan).
func TestHotEventsNeedNoDecoding(t *testing.T) {
	for _, typ := range []string{domain.TypeExecutionRequested, domain.TypeQueueGranted, domain.TypeExecutionScheduling, domain.TypeExecutionScheduled,
		domain.TypeExecutionRunning, domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeWorkerHeartbeat} {
		if Events.types[typ].plan == nil {
			t.Errorf("%s: no plan, so every Encode of it is decoded again", typ)
		}
	}
}

// TestMemo: a remembered event comes back only for the same id, type,
// schema version and data; a set keeps its two newest events; forget
// drops everything.
func TestMemo(t *testing.T) {
	var m memo
	env := func(id uuid.UUID, data string) *domain.Envelope {
		return &domain.Envelope{ID: id, Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(data)}
	}
	ev := domain.ExecutionRunning{Worker: "w"}
	a := uuid.New()
	if _, ok := m.get(env(a, `{}`)); ok {
		t.Fatal("a hit in an empty memo")
	}
	buf := []byte(`{"worker":"w"}`)
	m.put(&domain.Envelope{ID: a, Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: buf}, ev)
	buf[2] = 'X' // the writer reuses its buffer
	if got, ok := m.get(env(a, `{"worker":"w"}`)); !ok || got != domain.Event(ev) {
		t.Fatalf("get = %v, %v; want the event put", got, ok)
	}
	for _, other := range []*domain.Envelope{
		env(a, `{"worker":"v"}`),
		{ID: a, Type: domain.TypeExecutionCompleted, SchemaVersion: 1, Data: []byte(`{"worker":"w"}`)},
		{ID: a, Type: domain.TypeExecutionRunning, SchemaVersion: 2, Data: []byte(`{"worker":"w"}`)},
		env(uuid.Nil, `{"worker":"w"}`),
	} {
		if _, ok := m.get(other); ok {
			t.Errorf("a hit for %+v", other)
		}
	}
	// Three ids of one set: the oldest leaves.
	same := []uuid.UUID{a}
	for len(same) < 3 {
		if id := uuid.New(); memoSet(id) == memoSet(a) {
			same = append(same, id)
		}
	}
	m.put(env(same[1], `{}`), ev)
	m.put(env(same[2], `{}`), ev)
	if _, ok := m.get(env(a, `{"worker":"w"}`)); ok {
		t.Error("the oldest of a full set is still there")
	}
	for _, id := range same[1:] {
		if _, ok := m.get(env(id, `{}`)); !ok {
			t.Errorf("%s left the set too early", id)
		}
	}
	m.forget()
	if _, ok := m.get(env(same[2], `{}`)); ok {
		t.Error("a hit after forget")
	}
}

// TestMemoKeepsNoLargeEvent: an event whose data is over memoMaxData is
// not remembered (each fold decodes it), so the memo's 32,768 slots hold
// at most that much data each, not a megabyte each.
func TestMemoKeepsNoLargeEvent(t *testing.T) {
	var m memo
	ev := domain.ExecutionCompleted{}
	for _, n := range []int{memoMaxData, memoMaxData + 1} {
		e := &domain.Envelope{ID: uuid.New(), Type: domain.TypeExecutionCompleted, SchemaVersion: 1, Data: []byte(strings.Repeat(" ", n))}
		m.put(e, ev)
		if _, ok := m.get(e); ok != (n <= memoMaxData) {
			t.Errorf("data of %d bytes remembered: %v, want %v", n, ok, n <= memoMaxData)
		}
	}
}
