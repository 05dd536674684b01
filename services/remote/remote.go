// Package remote serves workers that reach turnstile over HTTP (API.md,
// "Workers over HTTP"). A worker registers a name, the runners it serves and
// its slots; that starts an incarnation in the log (worker.registered) and a
// session, a random secret kept here only as its SHA-256. The service then
// writes that incarnation's events on its behalf, with the fences an
// in-process worker's writes carry (services/worker): each execution event
// at the execution's expected version, only while the handoff it acts under
// is the incarnation's (domain.Execution.Holds), and, on a store with atomic
// multi-stream appends, on condition that the worker stream is at the
// version that shows the incarnation alive (without them, each run's first
// write follows a heartbeat of the incarnation appended at the worker
// stream's version: serialfence.go). A session can therefore write
// only for executions handed to its own incarnation, and only while that
// incarnation lives; a lost, replaced or stopped incarnation's session is
// refused (ErrEnded).
//
// Assignments reach a session from the log: the service follows it from its
// head as it is at Start and keeps, per incarnation, the handoffs addressed
// to it that have not ended, the cancel requests for them and the take-backs.
// A run that has not ended within its action's timeout plus DeadlineGrace
// after its start is ended timed_out on its worker's behalf, with the same
// fences (deadline.go), and the worker is told to stop it.
//
// Sessions live in this process's memory: after a restart of the server a
// worker registers again (a new incarnation; the executor takes back what
// the old one held, as for any replaced incarnation).
package remote

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/services/repository"
)

// Errors of the session checks. The API answers ErrNoSession and ErrEnded
// with 401, ErrOtherName with 403.
var (
	ErrNoSession = errors.New("no such worker session")
	ErrEnded     = errors.New("the session's worker incarnation has ended (lost, drained or replaced): register again")
	ErrOtherName = errors.New("the session belongs to another worker name")
)

// Config configures a Service.
type Config struct {
	Store eventstore.Store
	// Lease is the executor's worker lease: an incarnation that owes the log
	// a sign of life (it holds executions, or was handed one since its last
	// event: domain.Worker.Owe) and writes none for that long is declared
	// lost. Polls and heartbeats pay the debt: the one that arrives once it
	// is Lease/5 old writes a worker.heartbeat. An idle session writes
	// nothing (until IdleTimeout ends a silent one). Default 15s.
	Lease time.Duration
	// MaxNames bounds the worker names one principal (Registration.By)
	// holds live sessions for in this process: a registration of another
	// name beyond it is refused (ErrTooManyNames); registering a name it
	// holds again replaces that incarnation and is not refused. Default
	// DefaultMaxNames; negative: no bound.
	MaxNames int
	// IdleTimeout ends a session that holds no execution and has made no
	// request for this long: its incarnation is recorded stopped
	// (worker.stopped) and its worker must register again. A poll waits at
	// most half of it, so a worker that polls is never idle that long.
	// Default DefaultIdleTimeout.
	IdleTimeout time.Duration
	// MaxResultBytes bounds the result a report may carry: a larger one
	// is refused (domain.ErrResultTooLarge) and nothing is written.
	// Default domain.DefaultMaxResultBytes; at most
	// domain.MaxResultBytesLimit.
	MaxResultBytes int
	Logger         *slog.Logger
}

// Defaults of Config.
const (
	DefaultMaxNames    = 1000
	DefaultIdleTimeout = 5 * time.Minute
)

// ErrTooManyNames refuses a registration that would give its principal
// more live worker names than Config.MaxNames.
var ErrTooManyNames = errors.New("too many live worker names for this token")

// Service is the server side of the worker protocol. Start it before use.
type Service struct {
	cfg    Config
	log    *slog.Logger
	fenced bool

	mu     sync.Mutex
	byHash map[[32]byte]*session
	byInc  map[string]*session // incarnation → its session
	byExec map[string]*session // execution id → the session it is assigned to
	due    deadlines           // the started runs, by deadline (deadline.go)

	run *startstop.Func
}

