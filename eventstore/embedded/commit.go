package embedded

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// maxWriteBytes is a soft limit on one group commit's write: the committer
// stops adding appends to a write once it is this large (one append larger
// than it is written alone).
const maxWriteBytes = 32 << 20

// request is one Append or AppendMulti waiting for the committer. Requests
// are pooled; the caller's events are copied into them (the envelopes, not
// the payloads) so that the variadic slice of Append does not escape.
type request struct {
	appends []eventstore.StreamAppend
	multi   []eventstore.StreamAppend // storage for appends
	evs     []domain.Envelope         // storage for a single Append's events
	events  int                       // number of events
	size    int                       // bytes on disk

	// Set by the committer before it closes done, the channel of the group
	// commit the request was queued for (one close wakes the whole group).
	res      eventstore.AppendResult
	err      error
	staged   bool // the outcome depends on the current write
	replayed bool // every event id was already stored: the result is the original one
	done     chan struct{}
}

var requests = sync.Pool{New: func() any { return new(request) }}

// committer is the state of the group commit, which Store embeds: the queue
// the appends wait in (guarded by qmu), and what the committer goroutine
// (Store.commitLoop, from Open until it is stopped) owns alone. Open fills
// the latter before the goroutine starts (recovery); after that only the
// committer touches it, except where a field says otherwise. The committer
// stages into the Store's indexes under Store.mu (see Store).
type committer struct {
	qmu     sync.Mutex
	queue   []*request
	qdone   chan struct{} // closed when the queued requests are answered
	qclosed bool
	wake    chan struct{} // the committer has work: appends queued, a seal to install
	done    chan struct{} // closed when the committer goroutine has returned

	ids        *idIndex    // hot event id → position - base, committed and staged (writes under Store.mu)
	next       uint64      // position of the next staged event
	last       domain.Hash // chain hash of the last staged event (zero before position 0)
	chain      eventstore.Chainer
	wend       int64             // file offset past the last staged record
	alloc      int64             // file offset up to which the file is written (zeros past wend)
	buf        []byte            // write buffer of the chunk being staged
	fresh      []domain.Envelope // the chunk being staged, for Store.tail
	group      group             // the group commit under way
	seq        uint64            // group commit counter
	touched    []*stream         // streams staged in the current group commit
	counts     []uint64          // scratch: versions of each append's stream, in stage
	found      []*stream         // scratch: the hot state of each append's stream (nil: none), in stage
	recent     *[4096]*stream    // streams looked up lately, by a hash of the name: a look-up that hits skips the map of every hot stream (cleared when streams leave that map)
	scanNew    []*stream         // recovery only: streams the scan created, in order
	failed     error             // sticky: a write or fsync failed
	failedC    chan struct{}     // closed once failed is set (Failed); read by anyone
	failedErr  atomic.Pointer[error]
	noAlloc    bool          // preallocation failed once; do not retry
	lastGroup  int           // requests in the last group commit
	lingerSkip int           // group commits to go without lingering
	lastSync   time.Duration // how long the last fsync took
}

// initCommitter makes c ready for Open's recovery and then the goroutine.
func (c *committer) initCommitter() {
	c.recent = new([4096]*stream)
	c.wake = make(chan struct{}, 1)
	c.qdone = make(chan struct{})
	c.failedC = make(chan struct{})
	c.done = make(chan struct{})
}

// push queues r for the committer and wakes it; after stop it fails with
// eventstore.ErrClosed.
func (c *committer) push(r *request) error {
	c.qmu.Lock()
	if c.qclosed {
		c.qmu.Unlock()
		return eventstore.ErrClosed
	}
	c.queue = append(c.queue, r)
	r.done = c.qdone
	c.qmu.Unlock()
	c.poke()
	return nil
}

// poke wakes the committer.
func (c *committer) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// take takes every queued request for the group under way (the channel
// that answers them joins the group's), and reports whether the queue is
// closed. Committer only.
func (c *committer) take() (taken []*request, closed bool) {
	g := &c.group
	c.qmu.Lock()
	taken = c.queue
	if len(taken) > 0 {
		c.queue = g.spare[:0]
		g.dones = append(g.dones, c.qdone)
		c.qdone = make(chan struct{})
	}
	closed = c.qclosed
	c.qmu.Unlock()
	return taken, closed
}

