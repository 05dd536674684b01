package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"sync"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

const (
	// readChunk is the usual size of one read from the log file.
	readChunk = 1 << 20
	// gatherSpan bounds the bytes ReadStream reads at once to pick up nearby
	// events of one stream (skipping the others' records in between).
	gatherSpan = 64 << 10
	// subBatch is the most events Subscribe hands over in one call.
	subBatch = 4096
	// maxInterned bounds the event types kept as shared strings.
	maxInterned = 1024
)

var readBufs = sync.Pool{New: func() any { b := make([]byte, readChunk); return &b }}

// view is a consistent snapshot of the committed log: the sealed part and
// the headers of the hot index slices, cut at head. Their elements never
// change.
type view struct {
	start     *startState
	head      uint64
	end       int64
	base      uint64
	sl        *sealed
	offsets   []int64   // hot positions [base, head)
	posStream []*stream // hot positions [base, head)
}

func (s *Store) view() view {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.viewLocked()
}

func (s *Store) viewLocked() view {
	h := s.head.Load()
	k := h - s.base
	return view{start: s.start, head: h, end: s.end, base: s.base, sl: s.sealed, offsets: s.offsets[:k], posStream: s.posStream[:k]}
}

// hotSpan returns where the record of hot position p starts and ends.
func (v *view) hotSpan(p uint64) (int64, int64) {
	i := p - v.base
	if p+1 < v.head {
		return v.offsets[i], v.offsets[i+1]
	}
	return v.offsets[i], v.end
}

// ReadAll returns up to limit events from position from (inclusive), in
// position order; none (and no error) from past the end or with limit <= 0.
func (s *Store) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	v := s.view()
	if from < v.start.first {
		return nil, &eventstore.TrimmedError{From: from, First: v.start.first}
	}
	if from >= v.head || limit <= 0 {
		return nil, nil
	}
	to := v.head
	if uint64(limit) < to-from {
		to = from + uint64(limit)
	}
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	out := make([]domain.Envelope, 0, to-from)
	for from < to {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var err error
		out, from, err = s.readRange(&v, from, to, bp, eventstore.Filter{}, out)
		if err != nil {
			return nil, s.readErrAt(err, from)
		}
	}
	return out, nil
}

// ReadStream returns up to limit events of stream from version from
// (inclusive), in version order; none (and no error) from past the end or
// with limit <= 0. A stream without events gives eventstore.ErrStreamNotFound.
// The positions of its sealed versions come from the sealed file, those of
// its hot versions from memory. Of a stream that continues across the live
// log's start (Trim's keep), the versions below it are gone: a read from one
// of them starts at the first live version.
func (s *Store) ReadStream(ctx context.Context, name string, from uint64, limit int) ([]domain.Envelope, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	st := s.streams[name]
	var nsealed uint64
	var hot []uint64
	if st != nil {
		nsealed, hot = st.sealed, st.positions[:st.committed]
	}
	v := s.viewLocked()
	s.mu.RUnlock()
	var ss sealedStream
	gone := v.start.kept[name] // versions below the live log's start
	if st == nil || from < nsealed {
		var err error
		if ss, _, err = v.sl.findStream(name); err != nil {
			return nil, s.readErr(err)
		}
		nsealed = gone + ss.count
	}
	total := nsealed + uint64(len(hot))
	if total == 0 {
		return nil, fmt.Errorf("embedded: read stream %q: %w", name, eventstore.ErrStreamNotFound)
	}
	from = max(from, gone)
	if from >= total || limit <= 0 {
		return nil, nil
	}
	n := min(uint64(limit), total-from)
	var positions []uint64
	if from < nsealed {
		var err error
		if positions, err = v.sl.positions(ss, from-gone, min(n, nsealed-from)); err != nil {
			return nil, s.readErr(err)
		}
	}
	if k := n - uint64(len(positions)); k > 0 {
		i := max(from, nsealed) - nsealed
		positions = append(positions, hot[i:i+k]...)
	}
	starts, ends, err := s.spans(&v, positions)
	if err != nil {
		return nil, s.readErrAt(err, positions[0])
	}
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	out := make([]domain.Envelope, 0, len(positions))
	for i := 0; i < len(positions); {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Read the next positions that lie close together with one read.
		first := starts[i]
		j := i + 1
		for j < len(positions) && ends[j]-first <= gatherSpan {
			j++
		}
		b, err := s.readSpan(bp, first, ends[j-1])
		if err != nil {
			return nil, s.readErrAt(err, positions[i])
		}
		for k := i; k < j; k++ {
			out = append(out, domain.Envelope{})
			if _, err := s.decode(&v, positions[k], starts[k], b[starts[k]-first:ends[k]-first], nil, &out[len(out)-1]); err != nil {
				return nil, err
			}
		}
		i = j
	}
	return out, nil
}

