package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Request states: the committer takes a queued request, or its caller
// withdraws it when its context ends first.
const (
	queued int32 = iota
	taken
	withdrawn
)

// request is one Append or AppendMulti waiting for, or in, a group commit.
type request struct {
	appends []eventstore.StreamAppend
	events  int // number of events
	bytes   int // bytes of Data and Metadata
	state   atomic.Int32

	// Set by the committer before it closes done.
	res  eventstore.AppendResult
	err  error
	done chan struct{}
}

// Append implements eventstore.Store, by the rules of AppendMulti.
func (s *Store) Append(ctx context.Context, stream string, expected eventstore.ExpectedVersion, events ...domain.Envelope) (_ eventstore.AppendResult, err error) {
	defer markUnavailable(&err)
	return s.AppendMulti(ctx, eventstore.StreamAppend{Stream: stream, Expected: expected, Events: events})
}

// AtomicMultiStream implements eventstore.MultiStreamReporter: AppendMulti
// writes several streams all or nothing.
func (s *Store) AtomicMultiStream() bool { return true }

// AppendMulti implements eventstore.Store. The events are committed when it
// returns nil. An append waiting for its turn is withdrawn if ctx ends first;
// once its transaction has started it waits for the outcome (at most
// Options.CommitTimeout). If that transaction fails on the way (a broken
// connection, a timeout) the events may or may not be stored; re-appending
// the same event ids is the safe retry. A re-append is recognised only if
// every event also has the content it was stored with; one call naming an id
// twice is ErrInvalidEvent. Type, CorrelationID, CausationID and Writer must
// be valid UTF-8 without NUL bytes (PostgreSQL text), else ErrInvalidEvent.
func (s *Store) AppendMulti(ctx context.Context, appends ...eventstore.StreamAppend) (_ eventstore.AppendResult, err error) {
	defer markUnavailable(&err)
	if s.isClosed() {
		return eventstore.AppendResult{}, eventstore.ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return eventstore.AppendResult{}, err
	}
	r, err := newRequest(appends)
	if err != nil {
		return eventstore.AppendResult{}, err
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		return eventstore.AppendResult{}, eventstore.ErrClosed
	}
	s.queue = append(s.queue, r)
	s.mu.Unlock()
	s.poke()
	select {
	case <-r.done:
	case <-ctx.Done():
		if r.state.CompareAndSwap(queued, withdrawn) {
			return eventstore.AppendResult{}, ctx.Err()
		}
		<-r.done
	}
	return r.res, r.err
}

// newRequest checks an append and wraps it for the queue.
func newRequest(appends []eventstore.StreamAppend) (*request, error) {
	if err := eventstore.ValidateAppends(appends); err != nil {
		return nil, err
	}
	r := &request{appends: appends, done: make(chan struct{})}
	var ids map[uuid.UUID]struct{}
	if len(appends) > 1 || len(appends[0].Events) > 1 {
		ids = make(map[uuid.UUID]struct{})
	}
	for _, a := range appends {
		for i := range a.Events {
			e := &a.Events[i]
			if _, dup := ids[e.ID]; dup {
				return nil, fmt.Errorf("%w: event id %s twice in one append", eventstore.ErrInvalidEvent, e.ID)
			}
			if ids != nil {
				ids[e.ID] = struct{}{}
			}
			if !textOK(e.Type) || !textOK(e.CorrelationID) || !textOK(e.CausationID) || !textOK(e.Writer) {
				return nil, fmt.Errorf("%w: event %s: type, correlation, causation and writer must be UTF-8 without NUL bytes", eventstore.ErrInvalidEvent, e.ID)
			}
			r.bytes += len(e.Data) + len(e.Metadata)
		}
		r.events += len(a.Events)
	}
	return r, nil
}

