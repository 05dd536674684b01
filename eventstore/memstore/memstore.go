// Package memstore is an in-memory eventstore.Store: the reference
// implementation of the contract, and the log of deterministic simulation tests.
// Nothing survives the process. Positions are dense: the n-th event committed
// has position n-1, and Head is the number of events. It keeps the hash chain
// (eventstore.NextHash) and implements eventstore.Trimmer.
package memstore

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// maxBatch is the most events a subscription hands to its handler at once.
const maxBatch = 512

// Options configures a Store. The zero value is ready to use.
type Options struct {
	// Clock gives the commit time stamped on appended events. Nil means
	// time.Now. Whatever it returns is stored in UTC without a monotonic
	// reading, so a simulated clock gives reproducible events.
	Clock func() time.Time
}

// Store is an in-memory eventstore.Store. It is safe for concurrent use. The
// zero value is not usable; call New.
type Store struct {
	clock func() time.Time

	mu      sync.Mutex
	first   uint64               // the live log's first position (Trim)
	prev    domain.Hash          // the chain hash of the event before first
	last    domain.Hash          // the chain hash of the last event
	chain   eventstore.Chainer   // under mu
	events  []domain.Envelope    // live events by position: events[p-first]
	streams map[string]*stream   // live and kept streams
	ids     map[uuid.UUID]uint64 // live event id -> position
	commit  chan struct{}        // closed and replaced at every commit: wakes subscribers
	closed  chan struct{}        // closed by Close: wakes subscribers for good
	closing bool                 // set by Close; every method then fails
}

var (
	_ eventstore.Store         = (*Store)(nil)
	_ eventstore.Trimmer       = (*Store)(nil)
	_ eventstore.ChainReporter = (*Store)(nil)
)

// stream is one stream's live events: positions[i] holds version base+i.
// A kept stream whose events were all trimmed has base = its next version
// and no positions.
type stream struct {
	base      uint64
	positions []uint64
}

func (st *stream) exists() bool { return st != nil && (st.base > 0 || len(st.positions) > 0) }
func (st *stream) next() uint64 {
	if st == nil {
		return 0
	}
	return st.base + uint64(len(st.positions))
}

// New returns an empty store.
func New(opts Options) *Store {
	clock := opts.Clock
	if clock == nil {
		clock = time.Now
	}
	return &Store{
		clock:   clock,
		streams: make(map[string]*stream),
		ids:     make(map[uuid.UUID]uint64),
		commit:  make(chan struct{}),
		closed:  make(chan struct{}),
	}
}

// Append implements eventstore.Store, by the rules of AppendMulti.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	return s.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
}

// AtomicMultiStream implements eventstore.MultiStreamReporter: AppendMulti
// writes several streams all or nothing.
func (s *Store) AtomicMultiStream() bool { return true }

// AppendMulti implements eventstore.Store. All events of one call get the
// same Time from the clock. A re-append is recognised only if every event also
// has the content it was stored with (type, schema version, owner, ids, data
// and metadata); an id stored with other content is ErrIdempotencyConflict.
// One call naming an id twice is ErrInvalidEvent. The store keeps copies of
// Data and Metadata, so the caller may reuse its buffers.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if err := ctx.Err(); err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := eventstore.ValidateAppends(appends); err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := noDuplicateIDs(appends); err != nil {
		return eventstore.AppendResult{}, err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return eventstore.AppendResult{}, eventstore.ErrClosed
	}
	if res, done, err := eventstore.Replayed(appends, s.storedByID); done || err != nil {
		return res, err
	}
	for i := range appends {
		a := &appends[i]
		st := s.streams[a.Stream]
		exists := st.exists()
		last := st.next() - 1
		if !a.Expected.Satisfied(exists, last) {
			e := &eventstore.WrongVersionError{Stream: a.Stream, Expected: a.Expected, Exists: exists}
			if exists {
				e.Actual = last
			}
			return eventstore.AppendResult{}, e
		}
	}

	now := s.clock().Round(0).UTC()
	var res eventstore.AppendResult
	for i := range appends {
		a := &appends[i]
		if len(a.Events) == 0 {
			continue // a condition: checked above
		}
		st := s.streams[a.Stream]
		if st == nil {
			st = &stream{}
			s.streams[a.Stream] = st
		}
		for j := range a.Events {
			e := a.Events[j]
			e.Stream = a.Stream
			e.Version = st.next()
			e.Position = s.first + uint64(len(s.events))
			e.Time = now
			e.Data = bytes.Clone(e.Data)
			e.Metadata = bytes.Clone(e.Metadata)
			e.Hash = s.chain.Next(s.last, &e)
			s.last = e.Hash
			st.positions = append(st.positions, e.Position)
			s.ids[e.ID] = e.Position
			s.events = append(s.events, e)
			res = eventstore.AppendResult{Version: e.Version, Position: e.Position}
		}
	}
	close(s.commit)
	s.commit = make(chan struct{})
	return res, nil
}

// noDuplicateIDs refuses a batch that names one event id twice.
func noDuplicateIDs(appends []eventstore.StreamAppend) error {
	seen := make(map[uuid.UUID]struct{})
	for i := range appends {
		for j := range appends[i].Events {
			id := appends[i].Events[j].ID
			if _, dup := seen[id]; dup {
				return fmt.Errorf("%w: event id %s twice in one append", eventstore.ErrInvalidEvent, id)
			}
			seen[id] = struct{}{}
		}
	}
	return nil
}