// Subscribe delivers every event at position >= from that passes filter to
// handle, in position order, in batches of at least one event and at most a
// few thousand; see eventstore.Store. It reads everything, stored or new,
// from the log file at its own pace, so it never misses or repeats an event
// and a slow handler never holds up appends. It returns ctx.Err() when ctx
// ends, handle's error (as is) when handle fails, and eventstore.ErrClosed
// when the store closes. The handler may keep the batch.
func (s *Store) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	if err := s.readable(ctx); err != nil {
		return err
	}
	pos := from
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closing:
			return eventstore.ErrClosed
		default:
		}
		wait := *s.notify.Load()
		v := s.view()
		if pos < v.start.first {
			return &eventstore.TrimmedError{From: pos, First: v.start.first}
		}
		if pos >= v.head {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.closing:
				return eventstore.ErrClosed
			case <-wait:
			}
			continue
		}
		to := min(v.head, pos+subBatch)
		batch, next, ok := s.fromTail(pos, to, filter)
		if !ok {
			bp := readBufs.Get().(*[]byte)
			var err error
			batch, next, err = s.readRange(&v, pos, to, bp, filter, nil)
			readBufs.Put(bp)
			if err != nil {
				return s.readErrAt(err, pos)
			}
		}
		pos = next
		if len(batch) > 0 {
			if err := handle(batch); err != nil {
				return err
			}
		}
	}
}

// fromTail returns the events of positions [from, to) (to at most the
// head) that pass filter, from the committed events the store keeps in
// memory, and to; false when they are not all there any more.
func (s *Store) fromTail(from, to uint64, filter eventstore.Filter) ([]domain.Envelope, uint64, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.tail == nil || from < s.tailFrom {
		return nil, from, false
	}
	match := len(filter.StreamPrefixes) > 0 || len(filter.Types) > 0
	n := int(to - from)
	if match { // count first: one allocation of the right size
		n = 0
		for p := from; p < to; p++ {
			if filter.Match(&s.tail[p%tailSize]) {
				n++
			}
		}
		if n == 0 {
			return nil, to, true
		}
	}
	out := make([]domain.Envelope, 0, n)
	for p := from; p < to; p++ {
		if e := &s.tail[p%tailSize]; !match || filter.Match(e) {
			out = append(out, *e)
		}
	}
	return out, to, true
}

func (s *Store) readable(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.isClosed() {
		return eventstore.ErrClosed
	}
	return nil
}

// readErr turns a read failure caused by Close into ErrClosed.
func (s *Store) readErr(err error) error {
	if s.isClosed() {
		return eventstore.ErrClosed
	}
	return err
}

// readErrAt is readErr for a read from position from, which a trim may have
// removed while it ran: that is a *eventstore.TrimmedError.
func (s *Store) readErrAt(err error, from uint64) error {
	if errors.Is(err, errSegmentGone) {
		s.mu.RLock()
		first := s.start.first
		s.mu.RUnlock()
		return &eventstore.TrimmedError{From: from, First: first}
	}
	return s.readErr(err)
}

// readRange reads the records of positions [from, to) that fit in one read
// (at least one), appends those passing filter to out and returns out and the
// first position not read. A range starts in the sealed or the hot part and
// stops at the boundary; the offsets of sealed records come from the sealed
// file, with one read for the whole range.
func (s *Store) readRange(v *view, from, to uint64, bp *[]byte, filter eventstore.Filter, out []domain.Envelope) ([]domain.Envelope, uint64, error) {
	var offs []int64 // offsets of the records of [from, to), and the end of the last
	if from < v.base {
		to = min(to, v.base, from+subBatch)
		ob := offsetBufs.Get().(*offsetBuf)
		defer offsetBufs.Put(ob)
		offs = ob.offs[:to-from+1]
		if err := v.sl.offsets(from, offs, ob.bytes[:]); err != nil {
			return out, from, err
		}
	} else if to < v.head {
		offs = v.offsets[from-v.base : to-v.base+1]
	} else {
		offs = append(v.offsets[from-v.base:to-v.base:to-v.base], v.end)
	}
	start := offs[0]
	// k records fit when the end of the k-th is within readChunk of start.
	k := 1 + sort.Search(len(offs)-2, func(i int) bool {
		return offs[i+2]-start > readChunk
	})
	stop := from + uint64(k)
	b, err := s.readSpan(bp, start, offs[k])
	if err != nil {
		return out, from, err
	}
	match := len(filter.StreamPrefixes) > 0 || len(filter.Types) > 0
	if out == nil && !match {
		out = make([]domain.Envelope, 0, k)
	}
	var f *eventstore.Filter
	if match {
		f = &filter
	}
	for i := range k {
		off, end := offs[i], offs[i+1]
		out = append(out, domain.Envelope{})
		ok, err := s.decode(v, from+uint64(i), off, b[off-start:end-start], f, &out[len(out)-1])
		if err != nil {
			return out, from, err
		}
		if !ok {
			out = out[:len(out)-1]
		}
	}
	return out, stop, nil
}

// spanWindow bounds the sealed positions whose record offsets spans reads
// at once: a stream's events that lie this close together cost one read.
const spanWindow = 512