// stop closes the queue and waits for the committer goroutine to answer
// what was queued and return.
func (c *committer) stop() {
	c.qmu.Lock()
	c.qclosed = true
	c.qmu.Unlock()
	c.poke()
	<-c.done
}

// Append appends events to stream if its current version satisfies expected;
// see eventstore.Store. The events are on disk when it returns nil. Once the
// append is queued, Append waits for its outcome whatever ctx does. After a
// failed write or fsync every append fails: reopen the store (recovery then
// decides what reached the disk; re-appending the same event ids is safe).
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	r := requests.Get().(*request)
	r.evs = append(r.evs[:0], events...)
	r.multi = append(r.multi[:0], eventstore.StreamAppend{Stream: stream, Expected: expected, Events: r.evs})
	r.appends = r.multi
	return s.submit(ctx, r)
}

// AtomicMultiStream implements eventstore.MultiStreamReporter: AppendMulti
// writes several streams all or nothing.
func (s *Store) AtomicMultiStream() bool { return true }

// AppendMulti appends to several streams atomically, contiguously and in the
// order given; see eventstore.Store. It is durable like Append.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	r := requests.Get().(*request)
	r.multi = append(r.multi[:0], appends...)
	r.appends = r.multi
	return s.submit(ctx, r)
}

func (s *Store) submit(ctx context.Context, r *request) (eventstore.AppendResult, error) {
	var res eventstore.AppendResult
	err := s.enqueue(ctx, r)
	if err == nil {
		<-r.done
		res, err = r.res, r.err
		if err == nil && r.replayed {
			err = s.checkReplayedContent(r)
		}
	}
	// Keep small buffers for the next request, without the caller's data.
	evs, multi := r.evs, r.multi
	clear(evs)
	clear(multi)
	if cap(evs) > 64 {
		evs = nil
	}
	if cap(multi) > 64 {
		multi = nil
	}
	*r = request{evs: evs[:0], multi: multi[:0]}
	requests.Put(r)
	return res, err
}

// enqueue checks r and queues it for the committer.
func (s *Store) enqueue(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := eventstore.ValidateAppends(r.appends); err != nil {
		return err
	}
	for i := range r.appends {
		a := &r.appends[i]
		r.events += len(a.Events)
		for j := range a.Events {
			r.size += recordSize(a.Stream, &a.Events[j])
		}
	}
	if err := checkDistinctIDs(r.appends, r.events); err != nil {
		return err
	}
	return s.push(r)
}

// checkDistinctIDs refuses an append that names one event id twice.
func checkDistinctIDs(appends []eventstore.StreamAppend, n int) error {
	if n < 2 {
		return nil
	}
	dup := func(id uuid.UUID) error {
		return fmt.Errorf("embedded: event id %s appears twice in one append: %w", id, eventstore.ErrInvalidEvent)
	}
	if n <= 16 {
		var ids [16]uuid.UUID
		k := 0
		for i := range appends {
			for j := range appends[i].Events {
				id := appends[i].Events[j].ID
				if slices.Contains(ids[:k], id) {
					return dup(id)
				}
				ids[k] = id
				k++
			}
		}
		return nil
	}
	seen := make(map[uuid.UUID]struct{}, n)
	for i := range appends {
		for j := range appends[i].Events {
			id := appends[i].Events[j].ID
			if _, ok := seen[id]; ok {
				return dup(id)
			}
			seen[id] = struct{}{}
		}
	}
	return nil
}

// commitLoop is the committer. Each round is one group commit (see
// runGroup). It exits once Close has been called and the queue is empty.
func (s *Store) commitLoop() {
	defer close(s.committer.done)
	for {
		s.installSeal()
		s.qmu.Lock()
		for len(s.queue) == 0 && !s.qclosed && s.pending.Load() == nil {
			s.qmu.Unlock()
			if s.needZeros() {
				s.preallocate()
			} else {
				<-s.wake
			}
			s.qmu.Lock()
		}
		empty, drained := len(s.queue) == 0, len(s.queue) == 0 && s.qclosed
		s.qmu.Unlock()
		if drained {
			s.installSeal()
			return
		}
		if empty {
			continue // a seal to install
		}
		s.runGroup()
		if s.needZeros() {
			s.preallocate()
		}
	}
}

