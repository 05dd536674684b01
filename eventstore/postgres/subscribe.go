package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/backoff"
)

const (
	// pageSize is the most events a subscription reads and hands to its
	// handler at once.
	pageSize = 512
	// scanWindow is the most positions one page query looks through, so that
	// a subscription whose filter matches little reads a long log in bounded
	// steps instead of one long scan.
	scanWindow = 64 * 1024
)

// waker wakes every waiter at once: waiters take the current channel, wake
// closes it and makes a new one.
type waker struct {
	mu sync.Mutex
	ch chan struct{}
}

func (w *waker) wait() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *waker) wake() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.ch)
	w.ch = make(chan struct{})
}

// Subscribe implements eventstore.Store. It reads pages of committed events
// (filtered in the query), hands each to handle with no connection or lock
// held, and, once caught up, waits for a notification of a commit by any
// writer of the schema (LISTEN on one connection per Store, opened on the
// first Subscribe) or for Options.PollInterval, whichever comes first. The
// events this Store's own appends committed lately it takes from memory
// (see feed) instead of reading them back. A failing query ends it with
// that error.
func (s *Store) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) (err error) {
	defer markUnavailable(&err)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return eventstore.ErrClosed
	}
	s.listenOnce.Do(func() { s.wg.Go(s.listen) }) // under mu: never after Close's wg.Wait
	s.mu.Unlock()
	prefixes, types, inSQL := sqlFilter(filter)
	if err := s.checkLive(ctx, from); err != nil {
		return err
	}
	next := from
	poll := true // read the database first, and whenever the poll interval passes
	for {
		if s.isClosed() {
			return eventstore.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		wake := s.wake.wait() // before looking, so no commit after the look is missed
		evs, upto, what := s.feed.read(next, filter, pageSize)
		switch {
		case what == feedServe:
			next = upto
			if len(evs) > 0 {
				// A fresh slice; data and metadata shared with the feed, which
				// never changes them (the contract lets a batch share them).
				if err := handle(evs); err != nil {
					return err
				}
			}
			continue
		case what == feedRead || poll:
			poll = false
			var head, start uint64
			var err error
			evs, head, start, err = s.page(ctx, next, prefixes, types)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("postgres: subscribe: %w", err)
			}
			if next < start {
				return &eventstore.TrimmedError{From: next, First: start}
			}
			s.feed.heard(head)
			// Unless it is full, the page holds every match below the end
			// of its window and below head: the events below head were all
			// visible to the query.
			scanned := min(windowEnd(next), head)
			if len(evs) > 0 {
				next = evs[len(evs)-1].Position + 1
			}
			if len(evs) < pageSize {
				next = max(next, scanned)
			}
			if !inSQL {
				evs = matching(evs, filter)
			}
			if len(evs) > 0 {
				if err := handle(evs); err != nil {
					return err
				}
				continue
			}
			if next < head {
				continue // a window with no match; more is stored
			}
		}
		timer := time.NewTimer(s.opts.PollInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		case <-s.closed:
			timer.Stop()
			return eventstore.ErrClosed
		case <-wake:
		case <-timer.C:
			poll = true
		}
		timer.Stop()
	}
}

// windowEnd is the end of the scan window that starts at from.
func windowEnd(from uint64) uint64 {
	if from > math.MaxInt64-scanWindow {
		return math.MaxInt64
	}
	return from + scanWindow
}

// page reads, in one statement (one snapshot), the log's head, the live
// log's start and up to pageSize events at positions from from to windowEnd(from) that pass the
// filter: every event below head is visible to it.
func (s *Store) page(ctx context.Context, from uint64, prefixes, types []string) ([]domain.Envelope, uint64, uint64, error) {
	rows, err := s.pool.Query(ctx, s.sql.readPage, describe, clamp(from), int64(windowEnd(from)), prefixes, types, pageSize)
	if err != nil {
		return nil, 0, 0, err
	}
	defer rows.Close()
	evs := []domain.Envelope{}
	var head, start int64
	for rows.Next() {
		var e domain.Envelope
		var pos, version int64
		var h []byte
		err := rows.Scan(&head, &start, &pos, &e.Stream, &version, (*[16]byte)(&e.ID), &e.Type, &e.SchemaVersion, &e.Time,
			(*string)(&e.Owner), &e.CorrelationID, &e.CausationID, &e.Writer, (*[]byte)(&e.Data), (*[]byte)(&e.Metadata), &h)
		if err != nil {
			return nil, 0, 0, err
		}
		copy(e.Hash[:], h)
		if pos < 0 { // the row that only carries the head: no event matched
			continue
		}
		e.Position, e.Version, e.Time = uint64(pos), uint64(version), e.Time.UTC()
		evs = append(evs, e)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, 0, err
	}
	// The join hands the lateral page on in its order; should a plan ever
	// not, order it here rather than in the query (a sort of wide rows).
	if !slices.IsSortedFunc(evs, byPosition) {
		slices.SortFunc(evs, byPosition)
	}
	return evs, uint64(head), uint64(start), nil
}

func byPosition(a, b domain.Envelope) int { return cmp.Compare(a.Position, b.Position) }

// sqlFilter returns the filter's prefixes and types as query parameters, and
// whether the query can apply them: a value PostgreSQL text cannot hold
// (never a stored stream or type) is left to Filter.Match instead.
func sqlFilter(f eventstore.Filter) (prefixes, types []string, inSQL bool) {
	for _, v := range append(append([]string(nil), f.StreamPrefixes...), f.Types...) {
		if !textOK(v) {
			return []string{}, []string{}, false
		}
	}
	return append([]string{}, f.StreamPrefixes...), append([]string{}, f.Types...), true
}

// matching returns the events of evs that pass f.
func matching(evs []domain.Envelope, f eventstore.Filter) []domain.Envelope {
	out := evs[:0]
	for i := range evs {
		if f.Match(&evs[i]) {
			out = append(out, evs[i])
		}
	}
	return out
}

// listen keeps a connection LISTENing on the schema's channel and wakes the
// subscriptions on every notification, and whenever it (re)connects, since
// commits may have been missed meanwhile. It reconnects with backoff until
// the store is closed; subscriptions poll while it is down.
func (s *Store) listen() {
	cfg := s.pool.Config().ConnConfig
	pause := backoff.Backoff{Min: 50 * time.Millisecond, Max: s.opts.PollInterval, Jitter: backoff.Equal}
	for s.ctx.Err() == nil {
		err := s.listenOnceConnected(cfg)
		if s.ctx.Err() != nil {
			return
		}
		wait := pause.Next()
		s.opts.Logger.Warn("postgres: listening for commits failed; subscriptions poll until it reconnects",
			"schema", s.opts.Schema, "err", err, "retry_in", wait)
		if !backoff.Sleep(s.ctx, wait) {
			return
		}
	}
}

// listenOnceConnected runs one listening connection until it fails or the
// store is closed.
func (s *Store) listenOnceConnected(cfg *pgx.ConnConfig) error {
	conn, err := pgx.ConnectConfig(s.ctx, cfg)
	if err != nil {
		return err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	if _, err := conn.Exec(s.ctx, s.sql.listen); err != nil {
		return err
	}
	s.wake.wake()
	for {
		n, err := conn.WaitForNotification(s.ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) {
				return nil
			}
			return err
		}
		// The payload is the new head. A commit of this Store's own that
		// the feed already holds needs no wake-up.
		head, err := strconv.ParseUint(n.Payload, 10, 64)
		if err == nil {
			s.feed.heard(head)
			if s.feed.covers(head) {
				continue
			}
		}
		s.wake.wake()
	}
}
