package domain

import "hash/maphash"

// placement is where a live execution is: its key queue, and its index in
// that queue's waiting items, or -1 once it is granted.
type placement struct {
	kq *KeyQueue
	i  int
}

// locator finds where a live execution is (Queues' where). The waiting ones,
// of which there may be millions, are in waitIndex, whose entries are only
// placements; the granted ones, as many as the slots, in a map.
type locator struct {
	waiting waitIndex
	granted map[string]*KeyQueue
}

func newLocator(waiting int) *locator {
	l := &locator{granted: map[string]*KeyQueue{}}
	l.waiting.reserve(waiting)
	return l
}

// get returns where execution id is.
func (l *locator) get(id string) (placement, bool) {
	if j, ok, _ := l.waiting.find(id); ok {
		return l.waiting.ents[j].placement(), true
	}
	if kq, ok := l.granted[id]; ok {
		return placement{kq: kq, i: -1}, true
	}
	return placement{}, false
}

// wait records that id waits at kq.waiting.items[i], which must hold it.
func (l *locator) wait(id string, kq *KeyQueue, i int) {
	delete(l.granted, id)
	l.waiting.set(id, kq, i)
}

// grant records that id holds a slot of kq. Call it before the waiter's
// slot is cleared: the waiting entry is found through it.
func (l *locator) grant(id string, kq *KeyQueue) {
	l.waiting.remove(id)
	l.granted[id] = kq
}

// remove forgets id. Call it before the waiter's slot is cleared.
func (l *locator) remove(id string) {
	l.waiting.remove(id)
	delete(l.granted, id)
}

// waitIndex is an open-addressing hash table (linear probing) of the
// places of waiting executions. It keeps no key of its own: an entry's key
// is the id in the slot it points to, so an entry is 16 bytes where a
// map[string]placement takes about 80 per waiter; a tag (32 bits of the
// key's hash) spares looking at the slots of most entries that do not match.
// Every slot an entry points to must hold that entry's id whenever the table
// is used.
type waitIndex struct {
	seed maphash.Seed
	ents []waitEntry
	used int // entries not free
	live int // entries in use
}

// waitEntry is a placement in waitIndex: kq nil is a free entry (i 0) or a
// deleted one (i -1).
type waitEntry struct {
	kq  *KeyQueue
	i   int32
	tag uint32
}

func (e waitEntry) placement() placement { return placement{kq: e.kq, i: int(e.i)} }

func (x *waitIndex) key(e waitEntry) string { return e.kq.waiting.items[e.i].id }

func (x *waitIndex) hash(id string) uint64 { return maphash.String(x.seed, id) }

// reserve makes room for n entries.
func (x *waitIndex) reserve(n int) {
	if size := sizeFor(n); size > len(x.ents) {
		x.rehash(size)
	}
}

// sizeFor returns the table size for n entries: a power of two, at most
// 3/4 full.
func sizeFor(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
}

// rehash rebuilds the table at size, dropping deleted entries.
func (x *waitIndex) rehash(size int) {
	old := x.ents
	x.ents, x.used, x.live = make([]waitEntry, size), 0, 0
	if x.seed == (maphash.Seed{}) {
		x.seed = maphash.MakeSeed()
	}
	mask := uint64(size - 1)
	for _, e := range old {
		if e.kq != nil {
			j := x.hash(x.key(e)) & mask
			for x.ents[j].kq != nil {
				j = (j + 1) & mask
			}
			x.ents[j] = e
			x.used++
			x.live++
		}
	}
}

// find returns the entry of id and true, or where to put it and false, and
// id's tag.
func (x *waitIndex) find(id string) (int, bool, uint32) {
	h := x.hash(id)
	tag := uint32(h >> 32)
	if len(x.ents) == 0 {
		return -1, false, tag
	}
	mask := uint64(len(x.ents) - 1)
	free := -1
	for j := h & mask; ; j = (j + 1) & mask {
		e := &x.ents[j]
		switch {
		case e.kq == nil && e.i == 0:
			if free < 0 {
				free = int(j)
			}
			return free, false, tag
		case e.kq == nil:
			if free < 0 {
				free = int(j)
			}
		case e.tag == tag && x.key(*e) == id:
			return int(j), true, tag
		}
	}
}

// set puts id at kq's items[i].
func (x *waitIndex) set(id string, kq *KeyQueue, i int) {
	j, ok, tag := x.find(id)
	if ok {
		x.ents[j] = waitEntry{kq: kq, i: int32(i), tag: tag}
		return
	}
	if (x.used+1)*4 > len(x.ents)*3 {
		// Full: grow, or only drop the deleted entries when they are many.
		size := max(sizeFor(x.live+1), len(x.ents))
		if x.used-x.live < x.live/2 {
			size = max(size, 2*len(x.ents))
		}
		x.rehash(size)
		j, _, _ = x.find(id)
	}
	if x.ents[j].i == 0 {
		x.used++
	}
	x.ents[j] = waitEntry{kq: kq, i: int32(i), tag: tag}
	x.live++
}

// remove deletes id's entry, if there is one.
func (x *waitIndex) remove(id string) {
	if j, ok, _ := x.find(id); ok {
		x.ents[j] = waitEntry{i: -1}
		x.live--
	}
}
