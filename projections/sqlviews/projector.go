package sqlviews

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
)

// Errors of a projector; match them with errors.Is.
var (
	// ErrBusy: another projector holds these tables (CatchUpTo does not wait).
	ErrBusy = errors.New("another projector is writing these tables")
	// ErrFenced: the checkpoint row changed under the projector (another
	// projector wrote it, or Reset ran); nothing of the transaction was kept.
	ErrFenced = errors.New("the checkpoint changed under the projector")
	// ErrAhead: the checkpoint is past the log's head, so the tables were
	// folded from another log; Reset them.
	ErrAhead = errors.New("the checkpoint is past the log's head")
)

// lockKey is the first key of the advisory lock that makes one projector
// per (schema, name) the writer; the second is hashtext("schema.name").
const lockKey = 0x7476_6c6b // "tvlk"

// lockPoll is how often a standby projector tries for the lock, and how
// often the active one checks that the connection holding it is alive.
const lockPoll = time.Second

// readPage is the most events CatchUpTo reads at once.
const readPage = 4096

// Projector keeps the executions and queue_stats tables equal to the fold
// of the log (projections.Views, the same fold the API serves) up to the
// position in projection_checkpoints. Each transaction upserts the rows that
// changed since the last checkpoint, with their state at the new
// checkpoint, and moves the checkpoint, so the tables are always the fold of
// exactly the positions below it: a crash or a failed transaction loses or
// doubles nothing, and the next run goes on from the committed checkpoint.
//
// One projector per schema and name writes at a time (a PostgreSQL advisory
// lock; others wait as standbys), and every transaction also checks that
// the checkpoint row is as this projector last left it, so a projector that
// lost its lock without knowing fails instead of writing.
//
// A run first folds the log up to the checkpoint in memory (the rows do not
// hold the whole fold state: queues in FIFO order, wait windows), then
// follows the log from there.
type Projector struct {
	pool   *pgxpool.Pool
	store  eventstore.Store
	opts   Options
	sql    statements
	writer string // names this projector in projection_checkpoints.writer

	committed atomic.Uint64                     // the checkpoint this projector last read or committed
	active    atomic.Bool                       // holds the lock and writes
	resumed   atomic.Uint64                     // where the last run's fold started: its snapshot's position, or 0
	views     atomic.Pointer[projections.Views] // the last run's fold

	// beforeCommit (tests) runs in each transaction after its rows and
	// checkpoint are written, before the commit; an error rolls it back.
	beforeCommit func(ctx context.Context, next uint64) error
}

type statements struct {
	loadCheckpoint, saveCheckpoint string
	upsertExecs, upsertStats       string
	lockName                       string
}

func newStatements(schema, name string) statements {
	cp := pgx.Identifier{schema, "projection_checkpoints"}.Sanitize()
	return statements{
		loadCheckpoint: `SELECT next, writer FROM ` + cp + ` WHERE name = $1`,
		// The fence: insert the first checkpoint, or move it only from the
		// position and writer this projector read or wrote last.
		saveCheckpoint: `INSERT INTO ` + cp + ` AS c (name, next, writer, updated_at) VALUES ($1, $2, $3, now())
			ON CONFLICT (name) DO UPDATE SET next = EXCLUDED.next, writer = EXCLUDED.writer, updated_at = EXCLUDED.updated_at
			WHERE c.next = $4 AND c.writer = $5`,
		upsertExecs: upsertExecutions(schema),
		upsertStats: upsertStats(schema),
		lockName:    schema + "." + name,
	}
}

// New returns a projector that folds store into the tables in opts.Schema
// of the database pool connects to. It changes nothing; it fails with
// ErrSchemaNotReady if Migrate has not created the tables.
func New(ctx context.Context, pool *pgxpool.Pool, store eventstore.Store, opts Options) (*Projector, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if err := checkSchema(ctx, pool, opts.Schema); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return &Projector{pool: pool, store: store, opts: opts, sql: newStatements(opts.Schema, opts.Name),
		writer: fmt.Sprintf("%.60s/%d/%s", host, os.Getpid(), hex.EncodeToString(b))}, nil
}

