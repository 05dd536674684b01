package kurrentdb

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
	"github.com/google/uuid"
	v2 "github.com/kurrent-io/KurrentDB-Client-Go/protos/kurrentdb/protocols/v2/streams/streams"
	"google.golang.org/grpc"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// pageSize is how many events one read asks the server for when the store
// scans (a stream's tail, $all for Head, $all past other namespaces' events).
const pageSize = 512

// Store is an eventstore.Store on a KurrentDB (or EventStoreDB) server. It is
// safe for concurrent use. The zero value is not usable; call Open or OpenURL.
type Store struct {
	mu      sync.Mutex
	client  *conn               // see Store.conn
	cfg     *esdb.Configuration // set when the store owns its client (OpenURL): to replace it
	ns      string
	origin  uint64
	anyNode bool // Options.FollowerReads
	window  int
	log     *slog.Logger

	// multi appends to several streams atomically (multi.go); nil when the
	// server does not offer AppendRecords or no connection was given.
	multi     v2.StreamsServiceClient
	multiConn *grpc.ClientConn // the connection OpenURL made for it, closed by Close

	done chan struct{} // closed by Close
}

var _ eventstore.Store = (*Store)(nil)

// Open returns a Store on a client the caller made. The caller keeps the
// client: Close leaves it open, and several stores (with different
// namespaces) may share it.
//
// With Options.MultiStreamConn, Open asks the server whether it offers
// AppendRecords (waiting at most detectTimeout) and fails if it cannot ask.
func Open(client *esdb.Client, opts Options) (*Store, error) {
	return open(context.Background(), client, opts)
}

// open is Open, asking the server within ctx.
func open(ctx context.Context, client *esdb.Client, opts Options) (*Store, error) {
	if client == nil {
		return nil, errNoClient
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts.setDefaults()
	var multi v2.StreamsServiceClient
	if opts.MultiStreamConn != nil {
		ctx, cancel := context.WithTimeout(ctx, detectTimeout)
		ok, err := supportsAppendRecords(ctx, opts.MultiStreamConn)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("kurrentdb: asking the server for its supported methods: %w", err)
		}
		if ok {
			multi = v2.NewStreamsServiceClient(opts.MultiStreamConn)
		}
	}
	return &Store{
		multi:   multi,
		client:  newConn(client),
		ns:      opts.Namespace,
		origin:  opts.Origin,
		anyNode: opts.FollowerReads,
		window:  opts.IdempotencyWindow,
		log:     opts.Logger.With("component", "eventstore/kurrentdb"),
		done:    make(chan struct{}),
	}, nil
}

// LogEnd returns the turnstile position just after the last event of the
// server's whole $all, system events included, or 0 if $all is empty. It is
// the Origin of a namespace created now.
func LogEnd(ctx context.Context, client *esdb.Client) (uint64, error) {
	end, err := logEnd(leader(ctx), bounded, client)
	if err != nil {
		return 0, translate(ctx, "read the end of $all", err)
	}
	return end, nil
}

// logEnd is LogEnd on the store's client c, with the client's error as is.
func (s *Store) logEnd(ctx context.Context, c *conn) (uint64, error) {
	return logEnd(ctx, s.runner(c), c.Client)
}

func logEnd(ctx context.Context, run func(context.Context, func() error) error, client *esdb.Client) (uint64, error) {
	var last *esdb.Position
	_, err := read(ctx, run, func() (*esdb.ReadStream, error) {
		return client.ReadAll(ctx, esdb.ReadAllOptions{Direction: esdb.Backwards, From: esdb.End{}}, 1)
	}, func(rec *esdb.RecordedEvent) (bool, error) {
		last = &rec.Position
		return true, nil
	})
	switch {
	case err != nil:
		return 0, err
	case last == nil:
		return 0, nil
	case last.Commit > maxCommit:
		return 0, fmt.Errorf("kurrentdb: commit position %d out of range", last.Commit)
	}
	return after(last.Commit << 1), nil
}

