package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/turnstile/turnstile/client/wire"
)

// Feed names one of the server's live feeds (Server-Sent Events).
type Feed string

// The feeds. FeedEvents sends every event of the log once, in position
// order. FeedExecutions and FeedQueueStats are state feeds: each message
// is the latest state of one execution (one action's queue statistics);
// a state superseded before it was sent may be skipped, a final one never.
const (
	FeedEvents     Feed = "events"
	FeedExecutions Feed = "executions"
	FeedQueueStats Feed = "queue-stats"
)

// Start says where a feed starts. The zero Start is now: the first message
// is the first change after the connection.
type Start struct {
	from   string // ?from=
	lastID string // Last-Event-ID
}

// FromPosition starts a feed at log position p (inclusive): a state feed
// sends every state that changed at or after p.
func FromPosition(p uint64) Start { return Start{from: strconv.FormatUint(p, 10)} }

// After starts a feed after the message whose id is id (a log position), as
// a reconnection does: nothing is missed and nothing sent twice.
func After(id uint64) Start { return Start{lastID: strconv.FormatUint(id, 10)} }

// FeedOptions says which messages of a feed to follow, from where, and how
// to survive dropped connections.
type FeedOptions struct {
	Action string // only what belongs to this action; "" for everything
	Start  Start  // where to start; the zero value is now
	// MaxReconnects bounds the reconnection attempts in a row that receive
	// no message; 0 means 10, a negative value never reconnects.
	MaxReconnects int
	// OnReconnect, if set, is called before each reconnection with why the
	// connection ended and the id the feed resumes after ("" if none).
	OnReconnect func(err error, lastID string)
	// IdleTimeout drops a connection on which nothing (not even the
	// server's heartbeat, every 15 s by default) arrived for this long, and
	// reconnects: a connection cut without a word (a dead proxy, a network
	// that drops packets) is noticed. 0 means one minute; a negative value
	// waits forever.
	IdleTimeout time.Duration
}

// Message is one message of a feed: its id (the log position of the event
// or of the state's latest change), its kind ("event", "execution",
// "queue-stats") and its data, a JSON document as the server wrote it.
type Message struct {
	ID    uint64
	Event string
	Data  json.RawMessage
}

// ErrStop, returned by a feed's function, ends the feed without error.
var ErrStop = errors.New("client: stop following the feed")

// Defaults of FeedOptions.
const (
	defaultReconnects  = 10
	defaultIdleTimeout = time.Minute
)

