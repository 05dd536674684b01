// Package sim runs turnstile's control loop inside one deterministic,
// seeded simulation, the way FoundationDB and TigerBeetle test themselves:
// the real executor (services/executor), real workers (services/worker),
// the command side the API uses, the domain and an in-memory log, all in one
// goroutine. A scheduler seeded by Config.Seed picks each next step: a fold
// of the log by an executor, a decision cycle, one decision committed, a bus
// message delivered (or lost, or sent twice), a worker starting or ending a
// run, a heartbeat, a client's request, cancellation or policy change, the
// simulated clock moving on, and faults: executors and workers crashing and
// restarting (their state lost and rebuilt by folding the log), a second
// executor running at once, decisions of a crashed executor landing late,
// workers stalled past their lease or gone, the forwarder resuming from an
// old checkpoint, and the log's appends and reads failing (eventstore/faulty,
// including appends executed and then reported as timed out).
//
// After every step a checker folds the new events and checks the
// invariants: one terminal event per execution, the handoff rule
// (ownership) both as domain states it and as an oracle of the checker's
// own, written from DESIGN.md, states it (oracle.go: one wrong row of
// domain/rule.go cannot hide itself), FIFO grants, the concurrency limit
// and the pause at every position (by a queue model of the checker's own),
// no write for a lost incarnation, no lost verdict before the incarnation's
// debt of a sign of life is a lease old by log time (leases.go: an idle
// worker writes nothing and is never lost), and the read model's queue_stats equal
// to the checker's own fold. TestSeedCorpus replays the seeds that have
// ever failed (testdata/seeds) on every run. At the end the faults stop
// and the simulation runs on until every execution has ended (liveness);
// the audit must pass and a rebuild of the read model must equal the live one.
//
// The same Config gives the same log, byte for byte: nothing reads the
// machine's clock, randomness or map order.
//
// Config.SplitBrain lets two executors decide at once now and then: one may
// hand an execution to a worker in the same instant as the other declares
// that worker lost without seeing the handoff, so the handoff names a lost
// incarnation. Grants, FIFO order and the limit are fenced by the queue
// stream; the lost incarnation's writes by its own worker stream (a worker's
// writes carry a condition on it), so it cannot start that run. On a log
// without atomic multi-stream appends the worker writes a heartbeat of its
// own at its stream's version before a run's first write instead
// (services/worker/serialfence.go), which the verdict and the run cannot
// both pass.
package sim

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/faulty"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/executor"
	"github.com/turnstile/turnstile/services/runner"
	"github.com/turnstile/turnstile/services/worker"
)