// Close implements eventstore.Store: later calls fail with ErrClosed and
// running subscriptions end with ErrClosed. A store made by OpenURL closes its
// client too, once no call of the store is inside it (or after closeGrace,
// leaving the client open if some still are: closing it under them would
// make them panic). Closing twice is harmless.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed() {
		s.mu.Unlock()
		return nil
	}
	close(s.done)
	c := s.client
	if c.calls == 0 {
		close(c.idle)
	}
	s.mu.Unlock()
	if s.cfg == nil {
		return nil
	}
	if s.multiConn != nil {
		_ = s.multiConn.Close() // its calls end with the store (callMulti)
	}
	select {
	case <-c.idle:
		_ = c.Close()
	case <-time.After(closeGrace):
		s.log.Error("closed the store but not its KurrentDB client: calls are still stuck in it", "grace", closeGrace)
	}
	return nil
}

func (s *Store) closed() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// check fails if the store is closed or ctx has ended.
func (s *Store) check(ctx context.Context) error {
	if s.closed() {
		return eventstore.ErrClosed
	}
	return ctx.Err()
}

// fail translates an error of the client c, reporting ErrClosed if the
// store was closed meanwhile, and replaces c if it has closed itself.
func (s *Store) fail(ctx context.Context, c *conn, op string, err error) error {
	if s.closed() {
		return fmt.Errorf("kurrentdb: %s: %w", op, eventstore.ErrClosed)
	}
	if clientGone(err) {
		c.buried(err)
		s.revive(c)
	}
	return translate(ctx, op, err)
}

// Append implements eventstore.Store.
//
// The server checks the expected version and writes the events atomically.
// Idempotency: the event ids go to the server, which recognises a retried
// append whose expected version has been overtaken by the append itself, and
// (by a cache of recent ids) one with expected version Any. The store adds
// what the contract needs on top: before appending it reads the stream's
// latest events and, if some of the batch's ids are there, answers from them
// (the original result, or ErrIdempotencyConflict) without writing; and when
// the server reports a wrong expected version, it looks for the batch among
// the stream's last IdempotencyWindow events before reporting the
// *eventstore.WrongVersionError. What it cannot do: recognise ids stored in
// another stream, or deeper in this one than the window, when the expected
// version still holds; those are appended again.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (eventstore.AppendResult, error) {
	var none eventstore.AppendResult
	if err := s.check(ctx); err != nil {
		return none, err
	}
	ctx = leader(ctx) // the tail and the search for a retry must be the leader's

	if err := validate([]eventstore.StreamAppend{{Stream: stream, Expected: expected, Events: events}}); err != nil {
		return none, err
	}
	name := s.ns + stream

	// The stream's tail: its current revision, and a batch already there.
	tail, err := s.readStream(ctx, name, esdb.Backwards, esdb.End{}, uint64(min(len(events), pageSize)))
	exists := !errors.Is(err, eventstore.ErrStreamNotFound)
	if err != nil && exists {
		return none, err
	}
	if holdsAny(tail, events) {
		res, found, err := s.stored(ctx, stream, events, esdb.End{}, 0)
		if err != nil {
			return none, err
		}
		if found {
			return res, nil
		}
	}

	data := make([]esdb.EventData, len(events))
	for i := range events {
		data[i] = toEventData(&events[i])
	}
	c := s.conn()
	var wr *esdb.WriteResult
	err = s.bounded(ctx, c, func() error {
		var err error
		wr, err = c.AppendToStream(ctx, name, esdb.AppendToStreamOptions{ExpectedRevision: toRevision(expected), Deadline: deadline(ctx)}, data...)
		return err
	})
	if err != nil {
		var ee *esdb.Error
		if !errors.As(err, &ee) || ee.Code() != esdb.ErrorCodeWrongExpectedVersion || s.closed() {
			return none, s.fail(ctx, c, fmt.Sprintf("append to %q", stream), err)
		}
		// A retry of an append that did commit, with an expected version
		// that no longer holds? The server has compared the ids after an
		// exact or no-stream expectation: look only where the batch could
		// be other than there (see searchFloor), and deeper only once some
		// of its ids have turned up.
		var top esdb.StreamPosition = esdb.End{}
		if _, exists, actual, ok := parseWrongVersion(ee.Error()); ok && exists {
			top = esdb.Revision(actual)
		}
		res, found, serr := s.stored(ctx, stream, events, top, searchFloor(expected, len(events)))
		if serr != nil {
			return none, serr
		}
		if found {
			return res, nil
		}
		return none, s.wrongVersion(ctx, stream, expected, ee)
	}

	res := eventstore.AppendResult{Version: wr.NextExpectedVersion, Position: wr.CommitPosition << 1}
	// The server returns the last event's revision and commit position. A
	// write that ends no later than the tail did is one the server took for
	// a retry, by the events' ids alone (and, for Any and StreamExists,
	// wherever those ids are in the stream): check the whole batch is there
	// as it is now, in order and with the same content, and take its
	// position from the events (what the server reports for a retry is not
	// documented).
	if wr.CommitPosition == 0 || wr.CommitPosition > maxCommit || (exists && len(tail) > 0 && wr.NextExpectedVersion <= tail[0].Version) {
		return s.recognised(ctx, stream, events, wr.NextExpectedVersion)
	}
	return res, nil
}

