package postgres

// Tests of the PostgreSQL subscription trap: a position taken by a transaction
// that commits after a later position is visible. A reader that moved past the
// later position never sees the earlier one. The store serialises position
// assignment, so the trap cannot open; these tests hold transactions open
// around the store's own append code (stage) to show that it does not, and
// show that the checks would catch it with positions from a sequence.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/internal/pgtest"
)

// watcher subscribes to a whole log from position 0 and checks every
// delivery: positions 0, 1, 2, … with no gap, no duplicate, no disorder, and
// no event delivered at or past the first position of a transaction that
// holds positions and has not yet committed or rolled back, which is what a
// projection's checkpoint passing an in-flight transaction looks like.
type watcher struct {
	cancel context.CancelFunc
	done   chan struct{}
	err    error // Subscribe's

	mu       sync.Mutex
	events   []domain.Envelope
	ids      map[uuid.UUID]struct{}
	inflight map[string]uint64 // transaction -> first position it holds
	bad      error
}

func startWatcher(ctx context.Context, s *Store) *watcher {
	w := &watcher{
		done:     make(chan struct{}),
		ids:      make(map[uuid.UUID]struct{}),
		inflight: make(map[string]uint64),
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go func() {
		defer close(w.done)
		w.err = s.Subscribe(ctx, 0, eventstore.Filter{}, w.handle)
	}()
	return w
}

func (w *watcher) handle(batch []domain.Envelope) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range batch {
		if want := uint64(len(w.events)); e.Position != want && w.bad == nil {
			w.bad = fmt.Errorf("event at position %d delivered after %d events: a gap or disorder", e.Position, want)
		}
		if _, dup := w.ids[e.ID]; dup && w.bad == nil {
			w.bad = fmt.Errorf("event %s (position %d) delivered twice", e.ID, e.Position)
		}
		for tx, first := range w.inflight {
			if e.Position >= first && w.bad == nil {
				w.bad = fmt.Errorf("event at position %d delivered while transaction %s, holding positions from %d, is in flight: the checkpoint passed it", e.Position, tx, first)
			}
		}
		w.ids[e.ID] = struct{}{}
		w.events = append(w.events, e)
	}
	return nil
}

// hold records that tx holds positions from first on and has not ended.
func (w *watcher) hold(tx string, first uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inflight[tx] = first
}

// release is called just before tx's COMMIT or ROLLBACK is sent.
func (w *watcher) release(tx string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.inflight, tx)
}

func (w *watcher) state() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.events), w.bad
}