// Resumed returns the position the last run's fold started from: that of
// the snapshot it loaded (Options.Snapshots), 0 if none.
func (p *Projector) Resumed() uint64 { return p.resumed.Load() }

// Evicted returns how many ended executions the last run's fold has
// forgotten (Options.RetainEnded); their rows stay in the tables.
func (p *Projector) Evicted() uint64 {
	if v := p.views.Load(); v != nil {
		return v.Evicted()
	}
	return 0
}

// snapshotName is the projector's snapshot in Options.Snapshots.
func (p *Projector) snapshotName() string { return "sqlviews-" + p.opts.Name }

// Committed returns the checkpoint this projector last read or committed
// (0 before it ran): the log positions below it are in the tables.
func (p *Projector) Committed() uint64 { return p.committed.Load() }

// Active reports whether this projector holds the lock and writes.
func (p *Projector) Active() bool { return p.active.Load() }

// Run keeps the tables up to date until ctx ends (it then returns nil) or
// something fails (the store, the database, the fence), which it returns
// (ErrFenced even when ctx ended meanwhile: a fence is never hidden);
// the caller may call Run again, which resumes from the committed
// checkpoint. While another projector writes the same tables, Run waits as
// a standby.
func (p *Projector) Run(ctx context.Context) error {
	err := p.run(ctx)
	if ctx.Err() != nil && !errors.Is(err, ErrFenced) {
		return nil
	}
	return err
}

func (p *Projector) run(ctx context.Context) error {
	lock, err := p.lock(ctx, true)
	if err != nil {
		return err
	}
	defer p.unlock(ctx, lock)
	s, err := p.begin(ctx)
	if err != nil {
		return err
	}
	p.opts.Logger.Info("sql views: projecting", "schema", p.opts.Schema, "name", p.opts.Name, "from", s.committed)

	fctx, stop := context.WithCancel(ctx)
	folded := make(chan error, 1)
	go func() {
		folded <- p.store.Subscribe(fctx, s.committed, eventstore.Filter{}, func(batch []domain.Envelope) error {
			// Back-pressure: at most MaxBatch events folded ahead of the tables.
			for len(batch) > 0 {
				ahead := s.views.Next() - p.committed.Load()
				if ahead >= uint64(p.opts.MaxBatch) {
					select {
					case <-s.written:
					case <-fctx.Done():
						return fctx.Err()
					}
					continue
				}
				n := min(uint64(len(batch)), uint64(p.opts.MaxBatch)-ahead)
				if err := s.fold(batch[:n]); err != nil {
					return err
				}
				batch = batch[n:]
				signal(s.applied)
			}
			return nil
		})
	}()
	defer func() {
		stop()
		<-folded
	}()
	tick := time.NewTicker(lockPoll)
	defer tick.Stop()
	for {
		if err := s.flush(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-s.applied:
		case err := <-folded:
			folded <- err // for the deferred receive
			if err == nil {
				err = errors.New("the subscription ended")
			}
			return fmt.Errorf("sqlviews: following the log: %w", err)
		case <-tick.C:
			// The lock's connection is alive, and the checkpoint is still
			// ours (Reset takes effect within a tick, even on a quiet log).
			var next int64
			var writer string
			if err := lock.QueryRow(ctx, p.sql.loadCheckpoint, p.opts.Name).Scan(&next, &writer); err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("sqlviews: the connection holding the projector lock: %w", err)
			} else if err == nil && (uint64(next) != s.committed || writer != s.cpWriter) {
				return fmt.Errorf("sqlviews: %s at %d by %s, not %d by %s: %w", p.sql.lockName, next, writer, s.committed, s.cpWriter, ErrFenced)
			}
		}
	}
}