// poke wakes the committer.
func (s *Store) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// commitLoop is one committer: it commits groups of queued appends until
// the store is closed and the queue is empty. The committers take turns
// (s.turn): the one holding the turn takes the next group and passes the
// turn on once that group holds the log_head lock, so that the next group
// is decided and sent while this one commits.
func (s *Store) commitLoop() {
	c := &committer{}
	defer c.close()
	for {
		<-s.turn
		group, ok := s.nextGroup()
		if !ok {
			s.turn <- struct{}{} // the other committer sees the close too
			return
		}
		s.commit(c, group)
	}
}

// nextGroup takes queued appends, in queue order, up to Options.MaxBatch
// events and MaxAppendBytes bytes (at least one append), waiting for one if
// the queue is empty. It returns false once the store is closed and nothing
// is queued.
func (s *Store) nextGroup() ([]*request, bool) {
	for {
		s.mu.Lock()
		var group []*request
		events, bytes, i := 0, 0, 0
		for ; i < len(s.queue); i++ {
			r := s.queue[i]
			if len(group) > 0 && (events+r.events > s.opts.MaxBatch || bytes+r.bytes > eventstore.MaxAppendBytes) {
				break
			}
			if r.state.CompareAndSwap(queued, taken) {
				group = append(group, r)
				events += r.events
				bytes += r.bytes
			}
		}
		n := copy(s.queue, s.queue[i:]) // what did not fit stays for the next group
		clear(s.queue[n:])
		s.queue = s.queue[:n]
		closing := s.closing
		s.mu.Unlock()
		switch {
		case len(group) > 0:
			return group, true
		case closing:
			return nil, false
		}
		select {
		case <-s.kick:
		case <-s.closed:
		}
	}
}

// commit runs one group, holding the committers' turn until the group holds
// the log_head lock, and answers its requests. It tries the one-round-trip
// commit first (fastCommit) and decides the group again the careful way
// (stage) when the heads it assumed were stale or a stored event id made the
// insert fail. If PostgreSQL's UNIQUE constraints refuse a group decided
// under the lock, another writer wrote the log without the log_head lock
// (the store's own writers never do): each request is run again alone, so
// that the others do not fail with it and its decision sees that writer's
// rows; a second refusal is final.
func (s *Store) commit(c *committer, group []*request) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CommitTimeout)
	defer cancel()
	released := false
	release := func() {
		if !released {
			released = true
			s.turn <- struct{}{}
		}
	}
	defer release()
	a := &attempt{s: s, release: release}
	n := 0
	for _, r := range group {
		n += r.events
	}
	if s.needPartitions(n) {
		_ = s.addPartitions(ctx, n) // should it fail, so does the insert, with the reason
	}
	p, tried, err := s.fastCommit(ctx, c, group, a.locked)
	if tried {
		s.groups.Add(1)
		a.end(p, err)
	}
	retry := true
	if pgErr, ok := uniqueViolation(err); ok && !idKey(pgErr.ConstraintName) {
		// The assumed heads were checked under the lock: the (stream,
		// version) taken is an outside writer's, as in a refused careful
		// attempt.
		retry = false
	}
	if isNoPartition(err) { // another Store went far ahead
		_ = s.addPartitions(ctx, n)
	}
	if !tried || errors.Is(err, errStale) || isUniqueViolation(err) || isNoPartition(err) {
		s.commitCareful(ctx, c, group, retry, a)
		return
	}
	s.answer(group, p, err)
}

// attempt is one group commit transaction's part in the feed: the group
// claims its positions once it holds the lock, and publishes its events
// once committed (or drops the claim).
type attempt struct {
	s       *Store
	release func() // passes the committers' turn on (idempotent)
	claim   uint64
}

// locked is called once the transaction holds the log_head lock and knows
// that its n events go to positions from first on (n 0: it failed before).
func (a *attempt) locked(first uint64, n int) {
	a.release()
	if n > 0 {
		a.claim = a.s.feed.claim(first)
	}
}

// end publishes what the transaction committed, or drops its claim.
func (a *attempt) end(p plan, err error) {
	switch {
	case err == nil && len(p.rows) > 0:
		a.s.feed.publish(a.claim, p.rows[0].Position, p.rows)
		a.s.parts.sawHead(p.next)
	case a.claim != 0:
		a.s.feed.unclaim(a.claim)
		a.s.wake.wake()
	}
	a.claim = 0
}