// group is the committer's state for the group commit under way.
type group struct {
	spare []*request      // the other queue slice, to swap with s.queue
	dones []chan struct{} // closed to answer the appends taken so far

	// The chunk being staged: what one write and one fsync will carry.
	reqs     []*request
	events   int
	micros   int64  // commit time of the chunk
	start    int64  // file offset of the chunk
	startPos uint64 // position of its first event
	limited  bool   // a chunk was flushed because it was full
}

// runGroup runs one group commit: it takes the queued appends and stages
// them (checks them and encodes their records) while it holds the group open
// for more (lingers, see below), then writes what it staged with one write
// and one fsync, publishes it, and answers every append of the group with
// one channel close per batch it took from the queue. A group larger than
// MaxBatch events (or 32 MiB) is written in several chunks, each with its
// own write and fsync.
//
// Lingering: under load, the writers the last group answered come straight
// back, and one group with all of them costs one fsync where two half
// groups would cost two. So while fewer appends are staged than the last
// group held, the committer keeps taking new ones, for at most
// GroupCommitWait and no longer than the last fsync took. Staging as they
// come keeps that work off the critical path. When not even half of the
// writers came back in time, it does not linger for the next few groups:
// lingering only pays with writers that append back to back.
func (s *Store) runGroup() {
	g := &s.group
	linger := s.opts.GroupCommitWait > 0
	if linger && s.lingerSkip > 0 {
		s.lingerSkip--
		linger = false
	}
	var deadline time.Time
	n := 0 // appends taken
	for {
		taken, closed := s.take()
		for _, r := range taken {
			s.add(r)
		}
		n += len(taken)
		if len(taken) > 0 {
			clear(taken)
			g.spare = taken
		}
		if closed || !linger || n >= s.lastGroup || g.limited || s.failed != nil {
			break
		}
		now := time.Now()
		if deadline.IsZero() {
			deadline = now.Add(min(s.opts.GroupCommitWait, s.lastSync))
		} else if !now.Before(deadline) {
			if n < s.lastGroup/2 {
				s.lingerSkip = lingerBackoff
			}
			break
		}
		runtime.Gosched()
	}
	s.lastGroup = n
	s.flush()
	g.limited = false
	for _, d := range g.dones {
		close(d)
	}
	clear(g.dones)
	g.dones = g.dones[:0]
}

// lingerBackoff is how many group commits go without lingering after a
// linger that waited in vain.
const lingerBackoff = 8

// add stages one append into the current chunk, first flushing the chunk if
// the append would overfill it.
func (s *Store) add(r *request) {
	g := &s.group
	if s.failed == nil && len(g.reqs) > 0 && (g.events+r.events > s.opts.MaxBatch || len(s.buf)+r.size > maxWriteBytes) {
		s.flush()
		g.limited = true
	}
	if s.failed != nil {
		r.err = s.failed
		return
	}
	if len(g.reqs) == 0 && s.needRoll() {
		if err := s.roll(); err != nil {
			s.failed = fmt.Errorf("embedded: starting a new log segment at position %d failed (the store takes no more appends; reopen it to recover): %w: %w",
				s.next, eventstore.ErrClosed, err)
			s.setFailed(s.failed)
			r.err = s.failed
			return
		}
	}
	if len(g.reqs) == 0 {
		s.seq++
		g.micros = commitTime(s.opts.Clock())
		g.start, g.startPos = s.wend, s.next
	}
	s.buf = s.stage(r, s.buf, g.micros, g.startPos)
	g.reqs = append(g.reqs, r)
	g.events += r.events
}

// flush writes, syncs and publishes the current chunk, leaving each
// request's outcome in it. After a failed write or fsync the store takes no
// more appends: every later one fails with the same error.
func (s *Store) flush() {
	g := &s.group
	defer func() {
		clear(g.reqs)
		g.reqs, g.events = g.reqs[:0], 0
		clear(s.fresh)
		if s.fresh = s.fresh[:0]; cap(s.fresh) > 2*tailSize {
			s.fresh = nil
		}
		if s.buf = s.buf[:0]; cap(s.buf) > 4<<20 {
			s.buf = nil // do not keep a big append's buffer for ever
		}
	}()
	if len(g.reqs) == 0 {
		return
	}
	if len(s.buf) > 0 {
		if err := s.write(s.buf, g.start); err != nil {
			s.failed = fmt.Errorf("embedded: the log could not be written at offset %d (positions from %d; the store takes no more appends; reopen it to recover): %w: %w",
				g.start, g.startPos, eventstore.ErrClosed, err)
			s.setFailed(s.failed)
			for _, r := range g.reqs {
				if r.err == nil && r.staged {
					r.err = s.failed
				}
			}
			return
		}
		s.writes.Add(1)
	}
	s.publish()
	s.maybeSeal()
}

