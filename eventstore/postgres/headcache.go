package postgres

import (
	"math"
	"sync"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// headCache remembers streams' last versions as this Store's commits left
// them, with the position of that last event, for appends with Any or
// StreamExists, and the heads the group in flight will leave (pending), for
// the group decided after it. Both are only assumptions: the append
// statement checks them.
type headCache struct {
	mu       sync.Mutex
	seq      uint64                // groups decided
	cur, old map[string]cachedHead // two generations: cur is cleared into old when full
	pending  map[string]cachedHead
}

type cachedHead struct {
	last int64  // last version, -1: no events
	pos  int64  // position of the event at last, -1: not known
	seq  uint64 // the group that left it
}

// headCacheSize bounds one generation of the cache.
const headCacheSize = 50_000

// newStream is the skip position of a stream assumed to have no events: its
// first event enters the streams table, whose primary key refuses it if the
// stream has events anywhere in the live log.
const newStream = math.MaxInt64

func (h *headCache) get(stream string) (cachedHead, bool) {
	if v, ok := h.cur[stream]; ok {
		return v, true
	}
	v, ok := h.old[stream]
	return v, ok
}

// assume returns the head to assume for every stream of group, in the
// order the streams first appear, with the group's sequence number; ok is
// false if some stream's head cannot be assumed (an append with Any or
// StreamExists to a stream this Store has not seen lately). For each stream
// it takes, in order: the head the group in flight will leave, the head the
// first append to it expects (Exact, NoStream), the cached head. skip[i]
// says where streams[i]'s assumed head is known to be in the log: newStream
// if it is assumed to have no events, the position of its last event if a
// commit of this Store left exactly that head, -1 if not known (see
// headsToCheck).
func (h *headCache) assume(group []*request) (heads map[string]int64, streams []string, lasts, skip []int64, seq uint64, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	heads = make(map[string]int64)
	for _, r := range group {
		for _, a := range r.appends {
			if _, seen := heads[a.Stream]; seen {
				continue
			}
			c, cached := h.get(a.Stream)
			last, assumed := int64(0), false
			if p, ok := h.pending[a.Stream]; ok {
				last, assumed = p.last, true
			} else if v, exact := a.Expected.Exact(); exact {
				last, assumed = int64(v), true
			} else if a.Expected == eventstore.NoStream {
				last, assumed = -1, true
			} else if cached {
				last, assumed = c.last, true
			}
			if !assumed {
				return nil, nil, nil, nil, 0, false
			}
			heads[a.Stream] = last
			streams = append(streams, a.Stream)
			lasts = append(lasts, last)
			switch {
			case last == -1:
				skip = append(skip, newStream)
			case cached && c.last == last:
				skip = append(skip, c.pos)
			default:
				skip = append(skip, -1)
			}
		}
	}
	h.seq++
	return heads, streams, lasts, skip, h.seq, true
}

// begin returns the sequence number of a group decided the careful way.
func (h *headCache) begin() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	return h.seq
}

// plan records the heads a group decided at seq will leave as pending.
func (h *headCache) plan(seq uint64, heads map[string]int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending == nil {
		h.pending = make(map[string]cachedHead)
	}
	for stream, last := range heads {
		h.pending[stream] = cachedHead{last, -1, seq}
	}
}

// done ends group seq: its pending heads are dropped and, if it committed,
// heads (what the log now holds) go into the cache, with the positions of
// the rows it wrote (rows, with their real positions).
func (h *headCache) done(seq uint64, heads map[string]int64, rows []domain.Envelope, committed bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for stream := range heads {
		if p, ok := h.pending[stream]; ok && p.seq == seq {
			delete(h.pending, stream)
		}
	}
	if !committed {
		return
	}
	pos := make(map[string]int64, len(heads))
	for i := range rows {
		pos[rows[i].Stream] = int64(rows[i].Position)
	}
	if h.cur == nil || len(h.cur) >= headCacheSize {
		h.old, h.cur = h.cur, make(map[string]cachedHead, len(heads))
	}
	for stream, last := range heads {
		p, wrote := pos[stream]
		c, ok := h.get(stream)
		if !wrote { // a condition: the stream's last event is where it was, if known
			p = -1
			if ok && c.last == last {
				p = c.pos
			}
		}
		if !ok || c.seq <= seq {
			h.cur[stream] = cachedHead{last, p, seq}
		}
	}
}

// forget drops every cached head (after a commit whose outcome is unknown,
// or a trim).
func (h *headCache) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cur, h.old = nil, nil
}