// waitFor waits until n events are delivered; it fails on a violation, or if
// none arrives for 10 seconds.
func (w *watcher) waitFor(t *testing.T, n int) {
	t.Helper()
	last, since := -1, time.Now()
	for {
		got, bad := w.state()
		switch {
		case bad != nil:
			t.Fatalf("subscription: %v", bad)
		case got >= n:
			return
		case got != last:
			last, since = got, time.Now()
		case time.Since(since) > 10*time.Second:
			t.Fatalf("subscription delivered %d of %d events and nothing more for 10s", got, n)
		}
		select {
		case <-w.done:
			t.Fatalf("subscription ended with %v after %d of %d events", w.err, got, n)
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// stop ends the subscription and returns what it delivered.
func (w *watcher) stop(t *testing.T) []domain.Envelope {
	t.Helper()
	w.cancel()
	<-w.done
	if !errors.Is(w.err, context.Canceled) {
		t.Fatalf("subscription ended with %v, want context.Canceled", w.err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.bad != nil {
		t.Fatalf("subscription: %v", w.bad)
	}
	return w.events
}

// rawTx is a transaction the test holds open on a connection of its own and
// appends to with the store's append code.
type rawTx struct {
	conn  *pgxpool.Conn
	ended bool
}

// beginRawT is beginRaw for the test's goroutine. If the test ends with the
// transaction open, its connection is closed, which rolls it back (and frees
// the schema for dropping).
func beginRawT(t *testing.T, ctx context.Context) *rawTx {
	t.Helper()
	x, err := beginRaw(ctx, sharedPool.Get(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !x.ended {
			x.conn.Release() // in a transaction: the pool closes the connection
		}
	})
	return x
}

func beginRaw(ctx context.Context, pool *pgxpool.Pool) (*rawTx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	// BEGIN, and take a transaction id now, so that transactions begun
	// earlier have lower ids.
	if _, err := conn.Exec(ctx, "BEGIN; SELECT pg_current_xact_id()"); err != nil {
		conn.Release()
		return nil, err
	}
	return &rawTx{conn: conn}, nil
}

// stage appends one request in the transaction and returns where its events
// are to land; it holds the log_head lock from then until end.
func (x *rawTx) stage(ctx context.Context, s *Store, appends ...eventstore.StreamAppend) (plan, error) {
	r, err := newRequest(appends)
	if err != nil {
		return plan{}, err
	}
	p, err := s.stage(ctx, x.conn.Conn(), []*request{r}, false, nil)
	if err == nil {
		err = p.outcomes[0].err
	}
	return p, err
}

func (x *rawTx) end(ctx context.Context, commit bool) error {
	x.ended = true
	defer x.conn.Release()
	sql := "ROLLBACK"
	if commit {
		sql = "COMMIT"
	}
	_, err := x.conn.Exec(ctx, sql)
	return err
}

// waitBlocked waits until the backend of x waits for a lock.
func (x *rawTx) waitBlocked(t *testing.T, ctx context.Context) {
	t.Helper()
	pid := x.conn.Conn().PgConn().PID()
	for start := time.Now(); time.Since(start) < 10*time.Second; {
		var waiting bool
		err := sharedPool.Get(t).QueryRow(ctx, "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("backend %d is not waiting for a lock after 10s", pid)
}

// TestTrapReverseCommitOrder: four transactions begin in order 1 to 4 and
// commit in the reverse order, 2 rolling back. Each appends with the store's
// own code and stays in flight a while, the next one waiting for the lock
// meanwhile. A live subscription must deliver every committed event, in
// order, never get past a transaction in flight, and the rolled-back
// positions are reused.
func TestTrapReverseCommitOrder(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{})
	ctx := pgtest.Context(t)
	w := startWatcher(ctx, s)
	defer w.cancel()

	txs := make([]*rawTx, 5) // 1..4
	events := make([][]domain.Envelope, 5)
	for i := 1; i <= 4; i++ {
		txs[i] = beginRawT(t, ctx)
		events[i] = storetest.NewEvents(fmt.Sprintf("test.tx%d", i), 1+i%3)
	}
	appendOf := func(i int) eventstore.StreamAppend {
		return eventstore.StreamAppend{Stream: fmt.Sprintf("execution-tx%d", i), Expected: eventstore.NoStream, Events: events[i]}
	}
	type staged struct {
		p   plan
		err error
	}
	next := make(chan staged, 1)
	gctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() }) // before the transactions' cleanups

	p, err := txs[4].stage(ctx, s, appendOf(4))
	if err != nil {
		t.Fatal(err)
	}
	var want []domain.Envelope
	firsts := map[int]uint64{}
	for i := 4; i >= 1; i-- {
		name := fmt.Sprintf("tx%d", i)
		firsts[i] = p.rows[0].Position
		w.hold(name, firsts[i])
		if i > 1 {
			wg.Go(func() {
				p, err := txs[i-1].stage(gctx, s, appendOf(i-1))
				next <- staged{p, err}
			})
			txs[i-1].waitBlocked(t, ctx)
		}
		time.Sleep(100 * time.Millisecond) // in flight: the subscription has every chance to move on
		if n, bad := w.state(); bad != nil || n != len(want) {
			t.Fatalf("while %s is in flight the subscription has %d events (want %d), violation: %v", name, n, len(want), bad)
		}
		if h, err := s.Head(ctx); err != nil || h != uint64(len(want)) {
			t.Fatalf("Head while %s is in flight = %d, %v; want %d", name, h, err, len(want))
		}
		w.release(name)
		commit := i != 2
		if err := txs[i].end(ctx, commit); err != nil {
			t.Fatal(err)
		}
		if commit {
			want = append(want, events[i]...)
		}
		w.waitFor(t, len(want))
		if i > 1 {
			st := <-next
			if st.err != nil {
				t.Fatalf("transaction %d: %v", i-1, st.err)
			}
			p = st.p
		}
	}
	if firsts[1] != firsts[2] {
		t.Errorf("transaction 1 got positions from %d, want %d (those of rolled-back transaction 2: positions are dense)", firsts[1], firsts[2])
	}

	got := w.stop(t)
	all, err := s.ReadAll(ctx, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) || len(all) != len(want) {
		t.Fatalf("delivered %d events, the log holds %d, want %d", len(got), len(all), len(want))
	}
	for i := range want {
		if got[i].ID != want[i].ID || all[i].ID != want[i].ID || got[i].Position != uint64(i) {
			t.Fatalf("event %d: delivered %s at %d, stored %s, want %s at %d", i, got[i].ID, got[i].Position, all[i].ID, want[i].ID, i)
		}
	}
}

// TestTrapCheckerCatchesSequencePositions shows that the checks above fail
// for the design they guard against: positions from a sequence, taken when a
// transaction writes, with the same begin and commit orders as above. The
// subscription then delivers transaction 4's events while 1 is in flight.
func TestTrapCheckerCatchesSequencePositions(t *testing.T) {
	t.Parallel()
	s := newStore(t, Options{PollInterval: 10 * time.Millisecond}) // no NOTIFY from these writers
	ctx := pgtest.Context(t)
	seq := s.opts.Schema + ".naive_position"
	if _, err := sharedPool.Get(t).Exec(ctx, "CREATE SEQUENCE "+seq+" MINVALUE 0 START 0"); err != nil {
		t.Fatal(err)
	}
	w := startWatcher(ctx, s)
	defer w.cancel()
	txs := make([]*rawTx, 5)
	for i := 1; i <= 4; i++ {
		txs[i] = beginRawT(t, ctx)
		var pos uint64
		err := txs[i].conn.QueryRow(ctx, `INSERT INTO `+s.opts.Schema+`.events (position, stream, version, id, type, schema_version, committed_at, owner, correlation_id, causation_id, writer, hash)
			VALUES (nextval($1), $2, 0, $3, 'test.naive', 1, now(), 'api', '', '', '', decode(repeat('00', 32), 'hex')) RETURNING position`,
			seq, fmt.Sprintf("execution-tx%d", i), uuid.New()).Scan(&pos)
		if err != nil {
			t.Fatal(err)
		}
		w.hold(fmt.Sprintf("tx%d", i), pos)
	}
	for _, i := range []int{4, 3, 2, 1} {
		w.release(fmt.Sprintf("tx%d", i))
		if err := txs[i].end(ctx, i != 2); err != nil {
			t.Fatal(err)
		}
		if i == 4 {
			deadline := time.Now().Add(10 * time.Second)
			for {
				if _, bad := w.state(); bad != nil {
					t.Logf("caught, as it should be: %v", bad)
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the subscription checks did not notice events delivered past transactions in flight")
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
}

// TestTrapManyWriters: 32 writers append 100,000 events (10,000 with -short)
// in transactions of 1 to 8 events. Half of them use raw transactions that
// sleep before appending and, often, while holding their positions, and roll
// back 1% of the time; the other half use Append on two other Stores on the
// same schema (other processes, as far as PostgreSQL can tell). A
// subscription on a fourth Store must deliver every committed event exactly
// once, in order, and never get past a transaction in flight.
func TestTrapManyWriters(t *testing.T) {
	t.Parallel()
	total := 100_000
	if testing.Short() {
		total = 10_000
	}
	const writers = 32
	schema := freshSchema(t)
	sub := newStore(t, Options{Schema: schema})
	stores := []*Store{newStore(t, Options{Schema: schema}), newStore(t, Options{Schema: schema})}
	ctx := pgtest.Context(t)
	pool := sharedPool.Get(t)
	w := startWatcher(ctx, sub)
	defer w.cancel()
	// A second subscription on a Store that writes too: it takes that
	// Store's own commits from memory and the rest from the database.
	w2 := startWatcher(ctx, stores[0])
	defer w2.cancel()

	type result struct {
		ids []uuid.UUID
		res eventstore.AppendResult
	}
	var (
		mu         sync.Mutex
		committed  []result
		rolledBack = map[uuid.UUID]bool{}
	)
	each := total / writers
	var wg sync.WaitGroup
	errs := make([]error, writers)
	for wr := range writers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(wr), 42))
			for done, k := 0, 0; done < each; k++ {
				n := min(1+rng.IntN(8), each-done)
				done += n
				evs := storetest.NewEvents("test.trap", n)
				a := eventstore.StreamAppend{Stream: fmt.Sprintf("execution-%d", rng.IntN(64)), Expected: eventstore.Any, Events: evs}
				ids := make([]uuid.UUID, n)
				for i := range evs {
					ids[i] = evs[i].ID
				}
				if wr%2 == 1 {
					res, err := stores[wr/2%2].AppendMulti(ctx, a)
					if err != nil {
						errs[wr] = err
						return
					}
					mu.Lock()
					committed = append(committed, result{ids, res})
					mu.Unlock()
					continue
				}
				x, err := beginRaw(ctx, pool)
				if err != nil {
					errs[wr] = err
					return
				}
				time.Sleep(time.Duration(rng.IntN(1000)) * time.Microsecond)
				p, err := x.stage(ctx, sub, a)
				if err != nil {
					_ = x.end(ctx, false)
					errs[wr] = err
					return
				}
				name := fmt.Sprintf("w%d-%d", wr, k)
				w.hold(name, p.rows[0].Position)
				w2.hold(name, p.rows[0].Position)
				if rng.IntN(5) == 0 {
					time.Sleep(time.Duration(rng.IntN(500)) * time.Microsecond)
				}
				commit := rng.IntN(100) != 0
				w.release(name)
				w2.release(name)
				if err := x.end(ctx, commit); err != nil {
					errs[wr] = err
					return
				}
				mu.Lock()
				if commit {
					committed = append(committed, result{ids, p.outcomes[0].res})
				} else {
					for _, id := range ids {
						rolledBack[id] = true
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range committed {
		n += len(c.ids)
	}
	w.waitFor(t, n)
	w2.waitFor(t, n)
	got := w.stop(t)
	if len(got) != n {
		t.Fatalf("delivered %d events, %d were committed", len(got), n)
	}
	got2 := w2.stop(t)
	if len(got2) != n {
		t.Fatalf("the writing store's subscription delivered %d events, %d were committed", len(got2), n)
	}
	if len(rolledBack) == 0 {
		t.Fatal("no transaction rolled back; the test did not test that")
	}
	byID := make(map[uuid.UUID]*domain.Envelope, len(got))
	for i := range got {
		byID[got[i].ID] = &got[i]
		if rolledBack[got[i].ID] {
			t.Fatalf("event %s of a rolled-back transaction was delivered", got[i].ID)
		}
	}
	for _, c := range committed {
		last := byID[c.ids[len(c.ids)-1]]
		if last == nil {
			t.Fatalf("committed event %s was never delivered", c.ids[len(c.ids)-1])
		}
		if last.Position != c.res.Position || last.Version != c.res.Version {
			t.Fatalf("append result %+v, but its last event was delivered at version %d position %d", c.res, last.Version, last.Position)
		}
		for i, id := range c.ids {
			e := byID[id]
			if e == nil || e.Position != c.res.Position-uint64(len(c.ids)-1-i) {
				t.Fatalf("event %d of an append ending at %d is not where it belongs: %+v", i, c.res.Position, e)
			}
		}
	}
	all := make([]domain.Envelope, 0, n)
	for uint64(len(all)) < uint64(n) {
		page, err := sub.ReadAll(ctx, uint64(len(all)), 5000)
		if err != nil || len(page) == 0 {
			t.Fatalf("ReadAll(%d): %d events, %v", len(all), len(page), err)
		}
		all = append(all, page...)
	}
	for i := range all {
		if all[i].ID != got[i].ID {
			t.Fatalf("position %d: the log holds %s, the subscription delivered %s", i, all[i].ID, got[i].ID)
		}
		if err := sameEnvelope(&all[i], &got2[i]); err != nil {
			t.Fatalf("position %d: the writing store's subscription: %v", i, err)
		}
	}
	t.Logf("%d events committed by %d writers, %d rolled back", n, writers, len(rolledBack))
}

// sameEnvelope reports how got differs from want, in any field.
func sameEnvelope(want, got *domain.Envelope) error {
	switch {
	case got.ID != want.ID || got.Position != want.Position || got.Stream != want.Stream || got.Version != want.Version:
		return fmt.Errorf("delivered %s at %d (%s@%d), stored %s at %d (%s@%d)", got.ID, got.Position, got.Stream, got.Version, want.ID, want.Position, want.Stream, want.Version)
	case !got.Time.Equal(want.Time) || got.Time.Location() != want.Time.Location():
		return fmt.Errorf("event %s: time %v, stored %v", want.ID, got.Time, want.Time)
	case got.Type != want.Type || got.SchemaVersion != want.SchemaVersion || got.Owner != want.Owner ||
		got.CorrelationID != want.CorrelationID || got.CausationID != want.CausationID || got.Writer != want.Writer:
		return fmt.Errorf("event %s: delivered %+v, stored %+v", want.ID, got, want)
	case !bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Metadata, want.Metadata):
		return fmt.Errorf("event %s: data %q / %q, stored %q / %q", want.ID, got.Data, got.Metadata, want.Data, want.Metadata)
	}
	return nil
}