// write writes buf at off and makes it durable.
func (s *Store) write(buf []byte, off int64) error {
	if _, err := s.f.WriteAt(buf, off); err != nil {
		return err
	}
	t0 := time.Now()
	if err := s.sync(); err != nil {
		return fmt.Errorf("fdatasync: %w", err)
	}
	s.lastSync = time.Since(t0)
	s.syncTime.Add(int64(s.lastSync))
	s.alloc = max(s.alloc, off+int64(len(buf)))
	return nil
}

// publish makes every staged event visible to readers and wakes subscribers.
func (s *Store) publish() {
	s.mu.Lock()
	for _, st := range s.touched {
		st.committed = len(st.positions)
	}
	if len(s.fresh) > 0 {
		if s.tail == nil {
			s.tail, s.tailFrom = make([]domain.Envelope, tailSize), s.fresh[0].Position
		}
		for i := range s.fresh {
			e := &s.fresh[i]
			for e.Position-s.tailFrom >= tailSize {
				s.dropTail() // its slot is e's
			}
			s.tail[e.Position%tailSize] = *e
			s.tailBytes += len(e.Data) + len(e.Metadata)
		}
		for s.tailBytes > tailMaxBytes {
			s.dropTail()
		}
	}
	s.end = s.wend
	s.head.Store(s.next)
	s.mu.Unlock()
	clear(s.touched)
	s.touched = s.touched[:0]
	ch := make(chan struct{})
	close(*s.notify.Swap(&ch))
}

