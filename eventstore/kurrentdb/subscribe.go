package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/backoff"
)

// maxBatch is the most events a subscription hands its handler at once.
const maxBatch = 512

// Backoff between attempts to subscribe again after the server became
// unavailable.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Subscribe implements eventstore.Store with a KurrentDB catch-up
// subscription to $all, which reads the stored events and then follows new
// ones, in $all order, without gap. The server filters by stream prefix (the
// namespace and the filter's prefixes), or else by event type, or else drops
// system events; the store applies the whole filter to what arrives (see
// serverFilter). Events already received are handed to the handler together,
// up to maxBatch at a time.
//
// If the server becomes unavailable, or ends the subscription, Subscribe
// subscribes again from just after the last event it delivered, waiting
// between attempts (100ms doubling up to 5s) and logging each, until ctx ends
// or the store closes. Any other error of the server ends it, as does a
// client passed to Open that has closed itself (a store from OpenURL replaces
// its own).
func (s *Store) Subscribe(ctx context.Context, from uint64, filter eventstore.Filter, handle func([]domain.Envelope) error) error {
	if err := s.check(ctx); err != nil {
		return err
	}
	ctx = s.forRead(ctx)

	sub := &subscription{
		s:      s,
		next:   max(from, s.origin),
		filter: filter,
		server: serverFilter(s.ns, filter),
		handle: handle,
	}
	pause := backoff.Backoff{Min: minBackoff, Max: maxBackoff, Jitter: backoff.Equal}
	for {
		err := sub.follow(ctx)
		switch {
		case sub.handlerFailed:
			return err
		case s.closed():
			return eventstore.ErrClosed
		case ctx.Err() != nil:
			return ctx.Err()
		case !errors.Is(err, ErrUnavailable):
			return err
		case clientGone(err) && s.cfg == nil:
			return err // the caller's client closed itself; only the caller can replace it
		}
		if sub.delivered {
			pause.Reset()
			sub.delivered = false
		}
		wait := pause.Next()
		s.log.Warn("subscription to $all lost; subscribing again", "from", sub.next, "wait", wait, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-s.done:
			t.Stop()
			return eventstore.ErrClosed
		case <-t.C:
		}
	}
}

// subscription is the state of one Subscribe across its attempts.
type subscription struct {
	s      *Store
	next   uint64 // the lowest position not yet delivered
	filter eventstore.Filter
	server *esdb.SubscriptionFilter
	handle func([]domain.Envelope) error

	delivered     bool   // something was delivered since the last attempt began
	beyond        bool   // next was past the end of the log when first subscribed, and nothing has been delivered since
	resume        uint64 // if beyond: the end of the log then, where every attempt starts
	handlerFailed bool   // follow's error is the handler's
}

// received is one event of the subscription, or the error that ended it.
type received struct {
	env domain.Envelope
	err error
}

