// Package lease elects the one active process among several that could do
// the same job (the executor): whoever holds the lease acts, the others
// stand by. On PostgreSQL the lease is a session-level advisory lock held on
// a connection of its own, so the server itself releases it when the
// holder's connection ends, which a crashed or killed process's does at
// once (its socket closes), and a partitioned one's after TCP keepalives
// give up. The holder checks its connection every CheckEvery and steps down
// as soon as a check fails, well before the server's keepalives release the
// lock to another process.
//
// A lease narrows the time two processes both act to (almost) never; it is
// not what keeps the log correct when they do: that is the expected-version
// fencing of every decision (services/executor).
package lease

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/internal/backoff"
)

// Held is a lease this process holds until Lost is closed or it calls
// Release.
type Held interface {
	// Lost is closed when the lease can no longer be vouched for (the
	// connection holding it failed a check); the holder must stop acting.
	Lost() <-chan struct{}
	// Release gives the lease up (at once, to the next waiter).
	Release()
}

// Postgres is a lease on a PostgreSQL session-level advisory lock.
type Postgres struct {
	// Conn is the connection configuration (pgx.ParseConfig). Acquire
	// copies it and sets TCP keepalives on both ends.
	Conn *pgx.ConnConfig
	// Name names the lease; processes contending for the same job use the
	// same name (for the executor: "turnstile executor <schema>").
	Name string
	// CheckEvery is how often the holder checks its connection. Default 1s.
	CheckEvery time.Duration
	Logger     *slog.Logger
}

// Key returns the 64-bit advisory lock key of name.
func Key(name string) int64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	return int64(h.Sum64())
}

// keepalive settings of the lease connection: the server drops a silent
// peer after idle + interval*count = 5 + 3*2 = 11 s, much later than the
// holder's own check (CheckEvery plus its timeout) finds a broken connection.
const (
	keepIdle     = 5 * time.Second
	keepInterval = 2 * time.Second
	keepCount    = 3
)

// Acquire waits until this process holds the lease, or ctx ends. The wait
// happens inside the server (pg_advisory_lock), so it returns the moment the
// previous holder's session ends. waiting, if not nil, is called once the
// request is queued and this process is known to be waiting (the lease is
// someone else's).
func (p *Postgres) Acquire(ctx context.Context, waiting func()) (Held, error) {
	if p.Conn == nil || p.Name == "" {
		return nil, errors.New("lease: Conn and Name are required")
	}
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	every := p.CheckEvery
	if every <= 0 {
		every = time.Second
	}
	cfg := p.Conn.Copy()
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = "turnstile lease: " + p.Name
	cfg.RuntimeParams["tcp_keepalives_idle"] = fmt.Sprint(int(keepIdle.Seconds()))
	cfg.RuntimeParams["tcp_keepalives_interval"] = fmt.Sprint(int(keepInterval.Seconds()))
	cfg.RuntimeParams["tcp_keepalives_count"] = fmt.Sprint(keepCount)
	d := &net.Dialer{KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepIdle, Interval: keepInterval, Count: keepCount}}
	cfg.DialFunc = d.DialContext
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("lease %s: connect: %w", p.Name, err)
	}
	closeConn := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}
	key := Key(p.Name)
	var got bool
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&got); err != nil {
		closeConn()
		return nil, fmt.Errorf("lease %s: %w", p.Name, err)
	}
	if !got {
		if waiting != nil {
			waiting()
		}
		// Blocks in the server until the holder's session ends or unlocks.
		// Ending ctx breaks the connection, which drops the request.
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", key); err != nil {
			closeConn()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("lease %s: %w", p.Name, err)
		}
	}
	h := &pgHeld{conn: conn, key: key, lost: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	go h.watch(every, log.With("lease", p.Name))
	return h, nil
}

type pgHeld struct {
	conn *pgx.Conn // used only by watch once Acquire returned
	key  int64
	lost chan struct{}
	stop chan struct{}
	done chan struct{}
}

func (h *pgHeld) Lost() <-chan struct{} { return h.lost }

// watch checks the connection every interval; a failed check closes lost
// and the connection. On Release it unlocks and closes the connection.
func (h *pgHeld) watch(every time.Duration, log *slog.Logger) {
	defer close(h.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, _ = h.conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", h.key)
			_ = h.conn.Close(ctx)
			cancel()
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := h.conn.Ping(ctx)
		cancel()
		if err != nil {
			log.Error("lease: the connection holding the lease failed a check; stepping down", "err", err)
			close(h.lost)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = h.conn.Close(ctx)
			cancel()
			<-h.stop
			return
		}
	}
}

// Release gives the lease up and waits until the unlock is sent. Calling it
// more than once is a mistake.
func (h *pgHeld) Release() {
	close(h.stop)
	<-h.done
}

// Lease is what Follow contends for (Postgres).
type Lease interface {
	Acquire(ctx context.Context, waiting func()) (Held, error)
}

// Follow contends for l until ctx ends: whenever it gains the lease it calls
// set(true), and when the lease is lost set(false), then it contends again.
// It logs each change, saying when this process took over from another
// holder after standing by. It returns once ctx has ended and the lease, if
// held, is released (set(false) first).
func Follow(ctx context.Context, l Lease, log *slog.Logger, set func(active bool)) {
	pause := backoff.Backoff{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: backoff.Equal}
	for ctx.Err() == nil {
		var standbySince time.Time
		h, err := l.Acquire(ctx, func() {
			standbySince = time.Now()
			log.Info("lease: another process is active; standing by (folding the log) until it goes")
		})
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait := pause.Next()
			log.Warn("lease: cannot contend for the lease; retrying", "err", err, "retry_in", wait)
			if !backoff.Sleep(ctx, wait) {
				return
			}
			continue
		}
		pause.Reset()
		set(true)
		if standbySince.IsZero() {
			log.Info("lease: acquired; this process is active")
		} else {
			log.Warn("lease: TAKEOVER: the active process went away; this standby is now active",
				"stood_by", time.Since(standbySince).Round(time.Millisecond))
		}
		select {
		case <-ctx.Done():
			set(false)
			h.Release()
			log.Info("lease: released")
			return
		case <-h.Lost():
			set(false)
			h.Release()
			log.Error("lease: lost; this process stopped acting and contends again")
		}
	}
}
