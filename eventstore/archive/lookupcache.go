package archive

import (
	"container/list"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// DefaultFilterCacheBytes is how many bytes of segments' look-up tables
// (their stream filters and gzip member tables, see lookup) an Archive
// keeps in memory, the most recently used first (reads fill it; writes do
// not). A segment of 1,000,000
// events (some 170,000 streams) has a filter of about 210 KB and a member
// table of about 4 KB, so the default holds those of about 80 segments; the
// tables of older segments are read again from their index files when a
// read needs them (a look-up of an execution archived long ago reads the
// index header of every segment it passes). Memory stays bounded however
// long the archive grows: what a segment keeps outside the cache is its
// Segment summary, about 200 bytes; its tables kept for ever would be about
// 0.2 bytes per archived event, gigabytes over years.
const DefaultFilterCacheBytes = 16 << 20

// lookup is what reads need of a segment's index header beyond its
// Segment: the stream filter (does the segment hold a stream?) and the
// gzip members (where does a position's member start?).
type lookup struct {
	filter []byte
	blocks []block
}

// lookupOverhead approximates a cached lookup's bytes beyond its slices'
// contents (the entry, the list element, the map slot).
const lookupOverhead = 160

func (l *lookup) bytes() int { return lookupOverhead + len(l.filter) + 16*len(l.blocks) }

// lookupCache holds segments' lookups by the segment's first position,
// least recently used out first, within a budget of bytes.
type lookupCache struct {
	mu     sync.Mutex
	budget int
	bytes  int
	order  *list.List               // of *cachedLookup, most recent at the front
	byPos  map[uint64]*list.Element // segment's first position → its element
}

type cachedLookup struct {
	first uint64
	l     *lookup
}

func newLookupCache(budget int) *lookupCache {
	return &lookupCache{budget: budget, order: list.New(), byPos: map[uint64]*list.Element{}}
}

// get returns the cached lookup of the segment starting at first.
func (c *lookupCache) get(first uint64) (*lookup, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byPos[first]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cachedLookup).l, true
}

// put caches l for the segment starting at first, dropping the least
// recently used lookups beyond the budget (one larger than the whole
// budget is not kept).
func (c *lookupCache) put(first uint64, l *lookup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byPos[first]; ok {
		c.bytes -= el.Value.(*cachedLookup).l.bytes()
		c.order.Remove(el)
		delete(c.byPos, first)
	}
	if l.bytes() > c.budget {
		return
	}
	c.byPos[first] = c.order.PushFront(&cachedLookup{first: first, l: l})
	c.bytes += l.bytes()
	c.evict()
}

// evict drops the least recently used lookups until the budget holds; c.mu
// must be held.
func (c *lookupCache) evict() {
	for c.bytes > c.budget {
		old := c.order.Back()
		cl := old.Value.(*cachedLookup)
		c.order.Remove(old)
		delete(c.byPos, cl.first)
		c.bytes -= cl.l.bytes()
	}
}

// size returns the bytes held.
func (c *lookupCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// setBudget changes the budget, dropping what exceeds it.
func (c *lookupCache) setBudget(budget int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget = max(budget, 0)
	c.evict()
}

// lookup returns segment s's lookup: from the cache, else read from its
// index file (and cached).
// lookupReads counts the index headers lookup reads (tests).
var lookupReads atomic.Int64

func (a *Archive) lookup(s *segment) (*lookup, error) {
	if l, ok := a.lookups.get(s.First); ok {
		return l, nil
	}
	lookupReads.Add(1)
	h, err := readHeader(a.fs, filepath.Join(a.dir, indexFile(s.First, s.Last)))
	if err != nil {
		return nil, err
	}
	l := &lookup{filter: h.Filter, blocks: h.Blocks}
	a.lookups.put(s.First, l)
	return l, nil
}