// searchFloor is the lowest version at which Append looks for a batch of n
// events it may be retrying, after the server reported a wrong expected
// version for expected. The server has compared the ids after an exact or
// no-stream expectation, so the batch is not there; it may still be stored
// with another expected version, and a writer that read the stream up to
// version v before it chose the batch's ids cannot have stored it before
// v+1: the search starts a batch's length before that, so a batch that
// overlaps the stale expectation is found too. A lost race thus reads what
// the other writers added, not the whole window. For Any and StreamExists
// the search covers the window.
func searchFloor(expected eventstore.ExpectedVersion, n int) uint64 {
	v, ok := expected.Exact()
	if !ok || v+1 < uint64(n) {
		return 0
	}
	return v + 1 - uint64(n)
}

// recognised returns the result of an append the server acknowledged as a
// retry, with last the revision it reported: the original result if the
// batch is stored at the versions ending at last, in order, with the same
// content; ErrIdempotencyConflict otherwise.
func (s *Store) recognised(ctx context.Context, stream string, batch []domain.Envelope, last uint64) (eventstore.AppendResult, error) {
	conflict := func(format string, args ...any) error {
		return fmt.Errorf("kurrentdb: append to %q: %w: %s", stream, eventstore.ErrIdempotencyConflict, fmt.Sprintf(format, args...))
	}
	n := uint64(len(batch))
	if last+1 < n {
		return eventstore.AppendResult{}, conflict("the server took the batch for a retry ending at version %d, which has room for fewer than its %d events", last, n)
	}
	got, err := s.readStream(ctx, s.ns+stream, esdb.Forwards, esdb.Revision(last+1-n), n)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := sameBatch(got, batch); err != nil {
		return eventstore.AppendResult{}, conflict("the server took the batch for a retry ending at version %d, but %v", last, err)
	}
	e := got[len(got)-1]
	return eventstore.AppendResult{Version: e.Version, Position: e.Position}, nil
}

// sameBatch reports how stored differs from batch, or nil if it holds the
// batch's events, in order, with the same content.
func sameBatch(stored, batch []domain.Envelope) error {
	for i := range batch {
		switch {
		case i >= len(stored):
			return fmt.Errorf("the stream ends before the batch's event %d", i)
		case stored[i].ID != batch[i].ID:
			return fmt.Errorf("version %d holds event %s, not the batch's event %d (%s)", stored[i].Version, stored[i].ID, i, batch[i].ID)
		case !eventstore.SameContent(&stored[i], &batch[i]):
			return fmt.Errorf("event %s is stored with different content", batch[i].ID)
		}
	}
	return nil
}

// deadline returns the time left to ctx, for the client's calls that
// otherwise end at the client's default deadline (10s, or the connection
// string's defaultDeadline) whatever the caller's context allows; nil (the
// client's default) if ctx has no deadline.
func deadline(ctx context.Context) *time.Duration {
	d, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	left := max(time.Until(d), time.Millisecond)
	return &left
}