// Timing of the simulated system.
const (
	workerLease      = 15 * time.Second
	heartbeatEvery   = 2 * time.Second
	runTimeout       = 30 * time.Second
	scheduledTimeout = 10 * time.Second
	healLimit        = 200_000 // steps after the faults stop before liveness is declared broken
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

type world struct {
	cfg Config
	ctx context.Context
	rng *rand.Rand
	now time.Time
	res *Result

	mem     *memstore.Store
	store   *faulty.Store
	writeTo eventstore.Store // what executors, workers and commands write to: store, or store without atomic multi-stream appends
	cmds    *command.Service
	runrs   *runner.Registry
	log     *slog.Logger

	execs    []*simExec
	started  []*executor.Executor // every executor ever started
	zombies  []zombie
	execSeq  int
	execDown time.Time // when a crashed executor restarts (no executor: it restarts then)

	workers []*simWorker
	incSeq  int

	fwdPos, fwdCheckpoint uint64

	views     *projections.Views
	checker   *checker
	statsSeen uint64 // position at which queue_stats were last compared

	reqSeq  int
	retries []command.Request // requests whose outcome is unknown: the client sends them again
	known   []string          // execution ids the client knows
	refs    []string

	healing bool
	step    int

	archived []domain.Envelope // Config.Archive: the events trimmed from the live log, in order
	sent     []command.Request // with Config.Archive: requests that created their execution (resend)
}

type simExec struct {
	e       *executor.Executor
	name    string
	head    uint64 // the log's head at start: not ready before the fold reaches it
	started bool
	ready   bool
	pending []executor.Decision
}

type zombie struct {
	e *executor.Executor
	d executor.Decision
}

type simWorker struct {
	id        string
	w         *worker.Worker // nil while down
	skew      time.Duration
	inbox     []domain.Envelope
	runs      []*simRun
	nextBeat  time.Time // the worker's own clock
	stalled   time.Time // no step before this (log time)
	restartAt time.Time
	slots     int
	runrs     *runner.Registry // the runners it serves: the world's, or its own (MixedRunners)
}

// simRunners are the runner names of Config.MixedRunners.
var simRunners = []string{"core.noop", "sim.a", "sim.b"}

// mixedRegistry returns a registry of the given runners, each returning {}
// (the simulation decides a run's outcome itself).
func mixedRegistry(names []string) *runner.Registry {
	reg := runner.NewRegistry()
	for _, n := range names {
		if err := reg.Register(n, runner.Func(func(context.Context, json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{}`), nil })); err != nil {
			panic(err)
		}
	}
	return reg
}

type simRun struct {
	r       *worker.Run
	begun   bool
	start   time.Time     // the worker's own clock
	work    time.Duration // how long the work takes
	fail    bool
	result  json.RawMessage
	runErr  error
	settled bool // the outcome is decided: End is (re)tried
}

// Run runs one simulation. A broken invariant is returned as a *Failure.
func Run(cfg Config) (*Result, error) {
	if cfg.Steps <= 0 {
		cfg.Steps = 2000
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 3
	}
	if cfg.Actions <= 0 {
		cfg.Actions = 3
	}
	rates := faulty.DefaultRates
	if cfg.Faults != nil {
		rates = *cfg.Faults
	}
	w := &world{cfg: cfg, ctx: context.Background(), rng: rand.New(rand.NewPCG(cfg.Seed, 0x5eed)), now: t0,
		res: &Result{Seed: cfg.Seed}, log: slog.New(slog.DiscardHandler), views: projections.NewViews(), checker: newChecker()}
	w.mem = memstore.New(memstore.Options{Clock: func() time.Time { return w.now }})
	var inner eventstore.Store = w.mem
	if cfg.Bug != NoBug {
		inner = &buggy{Store: w.mem, bug: cfg.Bug}
	}
	var err error
	if w.store, err = faulty.New(inner, rates, cfg.Seed^0xfa17); err != nil {
		return nil, err
	}
	w.writeTo = w.store
	if cfg.SingleStream {
		w.writeTo = storetest.SingleStream(w.store)
	}
	if cfg.Archive {
		w.writeTo = liveLog{Store: w.writeTo, mem: w.mem}
	}
	w.cmds = &command.Service{Store: w.writeTo, Writer: "api", NewID: w.newID, Now: func() time.Time { return w.now }}
	if cfg.Archive { // keys are looked up in the archive too
		w.cmds.History = simHistory{Store: w.writeTo, w: w}
	}
	w.runrs = runner.Builtins(runner.Config{})
	for i := range cfg.Workers {
		sw := &simWorker{id: fmt.Sprintf("w%d", i+1), slots: 1 + w.rng.IntN(3), runrs: w.runrs}
		if cfg.MixedRunners {
			names := simRunners
			if i > 0 {
				names = nil
				for len(names) == 0 {
					for _, n := range simRunners {
						if w.rng.IntN(2) == 0 {
							names = append(names, n)
						}
					}
				}
			}
			sw.runrs = mixedRegistry(names)
		}
		if len(cfg.WorkerSkew) > 0 {
			sw.skew = cfg.WorkerSkew[i%len(cfg.WorkerSkew)]
		}
		w.workers = append(w.workers, sw)
	}
	if err := w.setup(); err != nil {
		return nil, w.fail(err)
	}
	for w.step = 1; w.step <= cfg.Steps; w.step++ {
		if err := w.once(); err != nil {
			return w.res, w.fail(err)
		}
	}
	if err := w.heal(); err != nil {
		return w.res, w.fail(err)
	}
	if err := w.finish(); err != nil {
		return w.res, w.fail(err)
	}
	return w.res, nil
}

func (w *world) fail(err error) error {
	return &Failure{Seed: w.cfg.Seed, Steps: w.cfg.Steps, Step: w.step, Err: err, SingleStream: w.cfg.SingleStream, SplitBrain: w.cfg.SplitBrain, MixedRunners: w.cfg.MixedRunners, Archive: w.cfg.Archive}
}

// newID draws a UUID (version 4 layout) from the simulation's generator.
func (w *world) newID() uuid.UUID {
	var u uuid.UUID
	for i := 0; i < 16; i += 8 {
		v := w.rng.Uint64()
		for j := range 8 {
			u[i+j] = byte(v >> (8 * j))
		}
	}
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	return u
}

func (w *world) chance(p float64) bool { return w.rng.Float64() < p }

func (w *world) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(w.rng.Int64N(int64(hi-lo)+1))
}

func (w *world) tracef(format string, args ...any) {
	if w.cfg.Trace != nil {
		fmt.Fprintf(w.cfg.Trace, "%6d %10.3fs ", w.step, w.now.Sub(t0).Seconds())
		fmt.Fprintf(w.cfg.Trace, format, args...)
		fmt.Fprintln(w.cfg.Trace)
	}
}

// setup defines the actions (with the faults off: the test starts from a
// defined system) and starts the first executor.
func (w *world) setup() error {
	w.store.SetEnabled(false)
	defer w.store.SetEnabled(true)
	for i := range w.cfg.Actions {
		p := domain.Policy{Ref: fmt.Sprintf("a%d", i), Runner: "core.noop", MaxConcurrent: 1 + w.rng.IntN(3),
			TimeoutSeconds: runTimeout.Seconds(), ScheduledTimeoutSeconds: scheduledTimeout.Seconds(), MaxAttempts: 2 + w.rng.IntN(2)}
		if w.cfg.MixedRunners {
			p.Runner = simRunners[w.rng.IntN(len(simRunners))]
		}
		if i%3 != 2 { // failed runs are retried (with a key too)
			p.Retry = &domain.RetryPolicy{MaxAttempts: 2 + w.rng.IntN(2), BackoffSeconds: float64(1 + w.rng.IntN(3)),
				BackoffMultiplier: 2, MaxBackoffSeconds: 8}
		}
		switch i % 3 {
		case 1:
			p.ConcurrencyKey = "customer"
			if i%6 == 1 { // a total limit over the key values, served in turn
				p.MaxConcurrentTotal = 2
			}
		case 2:
			p.QueueTimeoutSeconds = 120
			p.RateLimit = &domain.RateLimit{Count: 3, PerSeconds: 5}
		}
		if _, err := w.cmds.DefineAction(w.ctx, p); err != nil {
			return err
		}
		w.refs = append(w.refs, p.Ref)
	}
	if err := w.defineSchedules(); err != nil {
		return err
	}
	w.startExecutor(false)
	for _, sw := range w.workers {
		sw.restartAt = w.now
	}
	return w.check()
}

// ---- the scheduler ----

type stepKind int

const (
	stepAdvance stepKind = iota
	stepRequest
	stepRetryRequest
	stepCancel
	stepPolicy
	stepExecStart
	stepExecFold
	stepExecDecide
	stepExecCommit
	stepExecCrash
	stepSplitBrain
	stepZombie
	stepForward
	stepForwarderCrash
	stepDeliver
	stepRun
	stepHeartbeat
	stepWorkerRestart
	stepWorkerCrash
	stepWorkerStall
	stepViews
	stepCheckpoint
	stepArchive
	stepResend // last: a zero weight leaves the other kinds' choices as they were
	numSteps
)

// weights returns each step kind's weight now (0: not possible).
func (w *world) weights(out *[numSteps]float64) {
	*out = [numSteps]float64{}
	f := 1.0
	if w.healing {
		f = 0
	}
	out[stepAdvance] = 6
	if w.checker.open < 30 {
		out[stepRequest] = 4 * f
	}
	if len(w.retries) > 0 {
		out[stepRetryRequest] = 4
	}
	if len(w.known) > 0 {
		out[stepCancel] = 0.5 * f
	}
	out[stepPolicy] = 0.4 * f
	if len(w.execs) == 0 && !w.now.Before(w.execDown) {
		out[stepExecStart] = 5
	}
	for _, x := range w.execs {
		switch {
		case len(x.pending) > 0:
			out[stepExecCommit] = 15
			// As Start's loop does: fold and decide again while earlier
			// decisions are still being appended.
			if x.ready && x.e.Position() < w.checker.next {
				out[stepExecFold] = 4
			}
			if x.ready {
				out[stepExecDecide] = 2
			}
		case !x.started || x.e.Position() < w.checker.next:
			out[stepExecFold] = 12
			if x.ready {
				out[stepExecDecide] = 3
			}
		case x.ready || x.e.Position() >= x.head:
			out[stepExecDecide] = 8 // (started: an executor that has not read the head is behind)
		}
	}
	if len(w.execs) > 0 {
		out[stepExecCrash] = 0.15 * f
	}
	if len(w.execs) == 1 {
		if w.cfg.SplitBrain {
			out[stepSplitBrain] = 0.03 * f
		}
	}
	if len(w.zombies) > 0 {
		out[stepZombie] = 3
	}
	if w.fwdPos < w.checker.next {
		out[stepForward] = 10
	}
	out[stepForwarderCrash] = 0.1 * f
	for _, sw := range w.workers {
		if sw.w == nil {
			if !w.now.Before(sw.restartAt) {
				out[stepWorkerRestart] = 5
			}
			continue
		}
		if w.now.Before(sw.stalled) {
			continue
		}
		if len(sw.inbox) > 0 {
			out[stepDeliver] = 12
		}
		if w.runnable(sw) != nil {
			out[stepRun] = 12
		}
		if !w.local(sw).Before(sw.nextBeat) {
			out[stepHeartbeat] = 10
		}
	}
	out[stepWorkerCrash] = 0.1 * f
	out[stepWorkerStall] = 0.1 * f
	if w.views.Next() < w.checker.next {
		out[stepViews] = 5
	}
	if w.cfg.Archive {
		out[stepCheckpoint] = 0.3
		out[stepArchive] = 0.2
		if len(w.sent) > 0 {
			out[stepResend] = 0.3
		}
	}
}

// once takes one step, then checks the invariants.
func (w *world) once() error {
	var ws [numSteps]float64
	w.weights(&ws)
	total := 0.0
	for _, x := range ws {
		total += x
	}
	u := w.rng.Float64() * total
	k := stepKind(0)
	for ; k < numSteps-1; k++ {
		if u < ws[k] {
			break
		}
		u -= ws[k]
	}
	if err := w.take(k); err != nil {
		return err
	}
	return w.check()
}

func (w *world) take(k stepKind) error {
	switch k {
	case stepAdvance:
		var d time.Duration
		switch u := w.rng.Float64(); {
		case u < 0.7:
			d = w.between(time.Millisecond, 500*time.Millisecond)
		case u < 0.95:
			d = w.between(500*time.Millisecond, 5*time.Second)
		default:
			d = w.between(5*time.Second, 30*time.Second)
		}
		w.now = w.now.Add(d)
		w.tracef("advance %s", d)
	case stepRequest:
		w.request()
	case stepRetryRequest:
		i := w.rng.IntN(len(w.retries))
		r := w.retries[i]
		w.retries = append(w.retries[:i], w.retries[i+1:]...)
		w.send(r)
	case stepCancel:
		id := w.known[w.rng.IntN(len(w.known))]
		err := w.cmds.RequestCancel(w.ctx, id, "simulated client")
		w.tracef("cancel %s: %v", short(id), err)
	case stepPolicy:
		w.policy()
	case stepExecStart:
		w.startExecutor(w.chance(0.3))
	case stepExecFold:
		w.execFold()
	case stepExecDecide:
		w.execDecide()
	case stepExecCommit:
		w.execCommit()
	case stepExecCrash:
		i := w.rng.IntN(len(w.execs))
		x := w.execs[i]
		w.execs = append(w.execs[:i], w.execs[i+1:]...)
		late := 0
		for _, d := range x.pending {
			if w.chance(0.5) { // its append was on the wire: it may still land
				w.zombies = append(w.zombies, zombie{x.e, d})
				late++
			}
		}
		w.execDown = w.now.Add(w.between(0, 10*time.Second))
		w.res.ExecutorCrashes++
		w.tracef("executor %s crashes with %d decisions pending, %d still on the wire", x.name, len(x.pending), late)
	case stepSplitBrain:
		w.res.SplitBrains++
		w.startExecutor(true)
	case stepZombie:
		i := w.rng.IntN(len(w.zombies))
		z := w.zombies[i]
		w.zombies = append(w.zombies[:i], w.zombies[i+1:]...)
		if w.chance(0.6) {
			err := z.e.Commit(w.ctx, z.d)
			if err == nil {
				w.res.LateDecisions++
			}
			w.tracef("late decision of a crashed executor: %s: %v", z.d.What(), err)
		}
	case stepForward:
		w.forward()
	case stepForwarderCrash:
		w.tracef("forwarder restarts from its checkpoint %d (was at %d)", w.fwdCheckpoint, w.fwdPos)
		w.fwdPos = w.fwdCheckpoint
	case stepDeliver:
		w.deliver()
	case stepRun:
		return w.runStep()
	case stepHeartbeat:
		w.heartbeat()
	case stepWorkerRestart:
		w.workerRestart()
	case stepWorkerCrash:
		sw := w.workers[w.rng.IntN(len(w.workers))]
		if sw.w != nil {
			sw.w, sw.inbox, sw.runs = nil, nil, nil
			long := w.chance(0.2) // lost for a long while, or back soon
			if long {
				sw.restartAt = w.now.Add(w.between(time.Minute, 5*time.Minute))
			} else {
				sw.restartAt = w.now.Add(w.between(0, 20*time.Second))
			}
			w.res.WorkerCrashes++
			w.tracef("worker %s crashes (back in %s)", sw.id, sw.restartAt.Sub(w.now))
		}
	case stepWorkerStall:
		sw := w.workers[w.rng.IntN(len(w.workers))]
		if sw.w != nil {
			sw.stalled = w.now.Add(w.between(time.Second, 40*time.Second))
			w.res.WorkerStalls++
			w.tracef("worker %s stalls for %s", sw.id, sw.stalled.Sub(w.now))
		}
	case stepCheckpoint:
		w.checkpoint()
	case stepArchive:
		return w.archive()
	case stepResend:
		return w.resend()
	case stepViews:
		evs, err := w.mem.ReadAll(w.ctx, w.views.Next(), 1+w.rng.IntN(64))
		if err != nil {
			return err
		}
		if err := w.views.Apply(evs); err != nil {
			return err
		}
	}
	return nil
}

// ---- the client ----

// check folds the events committed since the last step into the checker.
func (w *world) check() error {
	for {
		evs, err := w.mem.ReadAll(w.ctx, w.checker.next, 512)
		if err != nil {
			return err
		}
		if len(evs) == 0 {
			break
		}
		for i := range evs {
			if v := w.checker.check(&evs[i]); v != nil {
				return v
			}
		}
	}
	if w.views.Next() == w.checker.next && w.statsSeen != w.checker.next {
		w.statsSeen = w.checker.next
		if err := w.checker.compareStats(w.views); err != nil {
			return err
		}
	}
	return nil
}

// heal stops every fault, brings everything back, resumes every action,
// deletes the schedules (a tick already requested goes on) and runs on until every execution has ended.
func (w *world) heal() error {
	w.healing = true
	w.store.SetEnabled(false)
	w.zombies = nil
	for len(w.execs) > 1 {
		w.execs = w.execs[1:]
	}
	for _, sw := range w.workers {
		sw.stalled = w.now
		if sw.w == nil {
			sw.restartAt = w.now
		}
	}
	for _, ref := range w.refs {
		if _, err := w.cmds.Resume(w.ctx, ref); err != nil {
			return err
		}
	}
	if err := w.deleteSchedules(); err != nil {
		return err
	}
	limit := w.step + healLimit
	for ; w.checker.open > 0 || len(w.retries) > 0; w.step++ {
		if w.step > limit {
			var open []string
			for id, x := range w.checker.execs {
				if !x.Status().Terminal() {
					open = append(open, fmt.Sprintf("%s:%s", short(id), x.Status()))
				}
			}
			slices.Sort(open)
			why := ""
			if len(w.execs) > 0 && w.execs[0].e != nil && len(open) > 0 { // why the first waits, as the executor sees it
				for id := range w.checker.execs {
					if strings.HasPrefix(open[0], short(id)+":") {
						w.execs[0].e.Inspect(func(st *projections.State) {
							if ex, ok := st.Explain(id, w.now); ok {
								why = fmt.Sprintf(" (%s waits for %v)", short(id), ex.WaitingFor)
							}
						})
					}
				}
			}
			return fmt.Errorf("liveness: %d executions still open %d steps after the faults stopped%s: %v", len(open), healLimit, why, open)
		}
		if err := w.once(); err != nil {
			return err
		}
		if w.cfg.SingleStream {
			// A pause announced before the faults stopped, whose writer got
			// an error, may still be completed by an executor after the
			// resume above (an error means an unknown outcome; see the
			// executor's package documentation): resume it again.
			for _, ref := range w.refs {
				if a := w.checker.actions[ref]; a != nil && a.paused {
					if _, err := w.cmds.Resume(w.ctx, ref); err != nil {
						return err
					}
					w.tracef("resume %s again: a pause announced before the faults stopped was completed", ref)
				}
			}
		}
	}
	return nil
}

// finish checks the whole log once more (the audit, a rebuilt read model
// equal to the live one) and fills the result.
func (w *world) finish() error {
	evs, err := w.history()
	if err != nil {
		return err
	}
	if err := w.views.Apply(evs); err != nil {
		return err
	}
	if err := w.checker.compareStats(w.views); err != nil {
		return err
	}
	rebuilt := projections.NewViews()
	for i := 0; i < len(evs); i += 100 {
		if err := rebuilt.Apply(evs[i:min(i+100, len(evs))]); err != nil {
			return err
		}
	}
	if diffs := projections.Compare(w.views, rebuilt, 5); len(diffs) > 0 {
		return fmt.Errorf("projections: the live read model differs from a rebuild: %v", diffs)
	}
	var whole eventstore.Store = w.mem
	if len(w.archived) > 0 {
		if whole, err = historyStore(w.ctx, evs); err != nil {
			return err
		}
		if err := w.checkLiveAlone(rebuilt); err != nil {
			return err
		}
	}
	rep, err := projections.Audit(w.ctx, whole, nil)
	if err != nil {
		return err
	}
	if !rep.OK() {
		v := rep.Violations[0]
		return fmt.Errorf("audit: %d violations, the first %s at %d: %s", len(rep.Violations), v.Rule, v.Position, v.Detail)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for i := range evs {
		if err := enc.Encode(&evs[i]); err != nil {
			return err
		}
	}
	sum := sha256.Sum256(buf.Bytes())
	r := w.res
	r.Steps, r.Events, r.Log, r.Digest = w.step-1, uint64(len(evs)), buf.Bytes(), hex.EncodeToString(sum[:])
	r.Executions, r.Ended, r.ByStatus = rep.Executions, rep.Ended, rep.ByStatus
	r.Faults, r.SimulatedTime = w.store.Counts(), w.now.Sub(t0)
	r.VoidGrants = rep.VoidGrants
	for _, e := range w.started {
		r.Repairs += int(e.Stats.Repairs.Load())
	}
	return nil
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}
