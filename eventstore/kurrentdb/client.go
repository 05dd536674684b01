package kurrentdb

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/eventstore"
)

// Living with the client (v4.2.0)
//
// Three of its behaviours shape how the store calls it:
//
//   - Every call first asks the client's connection goroutine for a
//     connection, over an unbuffered channel and without looking at the
//     caller's context. While that goroutine runs a node discovery (after an
//     unavailable error, until the server answers or maxDiscoverAttempts
//     run out) every caller waits there; if the discovery fails, the
//     goroutine exits and callers that were waiting hang for good. So the
//     store makes each call on a goroutine of its own (bounded) and returns
//     when the caller's context ends, whatever the client does.
//   - After a failed discovery the client is closed for good. A store that
//     owns its client (OpenURL) replaces it (revive).
//   - Closing the client while a call is inside it can make that call panic
//     (a send on a closed channel). A store closes its own client only once
//     its calls have returned, and never closes one it replaced.

// closeGrace is how long Close waits for calls in flight before closing the
// store's own client.
const closeGrace = 5 * time.Second

// conn is a client and the store's goroutines inside it.
type conn struct {
	*esdb.Client
	calls int           // goroutines of the store inside the client, under Store.mu
	idle  chan struct{} // closed once the store is closed and calls is 0

	gone    chan struct{} // closed once a call has found the client closed for good
	goneErr error         // that call's error, set before gone is closed
	bury    sync.Once
}

// newConn returns the conn of a client.
func newConn(c *esdb.Client) *conn {
	return &conn{Client: c, idle: make(chan struct{}), gone: make(chan struct{})}
}

// buried records that the client closed itself for good, as err (from the
// client) says: calls stuck in it return err at once instead of waiting for
// their context, which may have no deadline (a subscription's).
func (c *conn) buried(err error) {
	c.bury.Do(func() {
		c.goneErr = err
		close(c.gone)
	})
}

// conn returns the client to call.
func (s *Store) conn() *conn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

// bounded runs fn, which calls the client, on a goroutine of its own, and
// returns its error, or ctx's error as soon as ctx ends (fn then finishes,
// or not, on its own; it must not touch anything the caller reads after an
// early return).
func bounded(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// bounded is bounded for a call into c, counting the goroutine inside c
// until it returns, so that Close knows when it may close the client, and
// returning the client's closed error as soon as any call has seen it. Once
// the store is closed it refuses to enter the client (ErrClosed).
func (s *Store) bounded(ctx context.Context, c *conn, fn func() error) error {
	s.mu.Lock()
	if s.closed() {
		s.mu.Unlock()
		return eventstore.ErrClosed
	}
	c.calls++
	s.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		defer func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			c.calls--
			if c.calls == 0 && s.closed() {
				close(c.idle) // Close saw calls > 0, so it has not closed idle
			}
		}()
		done <- fn()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-c.gone:
		// Another call found the client closed for good: this one may be
		// stuck in it forever (see above).
		return c.goneErr
	}
}

// runner returns Store.bounded for c, for read.
func (s *Store) runner(c *conn) func(context.Context, func() error) error {
	return func(ctx context.Context, fn func() error) error { return s.bounded(ctx, c, fn) }
}

// read runs one read of the client's (ReadStream or ReadAll, by open) with
// run (bounded or Store.bounded), and hands each event to each until it
// returns true or the read ends. It returns how many events the server sent,
// and the client's error as is. If it returns early because ctx ended, each
// may still be running: the caller must not read what each writes.
func read(ctx context.Context, run func(context.Context, func() error) error, open func() (*esdb.ReadStream, error), each func(*esdb.RecordedEvent) (bool, error)) (int, error) {
	n := 0
	err := run(ctx, func() error {
		rs, err := open()
		if err != nil {
			return err
		}
		defer rs.Close()
		for {
			ev, err := rs.Recv()
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return err
			}
			n++
			rec := ev.OriginalEvent()
			if rec == nil {
				continue
			}
			if stop, err := each(rec); stop || err != nil {
				return err
			}
		}
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}

// clientGone reports whether err says the client has closed itself for
// good, as it does after a node discovery fails.
func clientGone(err error) bool {
	var ee *esdb.Error
	if !errors.As(err, &ee) {
		return false
	}
	return ee.Code() == esdb.ErrorCodeConnectionClosed || strings.Contains(ee.Error(), "maximum discovery attempt count reached")
}

// revive replaces the client dead, which has closed itself, with a new one
// made from the same configuration, if the store owns its client and has not
// replaced it already. The call that failed still fails (ErrUnavailable);
// later ones use the new client, which connects when first used. The dead
// client is left as it is: calls may still be stuck in it.
func (s *Store) revive(dead *conn) {
	if s.cfg == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.client != dead || s.closed() {
		return
	}
	fresh, err := esdb.NewClient(s.cfg)
	if err != nil {
		s.log.Error("cannot replace the KurrentDB client", "err", err)
		return
	}
	s.log.Warn("the KurrentDB client closed itself after failing to reach the server; replaced it")
	s.client = newConn(fresh)
}