// stage decides one request against the log as staged so far and, if it is
// accepted, encodes its records into buf and stages them in the indexes. It
// looks up ids and streams without s.mu (the committer is the only writer of
// what it reads, and a look-up in the sealed file may read the disk), and
// takes s.mu to change the indexes.
func (s *Store) stage(r *request, buf []byte, micros int64, startPos uint64) []byte {
	found := 0
	for i := range r.appends {
		for j := range r.appends[i].Events {
			_, ok, err := s.findID(r.appends[i].Events[j].ID)
			if err != nil {
				r.err = fmt.Errorf("embedded: append: %w", err)
				return buf
			}
			if ok {
				found++
			}
		}
	}
	if found > 0 {
		r.res, r.err = s.replay(r, found)
		r.replayed = r.err == nil
		r.staged = r.err == nil && r.res.Position >= s.head.Load()
		return buf
	}
	s.counts, s.found = s.counts[:0], s.found[:0]
	for i := range r.appends {
		a := &r.appends[i]
		st, n, err := s.lookup(a.Stream)
		if err != nil {
			r.err = fmt.Errorf("embedded: append: %w", err)
			return buf
		}
		s.counts, s.found = append(s.counts, n), append(s.found, st)
		if !a.Expected.Satisfied(n > 0, n-1) {
			e := &eventstore.WrongVersionError{Stream: a.Stream, Expected: a.Expected, Exists: n > 0}
			if n > 0 {
				e.Actual = n - 1
			}
			r.err = e
			return buf
		}
	}
	last := len(r.appends) - 1 // the last append with events holds the commit record
	for len(r.appends[last].Events) == 0 {
		last--
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range r.appends {
		a := &r.appends[i]
		if len(a.Events) == 0 {
			continue // a condition: checked above
		}
		st := s.found[i]
		if st == nil {
			st = &stream{name: strings.Clone(a.Stream), sealed: s.counts[i]}
			s.streams[st.name] = st
		}
		if st.touched != s.seq {
			st.touched = s.seq
			s.touched = append(s.touched, st)
		}
		for j := range a.Events {
			e := &a.Events[j]
			pos, version := s.next, st.sealed+uint64(len(st.positions))
			commit := i == last && j == len(a.Events)-1
			n := len(buf)
			s.fresh = append(s.fresh, committed(st.name, e, pos, version, micros))
			f := &s.fresh[len(s.fresh)-1]
			f.Hash = s.chain.Next(s.last, f)
			s.last = f.Hash
			buf = appendRecord(buf, st.name, e, pos, version, micros, uint32(pos-startPos), commit, &f.Hash)
			s.offsets = append(s.offsets, s.wend)
			s.posStream = append(s.posStream, st)
			s.posID = append(s.posID, e.ID)
			st.positions = append(st.positions, pos)
			if !s.ids.put(pos-s.base, s.posID) {
				// Not found above, and ValidateAppends lets no request name an id twice.
				panic(fmt.Sprintf("embedded: event id %s staged twice", e.ID))
			}
			s.wend += int64(len(buf) - n)
			s.next++
			r.res = eventstore.AppendResult{Version: version, Position: pos}
		}
	}
	r.staged = true
	return buf
}

// findID returns the position of the stored or staged event whose id is
// id: the hot index first, then the sealed part (whose filter answers most
// misses without reading the disk). The committer calls it, or a reader
// under s.mu.
func (s *Store) findID(id uuid.UUID) (uint64, bool, error) {
	if p, ok := s.ids.get(id, s.posID); ok {
		return s.base + p, true, nil
	}
	return s.sealed.findID(id)
}

// lookup returns stream name's hot state (nil if it has no hot events) and
// how many versions it has, staged included. Committer only.
func (s *Store) lookup(name string) (*stream, uint64, error) {
	h := hashName(name)
	slot := &s.recent[h%uint64(len(s.recent))]
	if st := *slot; st != nil && st.name == name {
		return st, st.sealed + uint64(len(st.positions)), nil
	}
	if st := s.streams[name]; st != nil {
		*slot = st
		return st, st.sealed + uint64(len(st.positions)), nil
	}
	n, ok, err := s.sealed.countHashed(name, h)
	if !ok {
		n = s.start.kept[name]
	}
	return nil, n, err
}

// versionOf returns the version of the event at pos in the stream name, if
// that stream holds it. Committer only.
func (s *Store) versionOf(name string, pos uint64) (uint64, bool, error) {
	if st := s.streams[name]; st != nil {
		if v, ok := slices.BinarySearch(st.positions, pos); ok {
			return st.sealed + uint64(v), true, nil
		}
	}
	if pos >= s.base {
		return 0, false, nil
	}
	ss, ok, err := s.sealed.findStream(name)
	if !ok || err != nil {
		return 0, false, err
	}
	return s.sealed.versionOf(ss, pos)
}

// replay answers a request some of whose event ids are stored (or staged):
// the original result if all of them are, in the same streams and order, and
// an idempotency conflict otherwise.
func (s *Store) replay(r *request, found int) (eventstore.AppendResult, error) {
	conflict := func(format string, args ...any) (eventstore.AppendResult, error) {
		return eventstore.AppendResult{}, fmt.Errorf("embedded: append: "+format+": %w", append(args, eventstore.ErrIdempotencyConflict)...)
	}
	if found < r.events {
		return conflict("%d of its %d event ids are already stored", found, r.events)
	}
	var res eventstore.AppendResult
	for i := range r.appends {
		a := &r.appends[i]
		for j := range a.Events {
			id := a.Events[j].ID
			pos, _, err := s.findID(id)
			if err != nil {
				return res, fmt.Errorf("embedded: append: %w", err)
			}
			version, ok, err := s.versionOf(a.Stream, pos)
			if err != nil {
				return res, fmt.Errorf("embedded: append: %w", err)
			}
			if !ok {
				return conflict("event %s is stored in another stream than %q", id, a.Stream)
			}
			if (i > 0 || j > 0) && pos <= res.Position || j > 0 && version != res.Version+1 {
				return conflict("event %s is stored in %q but not in the order given", id, a.Stream)
			}
			res = eventstore.AppendResult{Version: version, Position: pos}
		}
	}
	return res, nil
}

// checkReplayedContent compares a replayed request's events with the stored
// ones (the committer only matched their ids, streams and order): the same
// id with other content is an idempotency conflict, not a replay. It runs
// after the request's group is on disk, outside the committer; replays are
// rare, so reading the events back costs nothing that matters.
func (s *Store) checkReplayedContent(r *request) error {
	for i := range r.appends {
		for j := range r.appends[i].Events {
			e := &r.appends[i].Events[j]
			s.mu.RLock()
			pos, ok := s.ids.get(e.ID, s.posID)
			pos += s.base
			sl := s.sealed
			s.mu.RUnlock()
			if !ok {
				var err error
				if pos, ok, err = sl.findID(e.ID); err != nil || !ok {
					return fmt.Errorf("embedded: append: looking up replayed event %s (found %v): %w", e.ID, ok, err)
				}
			}
			stored, err := s.ReadAll(context.Background(), pos, 1)
			if err != nil {
				return fmt.Errorf("embedded: append: read back replayed event %s: %w", e.ID, err)
			}
			if len(stored) != 1 || stored[0].ID != e.ID {
				return fmt.Errorf("embedded: append: replayed event %s is not at position %d", e.ID, pos)
			}
			if !eventstore.SameContent(&stored[0], e) {
				return fmt.Errorf("embedded: append: event %s is stored with different content: %w", e.ID, eventstore.ErrIdempotencyConflict)
			}
		}
	}
	return nil
}

var zeros [1 << 20]byte

// needZeros reports whether fewer than Options.Preallocate zero bytes lie
// past the staged end of the log.
func (s *Store) needZeros() bool {
	want := s.zerosWanted()
	return want > 0 && !s.noAlloc && s.failed == nil && s.alloc-s.wend < want
}

// zerosWanted is how many zero bytes should lie past the staged end:
// Options.Preallocate, but no further than the end of the current segment
// (whose zeros a roll gives back).
func (s *Store) zerosWanted() int64 {
	room := s.f.last().base - headerSize + s.opts.SegmentBytes - s.wend
	return max(0, min(int64(s.opts.Preallocate), room))
}

// preallocate writes one chunk of zeros past the end of the log and starts
// writing it back; the next fsync makes it durable with that commit's data.
// Later commits then overwrite allocated blocks, and their fsync need not
// touch file metadata: on ext4 that makes a commit about a third cheaper.
func (s *Store) preallocate() {
	off := max(s.alloc, s.wend)
	n := int(min(int64(len(zeros)), s.zerosWanted()-(off-s.wend)))
	if _, err := s.f.WriteAt(zeros[:n], off); err != nil {
		s.noAlloc = true
		s.log.Warn("preallocating the log failed; continuing without", "err", err)
		return
	}
	s.f.Writeback(off, int64(n))
	s.alloc = off + int64(n)
}

// tailSize is how many of the last committed events the store keeps for
// subscriptions (see Store.tail), and tailMaxBytes how many bytes of data
// and metadata they may hold: past either, the oldest leave. (Without
// the second, 16,384 events of up to 1 MiB each could stay in memory.)
const (
	tailSize     = 1 << 14
	tailMaxBytes = 32 << 20
)

// dropTail forgets the oldest event of the tail. Its caller holds mu.
func (s *Store) dropTail() {
	e := &s.tail[s.tailFrom%tailSize]
	s.tailBytes -= len(e.Data) + len(e.Metadata)
	*e = domain.Envelope{}
	s.tailFrom++
}

// committed returns event e, staged at pos and version of stream with
// commit time micros, as a subscription reading its record would receive
// it: the same fields, its payload in one allocation of the store's own.
func committed(stream string, e *domain.Envelope, pos, version uint64, micros int64) domain.Envelope {
	out := domain.Envelope{Stream: stream, Version: version, Position: pos, ID: e.ID, Type: e.Type,
		SchemaVersion: e.SchemaVersion, Time: timeOf(micros), CorrelationID: e.CorrelationID, CausationID: e.CausationID, Writer: e.Writer}
	out.Owner, _ = ownerOf(ownerCode(e.Owner))
	payload := make([]byte, len(e.Data)+len(e.Metadata))
	copy(payload, e.Data)
	copy(payload[len(e.Data):], e.Metadata)
	if e.Data != nil {
		out.Data = payload[:len(e.Data):len(e.Data)]
	}
	if e.Metadata != nil {
		out.Metadata = payload[len(e.Data):]
	}
	return out
}
