package codec

// The decode memo: the events a process decoded (or encoded) recently, by
// id, so that the folds of one process decode each event once.

import (
	"bytes"
	"encoding/binary"
	"sync"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// memoSets × memoWays is how many decoded events a Codec remembers:
// enough for the folds of one process to read an event within some ten
// thousand events of each other (each reads the log as it commits).
const (
	memoBits = 14
	memoSets = 1 << memoBits
	memoWays = 2
	// memoMaxData is the largest event data the memo keeps: a larger
	// event is decoded by each fold that reads it. (The memo keeps its data
	// and its decoded event; without a bound, 32,768 events of up to 1 MiB
	// each could stay in memory twice over. Bounded, the memo holds at
	// most 32,768 × 4 KiB of data.)
	memoMaxData = 4 << 10
)

// memo remembers recently decoded events by id in a set-associative table:
// an id's set is picked by a hash of it, and a new event pushes the older
// of the set's two out. A look-up reads one set, where a map of that size
// cost two misses of the processor's cache and a probe.
type memo struct {
	mu    sync.Mutex
	slots []memoSlot // memoSets × memoWays, allocated on first use
}

type memoSlot struct {
	id     uuid.UUID
	typ    string
	schema int
	data   []byte
	ev     domain.Event
}

// memoSet returns the index of the first slot of id's set.
func memoSet(id uuid.UUID) int {
	h := binary.LittleEndian.Uint64(id[:8]) ^ binary.LittleEndian.Uint64(id[8:])*0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return int(h>>(64-memoBits)) * memoWays
}

func (m *memo) get(env *domain.Envelope) (domain.Event, bool) {
	if env.ID == (uuid.UUID{}) {
		return nil, false
	}
	i := memoSet(env.ID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		return nil, false
	}
	for w := range memoWays {
		e := &m.slots[i+w]
		if e.id == env.ID {
			if e.typ != env.Type || e.schema != env.SchemaVersion || !bytes.Equal(e.data, env.Data) {
				return nil, false
			}
			return e.ev, true
		}
	}
	return nil, false
}

func (m *memo) put(env *domain.Envelope, ev domain.Event) {
	if env.ID == (uuid.UUID{}) || len(env.Data) > memoMaxData {
		return
	}
	// A copy: the caller may reuse its buffer.
	e := memoSlot{id: env.ID, typ: env.Type, schema: env.SchemaVersion, data: bytes.Clone(env.Data), ev: ev}
	i := memoSet(env.ID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		m.slots = make([]memoSlot, memoSets*memoWays)
	}
	set := m.slots[i : i+memoWays]
	for w := range set {
		if set[w].id == env.ID {
			set[w] = e
			return
		}
	}
	copy(set[1:], set[:len(set)-1]) // the oldest leaves
	set[0] = e
}

// forget drops everything remembered.
func (m *memo) forget() {
	m.mu.Lock()
	m.slots = nil
	m.mu.Unlock()
}
