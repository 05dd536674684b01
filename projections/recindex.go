package projections

import "hash/maphash"

// recIndex finds an execution's record by its id (the read model's execs):
// an open-addressing hash table (linear probing) whose entries keep no key
// of their own. A record's key is its id in the read model's order,
// (*order)[rec.seq], so an entry is 16 bytes where a map[string]*execRecord
// takes about 60 per execution; a tag (32 bits of the key's hash) spares
// looking at most records that do not match. Every record in the table must
// be at its place in order whenever the table is used.
type recIndex struct {
	seed  maphash.Seed
	order *[]string
	ents  []recEntry
	used  int // entries not free
	live  int // entries in use
}

// recEntry is an entry of recIndex: rec nil is a free entry, or a deleted
// one.
type recEntry struct {
	rec     *execRecord
	tag     uint32
	deleted bool
}

func newRecIndex(order *[]string, n int) *recIndex {
	x := &recIndex{seed: maphash.MakeSeed(), order: order}
	x.rehash(tableSize(n))
	return x
}

// tableSize returns the table size for n entries: a power of two, at most
// 3/4 full.
func tableSize(n int) int {
	size := 8
	for size*3 < n*4 {
		size *= 2
	}
	return size
}

func (x *recIndex) key(r *execRecord) string { return (*x.order)[r.seq] }

func (x *recIndex) rehash(size int) {
	old := x.ents
	x.ents, x.used, x.live = make([]recEntry, size), 0, 0
	mask := uint64(size - 1)
	for _, e := range old {
		if e.rec != nil {
			j := maphash.String(x.seed, x.key(e.rec)) & mask
			for x.ents[j].rec != nil {
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
func (x *recIndex) find(id string) (int, bool, uint32) {
	h := maphash.String(x.seed, id)
	tag := uint32(h >> 32)
	mask := uint64(len(x.ents) - 1)
	free := -1
	for j := h & mask; ; j = (j + 1) & mask {
		e := &x.ents[j]
		switch {
		case e.rec == nil && !e.deleted:
			if free < 0 {
				free = int(j)
			}
			return free, false, tag
		case e.rec == nil:
			if free < 0 {
				free = int(j)
			}
		case e.tag == tag && x.key(e.rec) == id:
			return int(j), true, tag
		}
	}
}

// get returns id's record, or nil.
func (x *recIndex) get(id string) *execRecord {
	if j, ok, _ := x.find(id); ok {
		return x.ents[j].rec
	}
	return nil
}

// put records rec as id's, which must be at (*order)[rec.seq].
func (x *recIndex) put(id string, rec *execRecord) {
	j, ok, tag := x.find(id)
	if ok {
		x.ents[j].rec = rec
		return
	}
	if (x.used+1)*4 > len(x.ents)*3 {
		// Full: grow, or only drop the deleted entries when they are many.
		size := max(tableSize(x.live+1), len(x.ents))
		if x.used-x.live < x.live/2 {
			size = max(size, 2*len(x.ents))
		}
		x.rehash(size)
		j, _, _ = x.find(id)
	}
	if !x.ents[j].deleted {
		x.used++
	}
	x.ents[j] = recEntry{rec: rec, tag: tag}
	x.live++
}

// remove deletes id's entry, if there is one. Call it while id is still at
// its place in order.
func (x *recIndex) remove(id string) {
	if j, ok, _ := x.find(id); ok {
		x.ents[j] = recEntry{deleted: true}
		x.live--
	}
}

// each calls fn for every id and record, in no particular order.
func (x *recIndex) each(fn func(id string, rec *execRecord)) {
	for _, e := range x.ents {
		if e.rec != nil {
			fn(x.key(e.rec), e.rec)
		}
	}
}