// commitCareful commits group the careful way (stage) on c; see commit.
func (s *Store) commitCareful(ctx context.Context, c *committer, group []*request, retry bool, a *attempt) {
	if !retry && len(group) > 1 {
		for _, r := range group {
			s.commitCareful(ctx, c, []*request{r}, false, a)
		}
		return
	}
	var p plan
	var err error
	for try := 0; ; try++ {
		p, err = s.commitGroup(ctx, c, group, a.locked)
		a.end(p, err)
		s.groups.Add(1)
		s.slow.Add(1)
		if !isNoPartition(err) || try == 2 {
			break
		}
		// Other writers went past the partitions made for this group.
		n := 0
		for _, r := range group {
			n += r.events
		}
		if aerr := s.addPartitions(ctx, n); aerr != nil {
			err = aerr
			break
		}
	}
	if pgErr, ok := uniqueViolation(err); ok {
		if retry {
			for _, r := range group {
				s.commitCareful(ctx, c, []*request{r}, false, a)
			}
			return
		}
		err = s.conflict(ctx, group[0], pgErr)
	}
	s.answer(group, p, err)
}

// answer gives each request of group its outcome in p, or err.
func (s *Store) answer(group []*request, p plan, err error) {
	for i, r := range group {
		if err != nil {
			r.err = err
		} else {
			r.res, r.err = p.outcomes[i].res, p.outcomes[i].err
		}
		close(r.done)
	}
	if err == nil && len(p.rows) > 0 {
		s.wake.wake()
	}
}

// commitGroup runs one group the careful way in a transaction of its own on
// c's connection; see stage for locked.
func (s *Store) commitGroup(ctx context.Context, c *committer, group []*request, locked func(uint64, int)) (p plan, err error) {
	if err := s.connect(ctx, c); err != nil {
		locked(0, 0)
		return plan{}, fmt.Errorf("postgres: append: %w", err)
	}
	seq := s.heads.begin()
	defer func() { s.heads.done(seq, p.heads, p.rows, err == nil) }()
	p, err = s.stage(ctx, c.conn, group, true, locked)
	if err != nil {
		if c.conn.PgConn().IsClosed() || c.conn.PgConn().TxStatus() != 'I' {
			c.close()
			s.heads.forget()
		}
		return plan{}, fmt.Errorf("postgres: append: %w", err)
	}
	return p, nil
}

