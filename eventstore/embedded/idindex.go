package embedded

import (
	"fmt"
	"hash/maphash"

	"github.com/google/uuid"
)

// idIndex finds an event's position by its id. It is an open-addressing
// hash table with linear probing whose slots hold positions, not ids: the
// id of the event at position p is posID[p], which the store keeps anyway.
// A slot is the position plus one in its low 40 bits (0: empty) and 24 bits
// of the id's hash above them, so that a probe rarely reads an id that does
// not match. It costs 8 bytes a slot at a load of at most 3/4 (11 to 21
// bytes an event) where a Go map of ids to positions costs 30 to 60, and it
// fills without allocating per event.
//
// The caller serialises writes (put, del) against each other and against
// reads, as it does for posID.
type idIndex struct {
	seed  maphash.Seed
	slots []uint64
	n     int
}

const (
	slotPosBits = 40
	slotPosMask = 1<<slotPosBits - 1
	// maxIndexedPosition is the largest position the index can hold: some
	// 10^12 events, far beyond what the store's in-memory indexes allow.
	maxIndexedPosition = slotPosMask - 1
)

// newIDIndex returns an empty index sized for n events.
func newIDIndex(n int) *idIndex {
	size := 16
	for size*3 < n*4 {
		size *= 2
	}
	return &idIndex{seed: maphash.MakeSeed(), slots: make([]uint64, size)}
}

// Len returns how many ids the index holds.
func (x *idIndex) Len() int { return x.n }

func (x *idIndex) hash(id uuid.UUID) uint64 { return maphash.Comparable(x.seed, id) }

// tag is the part of a hash a slot keeps.
func tag(h uint64) uint64 { return h >> slotPosBits << slotPosBits }

// get returns the position of the event whose id is id.
func (x *idIndex) get(id uuid.UUID, posID []uuid.UUID) (uint64, bool) {
	h := x.hash(id)
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return 0, false
		}
		if s&^slotPosMask == tag(h) {
			if p := s&slotPosMask - 1; posID[p] == id {
				return p, true
			}
		}
	}
}

// put adds the event at pos, whose id is posID[pos]. It reports false, and
// adds nothing, if that id is already in the index.
func (x *idIndex) put(pos uint64, posID []uuid.UUID) bool {
	if pos > maxIndexedPosition {
		panic(fmt.Sprintf("embedded: position %d is beyond what the id index holds", pos))
	}
	if (x.n+1)*4 > len(x.slots)*3 {
		x.grow(posID)
	}
	id := posID[pos]
	h := x.hash(id)
	mask := uint64(len(x.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			x.slots[i] = tag(h) | (pos + 1)
			x.n++
			return true
		}
		if s&^slotPosMask == tag(h) && posID[s&slotPosMask-1] == id {
			return false
		}
	}
}

// grow doubles the table.
func (x *idIndex) grow(posID []uuid.UUID) {
	old := x.slots
	x.slots = make([]uint64, 2*len(old))
	mask := uint64(len(x.slots) - 1)
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := x.hash(posID[s&slotPosMask-1]) & mask
		for x.slots[i] != 0 {
			i = (i + 1) & mask
		}
		x.slots[i] = s
	}
}

// del removes id, whose event is still at its position in posID (as are
// those of every other id in the index), if it is there.
func (x *idIndex) del(id uuid.UUID, posID []uuid.UUID) {
	h := x.hash(id)
	mask := uint64(len(x.slots) - 1)
	i := h & mask
	for ; ; i = (i + 1) & mask {
		s := x.slots[i]
		if s == 0 {
			return
		}
		if s&^slotPosMask == tag(h) && posID[s&slotPosMask-1] == id {
			break
		}
	}
	// Backward shift: move up every later entry of the run that may no
	// longer be found past the hole, so that no probe stops short.
	for j := i; ; {
		j = (j + 1) & mask
		s := x.slots[j]
		if s == 0 {
			break
		}
		home := x.hash(posID[s&slotPosMask-1]) & mask
		// The entry at j stays if its home lies cyclically in (i, j].
		if i <= j && i < home && home <= j || i > j && (i < home || home <= j) {
			continue
		}
		x.slots[i] = s
		i = j
	}
	x.slots[i] = 0
	x.n--
}