// session is one incarnation's session. Its fields are guarded by
// Service.mu, but for wmu, which serialises its writes to the worker stream.
type session struct {
	hash    [32]byte
	name    string
	by      string // the principal that registered it
	inc     string
	slots   int
	runners []string

	ended     bool
	draining  bool
	state     *domain.Worker // the worker stream as this session last saw it
	owedSince time.Time      // when (this clock) the incarnation began to owe the log a sign of life; zero: it owes none
	handedAt  time.Time      // when (this clock) the follower last saw a handoff to it
	lastCall  time.Time      // when (this clock) its worker last made a request

	assigned map[string]*assignment // by execution id
	cancels  map[string]struct{}    // executions whose runs must stop, not yet told
	wake     chan struct{}          // closed (and replaced) when something new is there

	wmu sync.Mutex
}

type assignment struct {
	Assignment
	position  uint64
	delivered bool              // a poll has returned it
	reported  bool              // a report on it was accepted
	started   time.Time         // when a start poll recorded it running (pollstart.go); zero: not so
	fenced    bool              // a serial fence's heartbeat follows its handoff (serialfence.go): its run may write without another
	x         *domain.Execution // the execution as this session last wrote it (from the handoff on), lent to one report at a time; nil: read the log

	// The run's deadline (deadline.go), from the start on.
	ss           *session
	runningSince time.Time // when (this clock) its running event was written or first seen written; zero: not started
	due          time.Time // runningSince + its timeout + DeadlineGrace
	dueAt        int       // its index in Service.due while it is there
	overdue      bool      // the service is ending it timed_out: its worker must stop it
}