// Follow reads feed and calls fn with each message, in order, until fn
// returns an error (ErrStop ends it with nil), ctx ends (ctx's error), or
// the feed cannot be read. A connection that drops is opened again after
// the delay the server asked for, with Last-Event-ID set to the last
// message's id, so the feed goes on without a gap or a duplicate. A
// server that refuses the feed (not a 5xx) or that cannot be reached at
// the first connection ends it at once.
func (c *Client) Follow(ctx context.Context, feed Feed, opts FeedOptions, fn func(Message) error) error {
	path := "/api/v1/feeds/" + string(feed)
	query := url.Values{}
	if opts.Action != "" {
		query.Set("action", opts.Action)
	}
	if opts.Start.from != "" {
		query.Set("from", opts.Start.from)
	}
	lastID := opts.Start.lastID
	maxReconnects := opts.MaxReconnects
	if maxReconnects == 0 {
		maxReconnects = defaultReconnects
	}
	idle := opts.IdleTimeout
	if idle == 0 {
		idle = defaultIdleTimeout
	}
	retry := 2 * time.Second
	connected, failures := false, 0
	for {
		header := http.Header{"Accept": {"text/event-stream"}, "Cache-Control": {"no-cache"}}
		if lastID != "" {
			header.Set("Last-Event-ID", lastID)
		}
		err := c.followOnce(ctx, request{method: "GET", path: path, query: query, header: header}, idle, &retry, func(m sseMessage) error {
			id, perr := strconv.ParseUint(m.id, 10, 64)
			if perr != nil {
				return fmt.Errorf("feed %s: message id %q is not a log position", feed, m.id)
			}
			lastID, failures = m.id, 0
			return fn(Message{ID: id, Event: m.event, Data: m.data})
		}, &connected)
		p := AsProblem(err)
		retryable := errors.Is(err, errDropped) || isTransport(err) || (p != nil && p.Status >= 500)
		switch {
		case errors.Is(err, ErrStop):
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case !retryable:
			return err // fn's error, a refusal, or a message the client cannot read
		case !connected:
			return err // never connected: the server is not there
		case maxReconnects < 0:
			return err
		}
		if failures++; failures > maxReconnects {
			return fmt.Errorf("feed %s: gave up after %d reconnection attempts: %w", feed, maxReconnects, err)
		}
		if opts.OnReconnect != nil {
			opts.OnReconnect(err, lastID)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}

// transportError marks an error of the connection, not of the messages.
type transportError struct{ err error }

func (e transportError) Error() string { return e.err.Error() }
func (e transportError) Unwrap() error { return e.err }

func isTransport(err error) bool {
	var te transportError
	return errors.As(err, &te)
}

// followOnce opens one connection of a feed and reads it until it ends, or
// until nothing arrived on it for idle (when positive). *connected becomes
// true once the server accepted the feed.
func (c *Client) followOnce(ctx context.Context, r request, idle time.Duration, retry *time.Duration, fn func(sseMessage) error, connected *bool) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	req, err := c.newRequest(ctx, r)
	if err != nil {
		return err
	}
	reset, pause := func() {}, func() {}
	if idle > 0 { // from the request on: a server that never answers is silent too
		silent := fmt.Errorf("nothing arrived for %s", idle)
		timer := time.AfterFunc(idle, func() { cancel(silent) })
		defer timer.Stop()
		reset, pause = func() { timer.Reset(idle) }, func() { timer.Stop() }
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			err = fmt.Errorf("%w (%w)", err, cause)
		}
		return transportError{err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return problemOf(resp, data)
	}
	*connected = true
	err = readSSE(&watchdog{r: resp.Body, reset: reset}, retry, func(m sseMessage) error {
		pause() // the time fn takes is not the server's silence
		defer reset()
		return fn(m)
	})
	if cause := context.Cause(ctx); errors.Is(err, errDropped) && cause != nil && ctx.Err() != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("%w: %w", errDropped, cause) // the watchdog's, or the caller's deadline
	}
	return err
}

// watchdog calls reset whenever bytes arrive.
type watchdog struct {
	r     io.Reader
	reset func()
}

func (w *watchdog) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.reset()
	}
	return n, err
}

// follow is Follow with each message's data decoded into a T.
func follow[T any](ctx context.Context, c *Client, feed Feed, opts FeedOptions, fn func(T) error) error {
	return c.Follow(ctx, feed, opts, func(m Message) error {
		var v T
		if err := json.Unmarshal(m.Data, &v); err != nil {
			return fmt.Errorf("feed %s: message %d: %w", feed, m.ID, err)
		}
		return fn(v)
	})
}

// FollowEvents follows the log's events (see Follow): every event once,
// in position order.
func (c *Client) FollowEvents(ctx context.Context, opts FeedOptions, fn func(wire.Event) error) error {
	return follow(ctx, c, FeedEvents, opts, fn)
}

// FollowExecutions follows the executions' states (see Follow): each
// message is one execution's latest state; its Position is the message's
// id.
func (c *Client) FollowExecutions(ctx context.Context, opts FeedOptions, fn func(wire.Execution) error) error {
	return follow(ctx, c, FeedExecutions, opts, fn)
}

// FollowQueueStats follows the actions' queue statistics (see Follow).
func (c *Client) FollowQueueStats(ctx context.Context, opts FeedOptions, fn func(wire.QueueStats) error) error {
	return follow(ctx, c, FeedQueueStats, opts, fn)
}