// spans returns where the records of positions (increasing) start and end:
// hot ones from memory, sealed ones from the sealed file, with one read for
// each run of them that lies within spanWindow positions.
func (s *Store) spans(v *view, positions []uint64) ([]int64, []int64, error) {
	starts, ends := make([]int64, len(positions)), make([]int64, len(positions))
	ob := offsetBufs.Get().(*offsetBuf)
	defer offsetBufs.Put(ob)
	for i := 0; i < len(positions); {
		p := positions[i]
		if p >= v.base {
			starts[i], ends[i] = v.hotSpan(p)
			i++
			continue
		}
		j := i + 1
		for j < len(positions) && positions[j] < v.base && positions[j]-p < spanWindow {
			j++
		}
		offs := ob.offs[:positions[j-1]-p+2]
		if err := v.sl.offsets(p, offs, ob.bytes[:]); err != nil {
			return nil, nil, err
		}
		for k := i; k < j; k++ {
			q := positions[k] - p
			starts[k], ends[k] = offs[q], offs[q+1]
		}
		i = j
	}
	return starts, ends, nil
}

// offsetBuf is scratch for the offsets of one sealed range.
type offsetBuf struct {
	offs  [subBatch + 1]int64
	bytes [8 * (subBatch + 1)]byte
}

var offsetBufs = sync.Pool{New: func() any { return new(offsetBuf) }}

// readSpan reads the file bytes [from, to) into *bp (growing it if needed).
func (s *Store) readSpan(bp *[]byte, from, to int64) ([]byte, error) {
	n := int(to - from)
	if cap(*bp) < n {
		*bp = make([]byte, n)
	}
	b := (*bp)[:n]
	if _, err := s.f.ReadAt(b, from); err != nil {
		if err == io.EOF {
			return nil, corruptError(logName, from, "the log file ends early")
		}
		return nil, fmt.Errorf("embedded: reading the log at offset %d: %w", from, err)
	}
	return b, nil
}

// decode checks the record b of position p at file offset off and, if it
// passes filter (nil: everything), fills e with a copy of it.
func (s *Store) decode(v *view, p uint64, off int64, b []byte, filter *eventstore.Filter, e *domain.Envelope) (bool, error) {
	var r rec
	n, st := parseRecord(b, &r)
	if st != recOK || n != len(b) {
		if st == recOK {
			st = recBadShape
		}
		return false, corruptError(logName, off, fmt.Sprintf("position %d: %v", p, st))
	}
	if r.position != p {
		return false, corruptError(logName, off, fmt.Sprintf("record holds position %d where the index has position %d", r.position, p))
	}
	var name string
	if p >= v.base {
		if name = v.posStream[p-v.base].name; string(r.stream) != name {
			return false, corruptError(logName, off, fmt.Sprintf("record holds position %d of %q where the index has it in %q", p, r.stream, name))
		}
	} else {
		name = s.internStream(r.stream)
	}
	e.Stream = name
	e.Type = s.intern(r.typ)
	if filter != nil && !filter.Match(e) {
		return false, nil
	}
	e.Version = r.version
	e.Position = p
	e.ID = r.id
	e.SchemaVersion = int(r.schema)
	e.Time = timeOf(r.micros)
	e.Owner = r.owner
	if len(r.text) > 0 {
		t := string(r.text)
		e.CorrelationID = t[:r.corrLen]
		e.CausationID = t[r.corrLen : r.corrLen+r.causLen]
		e.Writer = t[r.corrLen+r.causLen:]
	}
	var payload []byte
	if len(r.payload) > 0 {
		payload = make([]byte, len(r.payload))
		copy(payload, r.payload)
	} else {
		payload = []byte{}
	}
	if r.flags&flagDataNil == 0 {
		e.Data = json.RawMessage(payload[:r.dataLen:r.dataLen])
	}
	if r.flags&flagMetaNil == 0 {
		e.Metadata = json.RawMessage(payload[r.dataLen:])
	}
	return true, nil
}

// intern returns a shared string equal to b for the common event types, so
// decoding does not allocate one per event.
func (s *Store) intern(b []byte) string {
	if t, ok := (*s.types.Load())[string(b)]; ok {
		return t
	}
	s.typesMu.Lock()
	defer s.typesMu.Unlock()
	old := *s.types.Load()
	if t, ok := old[string(b)]; ok {
		return t
	}
	t := string(b)
	if len(old) < maxInterned {
		m := make(map[string]string, len(old)+1)
		maps.Copy(m, old)
		m[t] = t
		s.types.Store(&m)
	}
	return t
}

// internStream returns a string equal to b, shared with earlier calls for
// the same name while it stays in a small direct-mapped cache, so that
// reading sealed records (whose stream name comes from the record) does not
// allocate a string per event.
func (s *Store) internStream(b []byte) string {
	slot := &s.streamNames[hashNameB(b)%uint64(len(s.streamNames))]
	if p := slot.Load(); p != nil && *p == string(b) {
		return *p
	}
	t := string(b)
	slot.Store(&t)
	return t
}