// New checks cfg and returns a service; Start follows the log.
func New(cfg Config) (*Service, error) {
	if cfg.Store == nil {
		return nil, errors.New("remote: Store is required")
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 15 * time.Second
	}
	if cfg.MaxNames == 0 {
		cfg.MaxNames = DefaultMaxNames
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxResultBytes == 0 {
		cfg.MaxResultBytes = domain.DefaultMaxResultBytes
	}
	if cfg.MaxResultBytes < 0 || cfg.MaxResultBytes > domain.MaxResultBytesLimit {
		return nil, fmt.Errorf("remote: MaxResultBytes %d must be 1..%d", cfg.MaxResultBytes, domain.MaxResultBytesLimit)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Service{cfg: cfg, log: cfg.Logger.With("component", "remote-workers"), fenced: eventstore.AtomicMultiStream(cfg.Store),
		byHash: map[[32]byte]*session{}, byInc: map[string]*session{}, byExec: map[string]*session{}}
	s.run = startstop.NewFunc(s.follow)
	return s, nil
}

// Start follows the log from its head; Started is closed once it does.
func (s *Service) Start(ctx context.Context) error { return s.run.Start(ctx) }

// Started is closed once the service follows the log.
func (s *Service) Started() <-chan struct{} { return s.run.Started() }

// Stop stops following the log and ends every session.
func (s *Service) Stop() {
	s.run.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.byInc {
		s.endLocked(ss)
	}
}

// LeaseSeconds is the lease a worker must renew within (by polls or heartbeats).
func (s *Service) LeaseSeconds() float64 { return s.cfg.Lease.Seconds() }

// Session is an authenticated session: the name and incarnation it acts for.
type Session struct {
	s *session
}

// Name and Incarnation return what the session acts for.
func (x Session) Name() string        { return x.s.name }
func (x Session) Incarnation() string { return x.s.inc }

// Authenticate finds the session of secret and checks it is presented
// under name. The secret's hash is compared in constant time.
func (s *Service) Authenticate(name, secret string) (Session, error) {
	h := sha256.Sum256([]byte(secret))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.byHash[h]
	if ss == nil || subtle.ConstantTimeCompare(ss.hash[:], h[:]) != 1 {
		return Session{}, ErrNoSession
	}
	if ss.ended {
		return Session{}, ErrEnded
	}
	if subtle.ConstantTimeCompare([]byte(ss.name), []byte(name)) != 1 {
		return Session{}, ErrOtherName
	}
	ss.lastCall = time.Now()
	return Session{ss}, nil
}

// Register starts a new incarnation of worker name serving runners with
// slots, and returns its session; peer (the worker's address) is recorded
// in worker.registered after RemoteHost. A live incarnation of the same
// name registered over HTTP is replaced (the executor takes back what it
// held); one that was not (an in-process worker) is not: ErrNameTaken. A
// name beyond the bound of req.By's live names is refused: ErrTooManyNames.
func (s *Service) Register(ctx context.Context, req Registration, peer string) (Opened, error) {
	runners, err := checkRegister(req)
	if err != nil {
		return Opened{}, err
	}
	if err := s.checkNameFree(ctx, req.Name); err != nil {
		return Opened{}, err
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Opened{}, err
	}
	secret := "tsw_" + base64.RawURLEncoding.EncodeToString(raw[:])
	ss := &session{hash: sha256.Sum256([]byte(secret)), name: req.Name, by: req.By, inc: uuid.NewString(), slots: req.Slots, runners: runners,
		assigned: map[string]*assignment{}, cancels: map[string]struct{}{}, wake: make(chan struct{}), lastCall: time.Now()}
	// Known before worker.registered is in the log, so that no handoff to
	// the new incarnation can pass the follower unseen.
	s.mu.Lock()
	if err := s.roomLocked(req); err != nil {
		s.mu.Unlock()
		return Opened{}, err
	}
	s.byInc[ss.inc] = ss
	s.mu.Unlock()
	ss.wmu.Lock()
	st, err := repository.UpdateWorker(ctx, s.cfg.Store, req.Name, domain.OwnerWorker, req.Name, nil, func(w *domain.Worker) (domain.Event, error) {
		return w.Register(ss.inc, req.Slots, runners, RemoteHost+peer, 0)
	})
	ss.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		delete(s.byInc, ss.inc)
		return Opened{}, fmt.Errorf("register worker %s: %w", req.Name, err)
	}
	if ss.state == nil || ss.state.Version() < st.Version() {
		ss.state = st
	}
	if !ss.ended {
		s.byHash[ss.hash] = ss
	}
	for _, old := range s.byInc {
		if old.name == ss.name && old != ss {
			s.endLocked(old) // replaced by this registration (the follower would see it too)
		}
	}
	s.log.Info("remote worker registered", "worker", req.Name, "incarnation", ss.inc, "slots", req.Slots, "runners", runners)
	return Opened{Name: req.Name, Incarnation: ss.inc, Session: secret, LeaseSeconds: s.cfg.Lease.Seconds()}, nil
}

// roomLocked refuses req when its principal holds live sessions for
// MaxNames other names already.
func (s *Service) roomLocked(req Registration) error {
	if s.cfg.MaxNames < 0 {
		return nil
	}
	names := map[string]struct{}{}
	for _, ss := range s.byInc {
		if !ss.ended && ss.by == req.By && ss.name != req.Name {
			names[ss.name] = struct{}{}
		}
	}
	if len(names) >= s.cfg.MaxNames {
		return fmt.Errorf("%w: %q holds live sessions for %d worker names, the bound (a drained worker's, or one idle and silent for %s, ends)",
			ErrTooManyNames, clip(req.By), len(names), s.cfg.IdleTimeout)
	}
	return nil
}

// RemoteHost prefixes the host a remote registration records in
// worker.registered: a name whose live incarnation registered otherwise (an
// in-process worker, or turnstile worker --store) is not taken over.
const RemoteHost = "remote "

// ErrNameTaken refuses a registration under the name of a live worker that
// does not reach the server over HTTP.
var ErrNameTaken = errors.New("the name belongs to a live worker that is not a remote one")

// checkNameFree refuses name if its current incarnation is alive and was not
// registered over HTTP: a worker token must not take over an in-process
// worker (its executions would be taken back).
func (s *Service) checkNameFree(ctx context.Context, name string) error {
	var host, inc string
	st := domain.NewWorker(name)
	_, err := repository.Fold(ctx, s.cfg.Store, domain.WorkerStream(name), func(env *domain.Envelope, ev domain.Event) {
		if r, ok := ev.(domain.WorkerRegistered); ok {
			host, inc = r.Host, r.Incarnation
		}
		st.Apply(ev, env.Version, env.Time)
	})
	if err != nil {
		return err
	}
	alive := st.Status() == domain.WorkerActive || st.Status() == domain.WorkerDrainingStatus
	if alive && st.Incarnation() == inc && !strings.HasPrefix(host, RemoteHost) {
		return fmt.Errorf("%w: worker %s (incarnation %s on %s)", ErrNameTaken, name, inc, clip(host))
	}
	return nil
}

// checkRegister validates a registration; it returns the runners sorted,
// without duplicates.
func checkRegister(req Registration) ([]string, error) {
	switch {
	case len(req.Name) > domain.MaxIDLen || !workerName.MatchString(req.Name) || eventstore.ValidateStream(domain.WorkerStream(req.Name)) != nil:
		return nil, fmt.Errorf("%w: name %q must be 1..%d letters, digits, '_', '.' or '-', starting with a letter or a digit (pattern %s): "+
			"it is a path segment of /api/v1/workers/{name}/…", domain.ErrInvalidRequest, clip(req.Name), domain.MaxIDLen, workerName)
	case req.Slots < 1 || req.Slots > 100_000:
		return nil, fmt.Errorf("%w: slots %d must be 1..100000", domain.ErrInvalidRequest, req.Slots)
	case len(req.Runners) == 0 || len(req.Runners) > 1000:
		return nil, fmt.Errorf("%w: runners must name 1..1000 runners the worker serves", domain.ErrInvalidRequest)
	}
	for _, r := range req.Runners {
		if len(r) > domain.MaxRefLen || !runnerName.MatchString(r) {
			return nil, fmt.Errorf("%w: runner %q must be 1..%d letters, digits, '_', '.' or '-'", domain.ErrInvalidRequest, clip(r), domain.MaxRefLen)
		}
	}
	rs := slices.Clone(req.Runners)
	sort.Strings(rs)
	return slices.Compact(rs), nil
}

// runnerName is what an action's runner may be (domain.Policy's rule).
var runnerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

// workerName is what a remote worker's name may be: a host name fits, and
// it is one path segment of the session routes, never "." or "..".
var workerName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// endLocked ends ss: its session is refused from now on and its polls return.
func (s *Service) endLocked(ss *session) {
	if ss.ended {
		return
	}
	ss.ended = true
	delete(s.byHash, ss.hash)
	delete(s.byInc, ss.inc)
	for id, a := range ss.assigned {
		if s.byExec[id] == ss {
			delete(s.byExec, id)
		}
		s.forgetLocked(a)
	}
	ss.assigned = map[string]*assignment{}
	s.wakeLocked(ss)
}

func (s *Service) wakeLocked(ss *session) {
	close(ss.wake)
	ss.wake = make(chan struct{})
}

// Heartbeat renews the session's lease: one worker.heartbeat if the
// incarnation owes the log a sign of life since Lease/5 or longer, else
// nothing (the lease of a session that holds nothing and was handed
// nothing since its last event does not run).
func (s *Service) Heartbeat(ctx context.Context, x Session) error { return s.renew(ctx, x.s) }

// markAfter is how old a debt of a sign of life is when a poll or a
// heartbeat pays it: polls come at most Lease/2 apart, so a live worker
// pays within 0.7 of a lease of the handoff that started its debt.
func (s *Service) markAfter() time.Duration { return s.cfg.Lease / 5 }

func (s *Service) renew(ctx context.Context, ss *session) error {
	now := time.Now()
	s.mu.Lock()
	if ss.ended {
		s.mu.Unlock()
		return ErrEnded
	}
	due := !ss.owedSince.IsZero() && now.Sub(ss.owedSince) >= s.markAfter()
	s.mu.Unlock()
	if !due {
		return nil
	}
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	s.mu.Lock()
	known, inFlight := ss.state.Clone(), len(ss.assigned)
	s.mu.Unlock()
	st, err := repository.UpdateWorker(ctx, s.cfg.Store, ss.name, domain.OwnerWorker, ss.name, known, func(w *domain.Worker) (domain.Event, error) {
		return w.Heartbeat(ss.inc, inFlight)
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case errors.Is(err, domain.ErrWorkerReplaced), errors.Is(err, domain.ErrWorkerNotRegistered):
		s.endLocked(ss)
		return ErrEnded
	case err != nil:
		ss.state = nil
		return err
	}
	ss.state, ss.owedSince = st, time.Time{}
	if len(ss.assigned) > 0 || !ss.handedAt.Before(now) {
		ss.owedSince = now // it still holds work (or was handed some during the write): the debt runs on
	}
	return nil
}

// oweLocked records that the follower saw a handoff to ss at now.
func (ss *session) oweLocked(now time.Time) {
	ss.handedAt = now
	if ss.owedSince.IsZero() {
		ss.owedSince = now
	}
}

// Drain records that the incarnation takes nothing new (worker.draining);
// it ends (worker.stopped) once its in-flight executions have ended.
func (s *Service) Drain(ctx context.Context, x Session) error {
	ss := x.s
	ss.wmu.Lock()
	s.mu.Lock()
	known := ss.state.Clone()
	s.mu.Unlock()
	st, err := repository.UpdateWorker(ctx, s.cfg.Store, ss.name, domain.OwnerWorker, ss.name, known, func(w *domain.Worker) (domain.Event, error) {
		if w.Incarnation() == ss.inc && w.Status() == domain.WorkerDrainingStatus {
			return nil, nil // drained already
		}
		return w.Drain(ss.inc)
	})
	ss.wmu.Unlock()
	s.mu.Lock()
	if errors.Is(err, domain.ErrWorkerReplaced) || errors.Is(err, domain.ErrWorkerNotRegistered) {
		s.endLocked(ss)
		s.mu.Unlock()
		return ErrEnded
	}
	if err != nil {
		ss.state = nil
		s.mu.Unlock()
		return err
	}
	ss.state, ss.draining = st, true
	idle := len(ss.assigned) == 0
	s.wakeLocked(ss)
	s.mu.Unlock()
	if idle {
		return s.stop(ctx, ss)
	}
	return nil
}

// stop records worker.stopped for a drained incarnation with nothing in flight.
func (s *Service) stop(ctx context.Context, ss *session) error {
	ss.wmu.Lock()
	defer ss.wmu.Unlock()
	s.mu.Lock()
	known, ended := ss.state.Clone(), ss.ended
	s.mu.Unlock()
	if ended {
		return nil
	}
	_, err := repository.UpdateWorker(ctx, s.cfg.Store, ss.name, domain.OwnerWorker, ss.name, known, func(w *domain.Worker) (domain.Event, error) {
		return w.Stop(ss.inc)
	})
	if err != nil && !errors.Is(err, domain.ErrWorkerReplaced) {
		s.log.Warn("cannot record worker.stopped for a drained remote worker", "worker", ss.name, "incarnation", ss.inc, "err", err)
		return err
	}
	s.mu.Lock()
	s.endLocked(ss)
	s.mu.Unlock()
	s.log.Info("remote worker stopped", "worker", ss.name, "incarnation", ss.inc)
	return nil
}
