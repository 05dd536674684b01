package postgres

import (
	"slices"
	"sync"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// feedSize bounds how many recent events a feed keeps.
const feedSize = 16 * 1024

// feed keeps the events this Store's own group commits wrote lately, so that
// its subscriptions take them from memory instead of reading them back. It
// holds one run of consecutive positions, each event exactly as committed
// (the rows the committer sent, with the positions and the commit time the
// database gave them), and only after the commit succeeded. A subscription
// whose next position lies in the run reads it here; anything else (events
// other writers committed, a subscription further behind) it reads from the
// database as before.
//
// It also tracks what a subscription needs to know to decide between
// waiting and reading the database: the highest head it has heard of
// (notifications, pages read, the run's end) and the positions a group of
// this Store holds the log_head lock for but has not yet published
// (claims): a subscription waiting at a claimed position is woken when the
// group publishes or fails, with no query.
type feed struct {
	mu     sync.Mutex
	start  uint64 // position of the first event in run
	run    []fedGroup
	events int
	ready  map[uint64]fedGroup // published groups that wait for an earlier claimed one
	claims map[uint64]uint64   // claim id -> first position
	ids    uint64
	known  uint64 // every position below it is committed
}

// fedGroup is one committed group's events, at consecutive positions.
type fedGroup struct {
	first uint64
	evs   []domain.Envelope
}

func (g fedGroup) end() uint64 { return g.first + uint64(len(g.evs)) }

// end is the position after the run.
func (f *feed) end() uint64 {
	if len(f.run) == 0 {
		return f.start
	}
	return f.run[len(f.run)-1].end()
}

// claim records that a group of this Store holds the lock for n events from
// first on, and returns its claim id.
func (f *feed) claim(first uint64) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.claims == nil {
		f.claims = make(map[uint64]uint64)
	}
	f.ids++
	f.claims[f.ids] = first
	return f.ids
}

// unclaim drops a claim whose group wrote nothing or whose outcome is
// unknown.
func (f *feed) unclaim(id uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.claims, id)
	f.settle()
}

// publish adds a committed group's events (positions from first on, copied
// here) and drops its claim (id 0: none).
func (f *feed) publish(id, first uint64, rows []domain.Envelope) {
	g := fedGroup{first: first, evs: copyEvents(rows)}
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.claims, id)
	f.known = max(f.known, g.end())
	if f.ready == nil {
		f.ready = make(map[uint64]fedGroup)
	}
	f.ready[first] = g
	f.settle()
}

// settle moves ready groups into the run: those that continue it, and, once
// no claim of this Store lies between, those after a gap (another writer's
// events, or a commit of ours whose outcome is unknown), which restart the
// run. It trims the run to feedSize events.
func (f *feed) settle() {
	for len(f.ready) > 0 {
		if g, ok := f.ready[f.end()]; ok && len(f.run) > 0 {
			delete(f.ready, g.first)
			f.run = append(f.run, g)
			f.events += len(g.evs)
			continue
		}
		lowest := uint64(0)
		first := true
		for p := range f.ready {
			if first || p < lowest {
				lowest, first = p, false
			}
		}
		if len(f.run) > 0 && lowest < f.end() {
			delete(f.ready, lowest) // cannot happen: positions are never reused once committed
			continue
		}
		for _, c := range f.claims {
			if c < lowest && (len(f.run) == 0 || c >= f.end()) {
				return // an earlier group of ours may still fill the gap
			}
		}
		g := f.ready[lowest]
		delete(f.ready, lowest)
		clear(f.run)
		f.run, f.start, f.events = append(f.run[:0], g), g.first, len(g.evs)
	}
	for f.events > feedSize && len(f.run) > 1 {
		f.events -= len(f.run[0].evs)
		f.start = f.run[0].end()
		f.run[0] = fedGroup{}
		f.run = f.run[1:]
	}
}

// heard raises the known head: a notification's payload or a page's head.
func (f *feed) heard(head uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.known = max(f.known, head)
}

// covers reports whether the run reaches head: a notification of head then
// tells the subscriptions nothing the feed has not.
func (f *feed) covers(head uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.run) > 0 && f.end() >= head
}

// feedAnswer is what a subscription at position next should do.
type feedAnswer int

const (
	feedServe feedAnswer = iota // evs, then go on from upto
	feedWait                    // nothing known past next yet, or a group of ours is about to publish it
	feedRead                    // committed events at next are not in the feed
)

// read returns up to limit events from next on that pass filter if next is
// in the run, and the position after the last event it looked at. The
// slice is new; the events' data and metadata are the feed's, which never
// changes them.
func (f *feed) read(next uint64, filter eventstore.Filter, limit int) (evs []domain.Envelope, upto uint64, what feedAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.run) > 0 && next >= f.start && next < f.end() {
		i, _ := slices.BinarySearchFunc(f.run, next, func(g fedGroup, p uint64) int {
			switch {
			case g.end() <= p:
				return -1
			case g.first > p:
				return 1
			}
			return 0
		})
		upto = next
		for ; i < len(f.run) && len(evs) < limit; i++ {
			g := &f.run[i]
			for j := int(upto - g.first); j < len(g.evs) && len(evs) < limit; j++ {
				if filter.Match(&g.evs[j]) {
					evs = append(evs, g.evs[j])
				}
				upto = g.evs[j].Position + 1
			}
		}
		return evs, upto, feedServe
	}
	for _, c := range f.claims {
		if c == next {
			return nil, next, feedWait
		}
	}
	if next < f.known {
		return nil, next, feedRead
	}
	return nil, next, feedWait
}

// copyEvents copies rows, their data and metadata into one buffer of the
// feed's own: callers of Append may reuse theirs.
func copyEvents(rows []domain.Envelope) []domain.Envelope {
	n := 0
	for i := range rows {
		n += len(rows[i].Data) + len(rows[i].Metadata)
	}
	buf := make([]byte, 0, n)
	out := slices.Clone(rows)
	for i := range out {
		var b []byte
		b, buf = clip(out[i].Data, buf)
		out[i].Data = b
		b, buf = clip(out[i].Metadata, buf)
		out[i].Metadata = b
	}
	return out
}

// clip copies b to the end of buf and returns the copy (nil stays nil, as
// PostgreSQL's NULL does; empty stays empty) and the grown buffer.
func clip(b, buf []byte) ([]byte, []byte) {
	if b == nil {
		return nil, buf
	}
	start := len(buf)
	buf = append(buf, b...)
	return buf[start:len(buf):len(buf)], buf
}