// ReadStream implements eventstore.Store. A limit of zero or less reads nothing.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := eventstore.ValidateStream(stream); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, eventstore.ErrClosed
	}
	st, ok := s.streams[stream]
	if !ok {
		return nil, fmt.Errorf("read %q: %w", stream, eventstore.ErrStreamNotFound)
	}
	from = max(from, st.base) // a kept stream's trimmed events are the archive's
	if from >= st.next() || limit <= 0 {
		return []domain.Envelope{}, nil
	}
	positions := st.positions[from-st.base:]
	if len(positions) > limit {
		positions = positions[:limit]
	}
	out := make([]domain.Envelope, len(positions))
	for i, p := range positions {
		out[i] = clone(&s.events[p-s.first])
	}
	return out, nil
}

// ReadAll implements eventstore.Store. A limit of zero or less reads nothing.
func (s *Store) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return nil, eventstore.ErrClosed
	}
	if from < s.first {
		return nil, &eventstore.TrimmedError{From: from, First: s.first}
	}
	return s.slice(from, limit, eventstore.Filter{}), nil
}

// slice copies up to limit events from position from on, and returns those
// that pass filter. from must not be below s.first; s.mu must be held.
func (s *Store) slice(from uint64, limit int, filter eventstore.Filter) []domain.Envelope {
	if from >= s.first+uint64(len(s.events)) || limit <= 0 {
		return []domain.Envelope{}
	}
	evs := s.events[from-s.first:]
	if len(evs) > limit {
		evs = evs[:limit]
	}
	out := make([]domain.Envelope, 0, len(evs))
	for i := range evs {
		if filter.Match(&evs[i]) {
			out = append(out, clone(&evs[i]))
		}
	}
	return out
}

// Subscribe implements eventstore.Store. The handler runs without the store's
// lock held, so a slow handler delays only its own subscription.
func (s *Store) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	next := from
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.mu.Lock()
		if s.closing {
			s.mu.Unlock()
			return eventstore.ErrClosed
		}
		if next < s.first {
			s.mu.Unlock()
			return &eventstore.TrimmedError{From: next, First: s.first}
		}
		head := s.first + uint64(len(s.events))
		var batch []domain.Envelope
		if next < head {
			batch = s.slice(next, maxBatch, filter)
			next = min(head, next+maxBatch)
		}
		wait := s.commit
		s.mu.Unlock()

		if len(batch) > 0 {
			if err := handle(batch); err != nil {
				return err
			}
			continue
		}
		if next < head {
			continue // a whole page filtered out; more is stored
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.closed:
			return eventstore.ErrClosed
		case <-wait:
		}
	}
}

// Head implements eventstore.Store: the number of events in the log.
func (s *Store) Head(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return 0, eventstore.ErrClosed
	}
	return s.first + uint64(len(s.events)), nil
}

// Close implements eventstore.Store. Later calls fail with ErrClosed and
// running subscriptions return ErrClosed. Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closing {
		s.closing = true
		close(s.closed)
	}
	return nil
}

// clone copies an event so that neither the store nor its reader can change
// the other's bytes.
func clone(e *domain.Envelope) domain.Envelope {
	c := *e
	c.Data = bytes.Clone(e.Data)
	c.Metadata = bytes.Clone(e.Metadata)
	return c
}

// storedByID returns the stored event with id, or nil. s.mu must be held.
func (s *Store) storedByID(id uuid.UUID) *domain.Envelope {
	if i, ok := s.ids[id]; ok {
		return &s.events[i-s.first]
	}
	return nil
}

// KeepsChain implements eventstore.ChainReporter: every event's Hash is set.
func (s *Store) KeepsChain() bool { return true }

// Trim implements eventstore.Trimmer. The trimmed events' memory is released.
func (s *Store) Trim(ctx context.Context, before uint64, keep []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return eventstore.ErrClosed
	}
	head := s.first + uint64(len(s.events))
	if before > head {
		return fmt.Errorf("%w: trim before %d, but the head is %d", eventstore.ErrInvalidEvent, before, head)
	}
	if before <= s.first {
		return nil
	}
	kept := make(map[string]bool, len(keep))
	for _, k := range keep {
		kept[k] = true
	}
	cut := before - s.first
	for i := range s.events[:cut] {
		e := &s.events[i]
		delete(s.ids, e.ID)
		st := s.streams[e.Stream]
		if st == nil || len(st.positions) == 0 || st.positions[0] != e.Position {
			continue // already dropped with its stream
		}
		st.positions = st.positions[1:]
		st.base++
		if len(st.positions) == 0 && !kept[e.Stream] {
			delete(s.streams, e.Stream)
		}
	}
	s.prev = s.events[cut-1].Hash
	s.events = append([]domain.Envelope(nil), s.events[cut:]...)
	s.first = before
	return nil
}

// Start implements eventstore.Trimmer.
func (s *Store) Start(ctx context.Context) (uint64, domain.Hash, error) {
	if err := ctx.Err(); err != nil {
		return 0, domain.Hash{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return 0, domain.Hash{}, eventstore.ErrClosed
	}
	return s.first, s.prev, nil
}