// CatchUpTo brings the tables up to log position target (at least) and
// returns. It fails with ErrBusy if another projector holds the tables.
func (p *Projector) CatchUpTo(ctx context.Context, target uint64) error {
	lock, err := p.lock(ctx, false)
	if err != nil {
		return err
	}
	defer p.unlock(ctx, lock)
	s, err := p.begin(ctx)
	if err != nil {
		return err
	}
	for s.committed < target {
		next := s.views.Next()
		limit := min(readPage, uint64(p.opts.MaxBatch)-(next-s.committed), target-next)
		if limit > 0 {
			batch, err := p.store.ReadAll(ctx, next, int(limit))
			if err != nil {
				return fmt.Errorf("sqlviews: reading the log from %d: %w", next, err)
			}
			if len(batch) == 0 {
				return fmt.Errorf("sqlviews: catch up to %d: the log ends at %d", target, next)
			}
			if err := s.fold(batch); err != nil {
				return err
			}
		}
		if s.views.Next()-s.committed >= uint64(p.opts.MaxBatch) || s.views.Next() >= target {
			if err := s.flush(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// lock takes the advisory lock on a connection of its own, waiting as a
// standby if wait (else ErrBusy).
func (p *Projector) lock(ctx context.Context, wait bool) (*pgxpool.Conn, error) {
	standby := false
	for {
		conn, err := p.pool.Acquire(ctx)
		if err != nil {
			return nil, fmt.Errorf("sqlviews: lock: %w", err)
		}
		var got bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1, hashtext($2))", int32(lockKey), p.sql.lockName).Scan(&got); err != nil {
			conn.Release()
			return nil, fmt.Errorf("sqlviews: lock: %w", err)
		}
		if got {
			p.active.Store(true)
			return conn, nil
		}
		conn.Release()
		if !wait {
			return nil, fmt.Errorf("sqlviews: %s: %w", p.sql.lockName, ErrBusy)
		}
		if !standby {
			standby = true
			p.opts.Logger.Info("sql views: standby: another process projects", "schema", p.opts.Schema, "name", p.opts.Name)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(lockPoll):
		}
	}
}

func (p *Projector) unlock(ctx context.Context, conn *pgxpool.Conn) {
	p.active.Store(false)
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(uctx, "SELECT pg_advisory_unlock($1, hashtext($2))", int32(lockKey), p.sql.lockName); err != nil {
		_ = conn.Conn().Close(uctx) // the lock ends with the session; the pool drops a closed connection
	}
	conn.Release()
}

// session is one run's fold: the views at the checkpoint and beyond.
type session struct {
	p         *Projector
	views     *projections.Views
	mu        sync.Mutex       // one fold step or one flush read at a time
	pending   map[string]int64 // executions requested since the checkpoint: request positions
	committed uint64           // the checkpoint in the table
	snapAt    uint64           // the position of the last snapshot saved or loaded
	cpWriter  string           // its writer, as last read or written
	applied   chan struct{}    // 1-buffered: a batch was folded
	written   chan struct{}    // 1-buffered: a transaction committed
}

// begin reads the checkpoint and folds the log up to it.
func (p *Projector) begin(ctx context.Context) (*session, error) {
	s := &session{p: p, views: projections.NewViews(), pending: map[string]int64{},
		applied: make(chan struct{}, 1), written: make(chan struct{}, 1)}
	var next int64
	err := p.pool.QueryRow(ctx, p.sql.loadCheckpoint, p.opts.Name).Scan(&next, &s.cpWriter)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("sqlviews: reading the checkpoint: %w", err)
	}
	s.committed = uint64(next)
	head, err := p.store.Head(ctx)
	if err != nil {
		return nil, fmt.Errorf("sqlviews: reading the log's head: %w", err)
	}
	if s.committed > head {
		return nil, fmt.Errorf("sqlviews: checkpoint %d of %s, head %d: %w", s.committed, p.sql.lockName, head, ErrAhead)
	}
	if p.opts.Snapshots != nil && s.committed > 0 {
		v := projections.LoadViewsNamed(ctx, *p.opts.Snapshots, p.snapshotName(), p.store, p.opts.Logger)
		if v.Next() <= s.committed {
			s.views = v
		} else { // taken past the checkpoint (the tables were reset, or restored from a backup)
			p.opts.Logger.Warn("sql views: the projector's snapshot is past its checkpoint: folding the log from the beginning",
				"snapshot", v.Next(), "checkpoint", s.committed)
		}
	}
	s.snapAt = s.views.Next()
	p.resumed.Store(s.snapAt)
	if p.opts.RetainEnded > 0 {
		// What ends before the checkpoint is in the tables; what ends after
		// it is held until a flush has written it.
		s.views.Retain(p.opts.RetainEnded)
		s.views.HoldFrom(s.committed)
	}
	p.views.Store(s.views)
	if err := s.views.CatchUpTo(ctx, p.store, s.committed); err != nil {
		return nil, fmt.Errorf("sqlviews: folding the log up to the checkpoint %d: %w", s.committed, err)
	}
	if s.views.Next() != s.committed {
		return nil, fmt.Errorf("sqlviews: folding the log up to the checkpoint %d stopped at %d", s.committed, s.views.Next())
	}
	p.committed.Store(s.committed)
	return s, nil
}

// fold applies a batch of the log to the views.
func (s *session) fold(batch []domain.Envelope) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := s.views.Next()
	for i := range batch {
		e := &batch[i]
		if e.Position >= next && e.Version == 0 && e.Type == domain.TypeExecutionRequested {
			if cat, id := domain.SplitStream(e.Stream); cat == domain.StreamExecution {
				s.pending[id] = int64(e.Position)
			}
		}
	}
	if err := s.views.Apply(batch); err != nil {
		return fmt.Errorf("sqlviews: %w", err)
	}
	return nil
}

