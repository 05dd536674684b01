package embedded

import (
	"context"
	"encoding/json"
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

// view is a consistent snapshot of the committed log: the headers of the
// index slices, cut at head. Their elements never change.
type view struct {
	head      uint64
	end       int64
	offsets   []int64
	posStream []uint32
	streams   []*stream
}

func (s *Store) view() view {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h := s.head.Load()
	return view{head: h, end: s.end, offsets: s.offsets[:h], posStream: s.posStream[:h], streams: s.streamList[:s.nstreams]}
}

// recordEnd is the file offset just past the record at position p.
func (v *view) recordEnd(p uint64) int64 {
	if p+1 < v.head {
		return v.offsets[p+1]
	}
	return v.end
}

// ReadAll returns up to limit events from position from (inclusive), in
// position order; none (and no error) from past the end or with limit <= 0.
func (s *Store) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	v := s.view()
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
			return nil, s.readErr(err)
		}
	}
	return out, nil
}

// ReadStream returns up to limit events of stream from version from
// (inclusive), in version order; none (and no error) from past the end or
// with limit <= 0. A stream without events gives eventstore.ErrStreamNotFound.
func (s *Store) ReadStream(ctx context.Context, name string, from uint64, limit int) ([]domain.Envelope, error) {
	if err := s.readable(ctx); err != nil {
		return nil, err
	}
	s.mu.RLock()
	st := s.streams[name]
	var positions []uint64
	if st != nil {
		positions = st.positions[:st.committed]
	}
	s.mu.RUnlock()
	if len(positions) == 0 {
		return nil, fmt.Errorf("embedded: read stream %q: %w", name, eventstore.ErrStreamNotFound)
	}
	if from >= uint64(len(positions)) || limit <= 0 {
		return nil, nil
	}
	positions = positions[from:]
	if limit < len(positions) {
		positions = positions[:limit]
	}
	v := s.view()
	bp := readBufs.Get().(*[]byte)
	defer readBufs.Put(bp)
	out := make([]domain.Envelope, 0, len(positions))
	for len(positions) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Read the next positions that lie close together with one read.
		first := v.offsets[positions[0]]
		n := 1
		for n < len(positions) && v.recordEnd(positions[n])-first <= gatherSpan {
			n++
		}
		b, err := s.readSpan(bp, first, v.recordEnd(positions[n-1]))
		if err != nil {
			return nil, s.readErr(err)
		}
		for _, p := range positions[:n] {
			off := v.offsets[p]
			out = append(out, domain.Envelope{})
			if _, err := s.decode(&v, p, off, b[off-first:v.recordEnd(p)-first], nil, &out[len(out)-1]); err != nil {
				return nil, err
			}
		}
		positions = positions[n:]
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
				return s.readErr(err)
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
	var out []domain.Envelope
	if !match {
		out = make([]domain.Envelope, 0, to-from)
	}
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

// readRange reads the records of positions [from, to) that fit in one read
// (at least one), appends those passing filter to out and returns out and the
// first position not read.
func (s *Store) readRange(v *view, from, to uint64, bp *[]byte, filter eventstore.Filter, out []domain.Envelope) ([]domain.Envelope, uint64, error) {
	start := v.offsets[from]
	// k records fit when the end of the k-th is within readChunk of start.
	k := 1 + sort.Search(int(to-from)-1, func(i int) bool {
		return v.recordEnd(from+uint64(i)+1)-start > readChunk
	})
	stop := from + uint64(k)
	b, err := s.readSpan(bp, start, v.recordEnd(stop-1))
	if err != nil {
		return out, from, err
	}
	match := len(filter.StreamPrefixes) > 0 || len(filter.Types) > 0
	if out == nil && !match {
		out = make([]domain.Envelope, 0, k)
	}
	off := start
	for p := from; p < stop; p++ {
		end := v.recordEnd(p)
		out = append(out, domain.Envelope{})
		var f *eventstore.Filter
		if match {
			f = &filter
		}
		ok, err := s.decode(v, p, off, b[off-start:end-start], f, &out[len(out)-1])
		if err != nil {
			return out, from, err
		}
		if !ok {
			out = out[:len(out)-1]
		}
		off = end
	}
	return out, stop, nil
}

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
	name := v.streams[v.posStream[p]].name
	if r.position != p || string(r.stream) != name {
		return false, corruptError(logName, off, fmt.Sprintf("record holds position %d of %q where the index has position %d of %q", r.position, r.stream, p, name))
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