// stage appends a group in the transaction open on conn or, if own, in one
// it begins and commits itself. It takes the log_head lock, reads what the
// group's decisions need (the streams' last versions, the stored events with
// the group's ids), decides in Go, and inserts the events of the requests
// that pass, advances log_head and notifies listeners. That is two round
// trips: the first ends holding the lock, the second carries the inserts
// and, if own, the commit. If locked is not nil it is called once, between
// the two: with the group's first position and number of events to write,
// or with 0, 0 if the first failed.
func (s *Store) stage(ctx context.Context, conn *pgx.Conn, group []*request, own bool, locked func(first uint64, n int)) (plan, error) {
	var streams []string
	var ids [][16]byte
	seen := make(map[string]struct{})
	for _, r := range group {
		for _, a := range r.appends {
			if _, ok := seen[a.Stream]; !ok {
				seen[a.Stream] = struct{}{}
				streams = append(streams, a.Stream)
			}
			for i := range a.Events {
				ids = append(ids, a.Events[i].ID)
			}
		}
	}
	b := &pgx.Batch{}
	if own {
		b.Queue("BEGIN")
	}
	b.Queue(s.sql.lockHead)
	b.Queue(indexPlans)
	b.Queue(s.sql.streamHeads, streams)
	b.Queue(s.sql.storedByID, ids)
	b.Queue(seqScans)
	br := conn.SendBatch(ctx, b)
	next, heads, stored, err := readState(br, own)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if locked != nil {
			locked(0, 0)
		}
		return plan{}, err
	}

	p := decide(next, heads, stored, group)
	if locked != nil {
		locked(next, len(p.rows))
	}

	b = &pgx.Batch{}
	if len(p.rows) > 0 {
		b.Queue(s.sql.insert, insertArgs(p.rows)...)
		b.Queue(s.sql.setHead, int64(p.next))
		b.Queue(s.sql.notify, s.sql.channel, strconv.FormatUint(p.next, 10))
	}
	if own {
		b.Queue("COMMIT")
	}
	if b.Len() == 0 {
		return p, nil
	}
	br = conn.SendBatch(ctx, b)
	for i := range b.Len() {
		var tag pgconn.CommandTag
		if i == 0 && len(p.rows) > 0 { // the insert: the commit time and the hashes it wrote
			var ts time.Time
			var hashes [][]byte
			if err = br.QueryRow().Scan(&ts, &hashes); err != nil {
				break
			}
			for j := range p.rows {
				p.rows[j].Time = ts.UTC()
			}
			if err = setHashes(p.rows, hashes); err != nil {
				break
			}
			continue
		}
		if tag, err = br.Exec(); err != nil {
			break
		}
		if tag.String() == "ROLLBACK" { // COMMIT of a failed transaction
			err = pgx.ErrTxCommitRollback
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return p, err
}

// readState reads the answers to stage's first batch.
func readState(br pgx.BatchResults, own bool) (next uint64, heads map[string]int64, stored map[uuid.UUID]*domain.Envelope, err error) {
	if own {
		if _, err := br.Exec(); err != nil {
			return 0, nil, nil, err
		}
	}
	var n int64
	if err := br.QueryRow().Scan(&n); err != nil {
		return 0, nil, nil, fmt.Errorf("locking log_head: %w", err)
	}
	if _, err := br.Exec(); err != nil { // indexPlans
		return 0, nil, nil, err
	}
	heads, err = scanHeads(br.Query())
	if err != nil {
		return 0, nil, nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return 0, nil, nil, err
	}
	evs, err := collectEvents(rows)
	if err != nil {
		return 0, nil, nil, err
	}
	if _, err := br.Exec(); err != nil { // seqScans
		return 0, nil, nil, err
	}
	stored = make(map[uuid.UUID]*domain.Envelope, len(evs))
	for i := range evs {
		stored[evs[i].ID] = &evs[i]
	}
	return uint64(n), heads, stored, nil
}

// scanHeads reads the rows of the streamHeads query: stream, last version
// (NULL for a stream with no events, which is left out).
func scanHeads(rows pgx.Rows, err error) (map[string]int64, error) {
	if err != nil {
		return nil, err
	}
	heads := make(map[string]int64)
	for rows.Next() {
		var stream string
		var last *int64
		if err := rows.Scan(&stream, &last); err != nil {
			rows.Close()
			return nil, err
		}
		if last != nil {
			heads[stream] = *last
		}
	}
	return heads, rows.Err()
}

// insertArgs turns rows into the column arrays of the insert statement.
func insertArgs(rows []domain.Envelope) []any {
	n := len(rows)
	var (
		positions, versions, schemaVersions = make([]int64, n), make([]int64, n), make([]int64, n)
		streams, types, owners              = make([]string, n), make([]string, n), make([]string, n)
		correlations, causations, writers   = make([]string, n), make([]string, n), make([]string, n)
		ids                                 = make([][16]byte, n)
		data, metadata, tails               = make([][]byte, n), make([][]byte, n), make([][]byte, n)
	)
	for i := range rows {
		e := &rows[i]
		positions[i], streams[i], versions[i], ids[i] = int64(e.Position), e.Stream, int64(e.Version), e.ID
		types[i], schemaVersions[i], owners[i] = e.Type, int64(e.SchemaVersion), string(e.Owner)
		correlations[i], causations[i], writers[i] = e.CorrelationID, e.CausationID, e.Writer
		data[i], metadata[i], tails[i] = e.Data, e.Metadata, chainTail(e)
	}
	return []any{positions, streams, versions, ids, types, schemaVersions, owners, correlations, causations, writers, data, metadata, tails}
}