// flush writes every row that changed since the checkpoint, with its state
// at the views' position, and moves the checkpoint there: one transaction.
func (s *session) flush(ctx context.Context) error {
	p := s.p
	s.mu.Lock()
	next := s.views.Next()
	if next == s.committed {
		s.mu.Unlock()
		return nil
	}
	execs, _ := s.views.ExecutionsSince(s.committed, "", math.MaxInt)
	stats, _ := s.views.StatsSince(s.committed, "", math.MaxInt)
	pending := s.pending
	s.pending = map[string]int64{}
	var saveSnapshot func() error // the fold at exactly the checkpoint this flush commits
	if p.opts.Snapshots != nil && next-s.snapAt >= p.opts.SnapshotEvery {
		saveSnapshot = s.views.SnapshotFor(*p.opts.Snapshots, p.snapshotName())
	}
	s.mu.Unlock()

	var xr execRows
	for _, x := range execs {
		var reqPos *int64
		if pos, ok := pending[x.ID]; ok {
			reqPos = &pos
		}
		xr.add(x, reqPos)
	}
	var sr statsRows
	for _, st := range stats {
		sr.add(st)
	}
	batch := &pgx.Batch{}
	batch.Queue(p.sql.saveCheckpoint, p.opts.Name, int64(next), p.writer, int64(s.committed), s.cpWriter)
	if xr.len() > 0 {
		batch.Queue(p.sql.upsertExecs, xr.args()...)
	}
	if sr.len() > 0 {
		batch.Queue(p.sql.upsertStats, sr.args()...)
	}
	err := pgx.BeginTxFunc(ctx, p.pool, pgx.TxOptions{}, func(tx pgx.Tx) error {
		br := tx.SendBatch(ctx, batch)
		tag, err := br.Exec()
		if err != nil {
			_ = br.Close()
			return fmt.Errorf("moving the checkpoint: %w", err)
		}
		if tag.RowsAffected() != 1 {
			_ = br.Close()
			return fmt.Errorf("%s from %d (writer %s): %w", p.sql.lockName, s.committed, s.cpWriter, ErrFenced)
		}
		for range batch.Len() - 1 {
			if _, err := br.Exec(); err != nil {
				_ = br.Close()
				return fmt.Errorf("writing rows: %w", err)
			}
		}
		if err := br.Close(); err != nil {
			return err
		}
		if p.beforeCommit != nil {
			return p.beforeCommit(ctx, next)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlviews: positions %d..%d (%d executions, %d queue_stats rows): %w", s.committed, next, xr.len(), sr.len(), err)
	}
	s.committed, s.cpWriter = next, p.writer
	p.committed.Store(next)
	if p.opts.RetainEnded > 0 {
		s.views.HoldFrom(next) // written: the retention may forget them now
	}
	signal(s.written)
	if saveSnapshot != nil {
		start := time.Now()
		if err := saveSnapshot(); err != nil {
			p.opts.Logger.Warn("sql views: cannot save the projector's snapshot", "err", err)
		} else {
			s.snapAt = next
			p.opts.Logger.Debug("sql views: saved the projector's snapshot", "position", next, "took", time.Since(start))
		}
	}
	return nil
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
