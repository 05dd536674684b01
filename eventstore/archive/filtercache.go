package archive

import (
	"container/list"
	"path/filepath"
	"sync"
)

// DefaultFilterCacheBytes is how many bytes of segments' stream filters an
// Archive keeps in memory, the most recently used first. A segment of
// 1,000,000 events (some 170,000 streams) has a filter of about 210 KB, so
// the default holds those of about 80 segments; the filters of older
// segments are read again from their index files when a stream look-up
// needs them (a look-up of an execution archived long ago reads the index
// header of every segment it passes). Memory stays bounded however long the
// archive grows: a filter per segment kept for ever would be about 0.2
// bytes per archived event, gigabytes over years.
const DefaultFilterCacheBytes = 16 << 20

// filterCache holds segments' stream filters by the segment's first
// position, least recently used out first, within a budget of bytes.
type filterCache struct {
	mu     sync.Mutex
	budget int
	bytes  int
	order  *list.List               // of *cachedFilter, most recent at the front
	byPos  map[uint64]*list.Element // segment's first position → its element
}

type cachedFilter struct {
	first  uint64
	filter []byte
}

func newFilterCache(budget int) *filterCache {
	return &filterCache{budget: budget, order: list.New(), byPos: map[uint64]*list.Element{}}
}

// get returns the cached filter of the segment starting at first.
func (c *filterCache) get(first uint64) ([]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byPos[first]
	if !ok {
		return nil, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*cachedFilter).filter, true
}

// put caches filter for the segment starting at first, dropping the least
// recently used filters beyond the budget (a filter larger than the whole
// budget is not kept).
func (c *filterCache) put(first uint64, filter []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.byPos[first]; ok {
		c.bytes -= len(el.Value.(*cachedFilter).filter)
		c.order.Remove(el)
		delete(c.byPos, first)
	}
	if len(filter) > c.budget {
		return
	}
	c.byPos[first] = c.order.PushFront(&cachedFilter{first: first, filter: filter})
	c.bytes += len(filter)
	c.evict()
}

// evict drops the least recently used filters until the budget holds; c.mu
// must be held.
func (c *filterCache) evict() {
	for c.bytes > c.budget {
		old := c.order.Back()
		cf := old.Value.(*cachedFilter)
		c.order.Remove(old)
		delete(c.byPos, cf.first)
		c.bytes -= len(cf.filter)
	}
}

// size returns the bytes of filters held.
func (c *filterCache) size() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// setBudget changes the budget, dropping what exceeds it.
func (c *filterCache) setBudget(budget int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.budget = max(budget, 0)
	c.evict()
}

// filter returns segment s's stream filter: from the cache, else read from
// its index file (and cached).
func (a *Archive) filter(s *segment) ([]byte, error) {
	if f, ok := a.filters.get(s.First); ok {
		return f, nil
	}
	h, err := readHeader(filepath.Join(a.dir, indexFile(s.First, s.Last)))
	if err != nil {
		return nil, err
	}
	a.filters.put(s.First, h.Filter)
	return h.Filter, nil
}