// wrongVersion builds the typed error for a wrong-expected-version answer.
func (s *Store) wrongVersion(ctx context.Context, stream string, expected eventstore.ExpectedVersion, ee *esdb.Error) error {
	wv := &eventstore.WrongVersionError{Stream: stream, Expected: expected}
	msg := ee.Error()
	if _, exists, actual, ok := parseWrongVersion(msg); ok {
		wv.Exists, wv.Actual = exists, actual
		return fmt.Errorf("kurrentdb: %w (%w)", wv, ee)
	}
	// Not the message this client version writes: ask the server.
	last, err := s.readStream(ctx, s.ns+stream, esdb.Backwards, esdb.End{}, 1)
	switch {
	case errors.Is(err, eventstore.ErrStreamNotFound):
	case err != nil:
		return fmt.Errorf("kurrentdb: %w (%w); reading the stream's state: %w", wv, ee, err)
	case len(last) == 1:
		wv.Exists, wv.Actual = true, last[0].Version
	}
	return fmt.Errorf("kurrentdb: %w (%w)", wv, ee)
}

// holdsAny reports whether any event of batch is among evs.
func holdsAny(evs, batch []domain.Envelope) bool {
	if len(evs) == 0 {
		return false
	}
	ids := make(map[uuid.UUID]struct{}, len(evs))
	for i := range evs {
		ids[evs[i].ID] = struct{}{}
	}
	for i := range batch {
		if _, ok := ids[batch[i].ID]; ok {
			return true
		}
	}
	return false
}

// stored looks for batch among the last IdempotencyWindow events of stream
// from top (End, or the stream's last revision if known) down to version
// floor, or further (within the window) once some of its ids have been
// found. found is false if none of its ids is there. If the whole batch is
// there, in order, at consecutive versions, with the same content, it
// returns the result of the append that stored it. Anything in between is
// ErrIdempotencyConflict.
func (s *Store) stored(ctx context.Context, stream string, batch []domain.Envelope, top esdb.StreamPosition, floor uint64) (res eventstore.AppendResult, found bool, err error) {
	name := s.ns + stream
	want := make(map[uuid.UUID]bool, len(batch))
	for i := range batch {
		want[batch[i].ID] = true
	}
	hits := 0
	var first *domain.Envelope
	from := top
	for scanned := 0; scanned < s.window && first == nil; {
		count := min(pageSize, s.window-scanned)
		if r, ok := from.(esdb.StreamRevision); ok {
			if hits == 0 && r.Value < floor {
				break
			}
			if hits == 0 {
				count = min(count, int(min(r.Value-floor+1, pageSize)))
			}
		}
		page, err := s.readStream(ctx, name, esdb.Backwards, from, uint64(count))
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return res, false, nil
		}
		if err != nil {
			return res, false, err
		}
		for i := range page {
			if want[page[i].ID] {
				hits++
			}
			if page[i].ID == batch[0].ID {
				first = &page[i]
				break
			}
		}
		scanned += len(page)
		if len(page) < count || page[len(page)-1].Version == 0 || (hits == 0 && page[len(page)-1].Version <= floor) {
			break
		}
		from = esdb.Revision(page[len(page)-1].Version - 1)
	}
	conflict := func(format string, args ...any) error {
		return fmt.Errorf("kurrentdb: append to %q: %w: %s", stream, eventstore.ErrIdempotencyConflict, fmt.Sprintf(format, args...))
	}
	if first == nil {
		if hits > 0 {
			return res, false, conflict("%d of the batch's %d event ids are stored, but not its first", hits, len(batch))
		}
		return res, false, nil
	}
	got, err := s.readStream(ctx, name, esdb.Forwards, esdb.Revision(first.Version), uint64(len(batch)))
	if err != nil {
		return res, false, err
	}
	if err := sameBatch(got, batch); err != nil {
		return res, false, conflict("the batch's first event is stored at version %d, but %v", first.Version, err)
	}
	last := got[len(batch)-1]
	return eventstore.AppendResult{Version: last.Version, Position: last.Position}, true, nil
}