// follow runs one server subscription from sub.next until it fails, ctx ends,
// the store closes, or the handler fails.
func (sub *subscription) follow(ctx context.Context) error {
	s := sub.s
	ctx, cancel := context.WithCancel(ctx)
	// End the attempt when the store closes. The deferred cancel runs before
	// the deferred Wait, so both goroutines are gone when follow returns.
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	})

	// A subscription starts after its position, which must be a record of
	// the server's log. Past the end of the log, it starts after the last
	// record (and what arrives below sub.next is dropped); an event at
	// exactly sub.next is read first.
	c := s.conn()
	end, err := s.logEnd(ctx, c)
	if err != nil {
		return s.fail(ctx, c, "read the end of $all", err)
	}
	start := readFrom(sub.next)
	switch {
	case sub.beyond:
		// The log may have grown past sub.next since, which need not be a
		// record boundary: start where the first attempt did.
		start = readFrom(sub.resume)
	case sub.next > end:
		sub.beyond, sub.resume = true, end
		start = readFrom(end)
	case atEvent(sub.next):
		if err := sub.first(ctx); err != nil {
			return err
		}
		start = readFrom(sub.next)
	}
	var server *esdb.Subscription
	err = s.bounded(ctx, c, func() error {
		var err error
		server, err = c.SubscribeToAll(ctx, esdb.SubscribeToAllOptions{From: start, Filter: sub.server})
		return err
	})
	if err != nil {
		return s.fail(ctx, c, "subscribe to $all", err)
	}
	defer func() { _ = server.Close() }()

	events := make(chan received, maxBatch)
	wg.Go(func() { sub.receive(ctx, server, events) })
	for {
		var r received
		select {
		case r = <-events:
		case <-ctx.Done():
			return s.fail(ctx, c, "subscription to $all", ctx.Err())
		}
		batch := make([]domain.Envelope, 0, min(len(events)+1, maxBatch))
		var failed error
	gather:
		for {
			if r.err != nil {
				failed = r.err
				break
			}
			if r.env.Position >= sub.next && (len(batch) == 0 || r.env.Position > batch[len(batch)-1].Position) {
				batch = append(batch, r.env)
			}
			if len(batch) == maxBatch {
				break
			}
			select {
			case r = <-events:
			default:
				break gather
			}
		}
		if len(batch) > 0 {
			if s.closed() {
				return eventstore.ErrClosed
			}
			if err := sub.handle(batch); err != nil {
				sub.handlerFailed = true
				return err
			}
			sub.next = after(batch[len(batch)-1].Position)
			sub.delivered, sub.beyond = true, false
		}
		if failed != nil {
			return s.fail(ctx, c, "subscription to $all", failed)
		}
	}
}

// first delivers the event at position sub.next, if there is one and it
// passes the filter, and moves sub.next past it.
func (sub *subscription) first(ctx context.Context) error {
	s := sub.s
	commit := commitOf(sub.next)
	c := s.conn()
	var rec *esdb.RecordedEvent
	_, err := read(ctx, s.runner(c), func() (*esdb.ReadStream, error) {
		return c.ReadAll(ctx, esdb.ReadAllOptions{Direction: esdb.Forwards, From: esdb.Position{Commit: commit, Prepare: commit}}, 1)
	}, func(r *esdb.RecordedEvent) (bool, error) {
		rec = r
		return true, nil
	})
	if err != nil {
		return s.readAllFailed(ctx, c, sub.next, err)
	}
	if rec == nil || rec.Position.Commit != commit {
		return nil
	}
	sub.next = after(sub.next)
	if !visible(s.ns, rec.StreamID, rec.EventType) {
		return nil
	}
	e, err := fromRecorded(rec, s.ns)
	if err != nil {
		return fmt.Errorf("kurrentdb: read $all: %w", err)
	}
	if !sub.filter.Match(&e) {
		return nil
	}
	if err := sub.handle([]domain.Envelope{e}); err != nil {
		sub.handlerFailed = true
		return err
	}
	sub.delivered = true
	return nil
}

// receive converts what the server sends into events for follow, dropping
// those the store does not see, until the subscription ends; it sends the
// error that ended it last, unless ctx ended first.
func (sub *subscription) receive(ctx context.Context, server *esdb.Subscription, out chan<- received) {
	send := func(r received) bool {
		select {
		case out <- r:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		msg := server.Recv()
		switch {
		case msg.SubscriptionDropped != nil:
			err := msg.SubscriptionDropped.Error
			if err == nil {
				err = io.EOF
			}
			send(received{err: err})
			return
		case msg.EventAppeared != nil:
			rec := msg.EventAppeared.OriginalEvent()
			if rec == nil || !visible(sub.s.ns, rec.StreamID, rec.EventType) {
				continue
			}
			e, err := fromRecorded(rec, sub.s.ns)
			if err != nil {
				send(received{err: fmt.Errorf("kurrentdb: subscription to $all: %w", err)})
				return
			}
			if !sub.filter.Match(&e) {
				continue
			}
			if !send(received{env: e}) {
				return
			}
		}
		// Checkpoints, caught-up and fell-behind notices carry no event.
	}
}
