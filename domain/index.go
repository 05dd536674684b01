package domain

// Index is the table behind the lookups by id that must stay small when they
// hold millions of entries: the queues' waiting executions here, the read
// model's execution records in projections.

import "hash/maphash"

// Keys tells an Index the key of an entry: the id that the value p, at
// index i of whatever p holds, names. An entry keeps no key of its own.
type Keys[P any] interface {
	Key(p *P, i int32) string
}

// Index finds a pointer and an index (p, i) by a string key, which Keys
// reads from (p, i) itself: an open-addressing hash table (linear probing)
// whose entry is 16 bytes, where a map[string] of the same takes 60 to 80
// per key. A tag (32 bits of the key's hash) spares asking Keys about most
// entries that do not match. The key of every entry must be what it was
// when put, whenever the index is used: move or clear what an entry points
// to only after its new Put or its Remove.
//
// The zero Index, with the zero K, is empty and ready to use.
type Index[P any, K Keys[P]] struct {
	keys K
	seed maphash.Seed
	ents []indexEntry[P]
	used int // entries not free
	live int // entries in use
}

// indexEntry is an entry of an Index: p nil is a free entry (i 0) or a
// deleted one (i -1).
type indexEntry[P any] struct {
	p   *P
	i   int32
	tag uint32
}

// NewIndex returns an empty index with room for n entries.
func NewIndex[P any, K Keys[P]](keys K, n int) *Index[P, K] {
	x := &Index[P, K]{keys: keys}
	x.Reserve(n)
	return x
}

// Len returns how many entries x holds.
func (x *Index[P, K]) Len() int { return x.live }

// Reserve makes room for n entries.
func (x *Index[P, K]) Reserve(n int) {
	if size := indexSize(n); size > len(x.ents) {
		x.rehash(size)
	}
}

// indexSize returns the table size for n entries: a power of two, at most
// 3/4 full.
func indexSize(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
}

func (x *Index[P, K]) hash(key string) uint64 { return maphash.String(x.seed, key) }

// rehash rebuilds the table at size, dropping deleted entries.
func (x *Index[P, K]) rehash(size int) {
	old := x.ents
	x.ents, x.used, x.live = make([]indexEntry[P], size), 0, 0
	if x.seed == (maphash.Seed{}) {
		x.seed = maphash.MakeSeed()
	}
	mask := uint64(size - 1)
	for _, e := range old {
		if e.p != nil {
			j := x.hash(x.keys.Key(e.p, e.i)) & mask
			for x.ents[j].p != nil {
				j = (j + 1) & mask
			}
			x.ents[j] = e
			x.used++
			x.live++
		}
	}
}

// find returns the entry of key and true, or where to put it and false, and
// key's tag.
func (x *Index[P, K]) find(key string) (int, bool, uint32) {
	h := x.hash(key)
	tag := uint32(h >> 32)
	if len(x.ents) == 0 {
		return -1, false, tag
	}
	mask := uint64(len(x.ents) - 1)
	free := -1
	for j := h & mask; ; j = (j + 1) & mask {
		e := &x.ents[j]
		switch {
		case e.p == nil && e.i == 0:
			if free < 0 {
				free = int(j)
			}
			return free, false, tag
		case e.p == nil:
			if free < 0 {
				free = int(j)
			}
		case e.tag == tag && x.keys.Key(e.p, e.i) == key:
			return int(j), true, tag
		}
	}
}

// Lookup returns the entry of key, or nil.
func (x *Index[P, K]) Lookup(key string) (p *P, i int) {
	if j, ok, _ := x.find(key); ok {
		return x.ents[j].p, int(x.ents[j].i)
	}
	return nil, 0
}

// Get returns the pointer of key's entry, or nil.
func (x *Index[P, K]) Get(key string) *P {
	p, _ := x.Lookup(key)
	return p
}

// Put makes (p, i) key's entry. p must not be nil, and Keys must give key
// for it.
func (x *Index[P, K]) Put(key string, p *P, i int) {
	j, ok, tag := x.find(key)
	if ok {
		x.ents[j] = indexEntry[P]{p: p, i: int32(i), tag: tag}
		return
	}
	if (x.used+1)*4 > len(x.ents)*3 {
		// Full: grow, or only drop the deleted entries when they are many.
		size := max(indexSize(x.live+1), len(x.ents))
		if x.used-x.live < x.live/2 {
			size = max(size, 2*len(x.ents))
		}
		x.rehash(size)
		j, _, _ = x.find(key)
	}
	if x.ents[j].i == 0 {
		x.used++
	}
	x.ents[j] = indexEntry[P]{p: p, i: int32(i), tag: tag}
	x.live++
}

// Remove deletes key's entry, if there is one.
func (x *Index[P, K]) Remove(key string) {
	if j, ok, _ := x.find(key); ok {
		x.ents[j] = indexEntry[P]{i: -1}
		x.live--
	}
}

// Renumber subtracts by from the index of the entries of p whose index is
// in [from, to): those Keys gives a key for (a place for which it gives ""
// holds nothing). Keys must give every entry's key until Renumber returns;
// then the things p holds are to move by as much.
func (x *Index[P, K]) Renumber(p *P, from, to, by int) {
	var moved []int
	for i := from; i < to; i++ {
		if key := x.keys.Key(p, int32(i)); key != "" {
			if j, ok, _ := x.find(key); ok && x.ents[j].p == p && int(x.ents[j].i) == i {
				moved = append(moved, j)
			}
		}
	}
	for _, j := range moved {
		x.ents[j].i -= int32(by)
	}
}

// Each calls fn with every entry and its key, in no particular order. fn
// must not change x.
func (x *Index[P, K]) Each(fn func(key string, p *P, i int)) {
	for _, e := range x.ents {
		if e.p != nil {
			fn(x.keys.Key(e.p, e.i), e.p, int(e.i))
		}
	}
}