// AppendMulti implements eventstore.Store. One stream is Append. Several
// streams are one atomic AppendRecords call on a server that offers it
// (AtomicMultiStream, multi.go); elsewhere it returns an error matching
// ErrMultiStream (and errors.ErrUnsupported) and writes nothing: a
// non-atomic fallback would break the fencing callers build on it.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (eventstore.AppendResult, error) {
	if err := s.check(ctx); err != nil {
		return eventstore.AppendResult{}, err
	}
	if err := validate(appends); err != nil {
		return eventstore.AppendResult{}, err
	}
	if len(appends) == 1 {
		return s.Append(ctx, appends[0].Stream, appends[0].Expected, appends[0].Events...)
	}
	if s.multi != nil {
		return s.appendRecords(ctx, appends)
	}
	streams := make([]string, len(appends))
	for i := range appends {
		streams[i] = appends[i].Stream
	}
	return eventstore.AppendResult{}, fmt.Errorf("append to %s: %w", strings.Join(streams, ", "), ErrMultiStream)
}

// validate checks an append against the contract's limits and what KurrentDB
// reserves: stream names and event types starting with "$".
func validate(appends []eventstore.StreamAppend) error {
	if err := eventstore.ValidateAppends(appends); err != nil {
		return err
	}
	seen := make(map[uuid.UUID]struct{})
	for i := range appends {
		a := &appends[i]
		if strings.HasPrefix(a.Stream, "$") {
			return fmt.Errorf("%w: %q starts with '$', which KurrentDB reserves for system streams", eventstore.ErrInvalidStream, a.Stream)
		}
		for j := range a.Events {
			e := &a.Events[j]
			if strings.HasPrefix(e.Type, "$") {
				return fmt.Errorf("%w: event %s has type %q; KurrentDB reserves types starting with '$'", eventstore.ErrInvalidEvent, e.ID, e.Type)
			}
			if _, dup := seen[e.ID]; dup {
				return fmt.Errorf("%w: event id %s twice in one append", eventstore.ErrInvalidEvent, e.ID)
			}
			seen[e.ID] = struct{}{}
		}
	}
	return nil
}

// ReadStream implements eventstore.Store. A limit of zero or less reads
// nothing (but a missing stream is still ErrStreamNotFound). A deleted stream
// reads as not found.
func (s *Store) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	ctx = s.forRead(ctx)

	if err := eventstore.ValidateStream(stream); err != nil {
		return nil, err
	}
	if strings.HasPrefix(stream, "$") {
		return nil, fmt.Errorf("read %q: %w", stream, eventstore.ErrStreamNotFound)
	}
	count := uint64(max(limit, 1)) // one, to learn whether the stream exists
	evs, err := s.readStream(ctx, s.ns+stream, esdb.Forwards, esdb.Revision(from), count)
	if err != nil {
		return nil, err
	}
	if limit <= 0 || evs == nil {
		return []domain.Envelope{}, nil
	}
	return evs, nil
}

// readStream reads up to count events of the stream named name (namespace
// included) and converts them.
func (s *Store) readStream(ctx context.Context, name string, dir esdb.Direction, from esdb.StreamPosition, count uint64) ([]domain.Envelope, error) {
	op := fmt.Sprintf("read %q", strings.TrimPrefix(name, s.ns))
	c := s.conn()
	var out []domain.Envelope
	_, err := read(ctx, s.runner(c), func() (*esdb.ReadStream, error) {
		return c.ReadStream(ctx, name, esdb.ReadStreamOptions{Direction: dir, From: from}, count)
	}, func(rec *esdb.RecordedEvent) (bool, error) {
		e, err := fromRecorded(rec, s.ns)
		if err != nil {
			return true, fmt.Errorf("kurrentdb: %s: %w", op, err)
		}
		out = append(out, e)
		return false, nil
	})
	if err != nil {
		if errors.Is(err, errTransaction) {
			return nil, err
		}
		return nil, s.fail(ctx, c, op, err)
	}
	return out, nil
}

// ReadAll implements eventstore.Store: up to limit events of the store's
// streams, from position from (inclusive). It reads $all and drops system
// events and other namespaces' events on the client, so its cost grows with
// those too. A limit of zero or less reads nothing.
func (s *Store) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	ctx = s.forRead(ctx)

	out := []domain.Envelope{}
	if limit <= 0 {
		return out, nil
	}
	from = max(from, s.origin)
	c := s.conn()
	for len(out) < limit {
		count := min(max(limit-len(out), 64), 4096)
		var last uint64 // commit position of the last event the server sent
		n, err := read(ctx, s.runner(c), func() (*esdb.ReadStream, error) {
			return c.ReadAll(ctx, esdb.ReadAllOptions{Direction: esdb.Forwards, From: readFrom(from)}, uint64(count))
		}, func(rec *esdb.RecordedEvent) (bool, error) {
			last = rec.Position.Commit
			if !visible(s.ns, rec.StreamID, rec.EventType) {
				return false, nil
			}
			e, err := fromRecorded(rec, s.ns)
			if err != nil {
				return true, fmt.Errorf("kurrentdb: read $all: %w", err)
			}
			if e.Position >= from { // the read starts at the event from names, or the one before
				out = append(out, e)
			}
			return len(out) == limit, nil
		})
		switch {
		case errors.Is(err, errTransaction):
			return nil, err
		case err != nil:
			if err := s.readAllFailed(ctx, c, from, err); err != nil {
				return nil, err
			}
			return out, nil
		case n < count:
			return out, nil // the end of $all
		case last > maxCommit:
			return nil, fmt.Errorf("kurrentdb: commit position %d out of range", last)
		}
		// The next page starts at the last event read, which the position
		// filter drops.
		from = max(from, after(last<<1))
	}
	return out, nil
}

// readAllFailed translates a failed $all read. A server may refuse to read
// from a position past the end of its log; that is an empty read.
func (s *Store) readAllFailed(ctx context.Context, c *conn, from uint64, err error) error {
	if s.closed() || ctx.Err() != nil || clientGone(err) {
		return s.fail(ctx, c, "read $all", err)
	}
	if end, eerr := s.logEnd(ctx, c); eerr == nil && from >= end {
		return nil
	}
	return s.fail(ctx, c, fmt.Sprintf("read $all from position %d", from), err)
}

// Head implements eventstore.Store: the position just after the store's last
// event, found by reading $all backwards past system events and other
// namespaces' events; 0 if the store has none.
func (s *Store) Head(ctx context.Context) (uint64, error) {
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	ctx = s.forRead(ctx)

	var from esdb.AllPosition = esdb.End{}
	oldest := esdb.Position{Commit: noCommit, Prepare: noCommit} // the oldest event seen
	c := s.conn()
	for {
		var head uint64
		found := false
		n, err := read(ctx, s.runner(c), func() (*esdb.ReadStream, error) {
			return c.ReadAll(ctx, esdb.ReadAllOptions{Direction: esdb.Backwards, From: from}, pageSize)
		}, func(rec *esdb.RecordedEvent) (bool, error) {
			if rec.Position.Commit > oldest.Commit || (rec.Position.Commit == oldest.Commit && rec.Position.Prepare >= oldest.Prepare) {
				return false, nil // seen on the previous page
			}
			oldest = rec.Position
			if rec.Position.Commit > maxCommit {
				return true, fmt.Errorf("kurrentdb: read $all backwards: commit position %d out of range", rec.Position.Commit)
			}
			if rec.Position.Commit<<1 < s.origin {
				found = true // nothing of the store's from here back
				return true, nil
			}
			// Only the store's events need a turnstile position: others
			// (system events, other namespaces', legacy transactions' among
			// them) are passed over.
			if !visible(s.ns, rec.StreamID, rec.EventType) {
				return false, nil
			}
			pos, err := positionOf(rec.Position)
			if err != nil {
				return true, fmt.Errorf("kurrentdb: read $all backwards: %w", err)
			}
			head, found = after(pos), true
			return true, nil
		})
		switch {
		case errors.Is(err, errTransaction):
			return 0, err
		case err != nil:
			return 0, s.fail(ctx, c, "read $all backwards", err)
		case found:
			return head, nil
		case n < pageSize || oldest.Commit == 0:
			return 0, nil
		}
		from = oldest
	}
}
