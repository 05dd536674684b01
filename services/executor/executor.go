package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/aggregate"
	"github.com/turnstile/turnstile/services/clock"
)

// Config configures an Executor. Zero fields take the defaults below.
type Config struct {
	Store  eventstore.Store
	Clock  clock.Clock
	Logger *slog.Logger
	// Name identifies this executor instance in the events it writes.
	Name string
	// Tick is how often time-based rules (handoff expiry, worker leases,
	// queue timeouts) are checked. Default 250ms.
	Tick time.Duration
	// WorkerLease is how long a worker may go without an event in the log
	// before it is declared lost. Default 15s.
	WorkerLease time.Duration
	// LoseWorkersAtStart declares every active worker lost once the fold has
	// caught up: right for `serve` on the embedded store, whose workers all
	// lived in the previous process.
	LoseWorkersAtStart bool
	// MaxBatch bounds the decisions written in one cycle. Default 4096.
	MaxBatch int
}

func (c *Config) setDefaults() {
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Name == "" {
		c.Name = "executor"
	}
	if c.Tick == 0 {
		c.Tick = 250 * time.Millisecond
	}
	if c.WorkerLease == 0 {
		c.WorkerLease = 15 * time.Second
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = 4096
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("executor: Store is required")
	case c.Tick < time.Millisecond:
		return fmt.Errorf("executor: Tick %s is below 1ms", c.Tick)
	case c.WorkerLease < 10*time.Millisecond:
		return fmt.Errorf("executor: WorkerLease %s is below 10ms", c.WorkerLease)
	case c.MaxBatch < 1:
		return fmt.Errorf("executor: MaxBatch %d < 1", c.MaxBatch)
	}
	return nil
}

// Executor folds the log and writes the executor's decisions. Start it once;
// Stop ends it.
type Executor struct {
	cfg   Config
	log   *slog.Logger
	state *projections.State

	// awaiting holds, per stream, the version this executor wrote and has
	// not yet seen in its fold; no decision touches such a stream meanwhile.
	awaiting map[string]uint64
	// handing holds, per execution stream awaited, the worker a handoff in
	// it names: no verdict on that worker is decided until the fold shows
	// the handoff (and so the execution among those the verdict takes back).
	handing map[string]string

	// single is set when the store cannot append to several streams
	// atomically: each op is then written one stream at a time (see the
	// package documentation).
	single bool

	// pending remembers, for each partial write the fold shows (a grant
	// without its handoff, announced children or action changes not yet
	// written), since which timed cycle it has been seen; sweep is the
	// current decision's generation.
	pending map[string]*seen
	sweep   int64

	// beforeAppend, if set (tests only), is called before each op is appended.
	beforeAppend func(what string)

	ready    atomic.Bool
	position atomic.Uint64
	cancel   context.CancelFunc
	done     chan struct{}
	mu       sync.Mutex // guards state for readers outside the loop (Inspect)

	// Stats counts decisions, for metrics and tests.
	Stats Stats
}

// Stats counts what the executor wrote and what it lost to other writers.
type Stats struct {
	Grants, Rejections, Expiries, Abandons, Cancels, Failures, Conflicts atomic.Int64
	LostWorkers, Children, ParentsEnded                                  atomic.Int64
	// Repairs counts the single-stream writes this executor completed from
	// the log: handoffs of grants, children of announced fan-outs and
	// announced action changes whose writer stopped before writing them.
	Repairs atomic.Int64
	// TimedCycles counts the cycles that checked the time-based rules, each
	// counted once its decisions have been appended (or refused).
	TimedCycles atomic.Int64
}

// New returns an executor; it does nothing until Start.
func New(cfg Config) (*Executor, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Executor{cfg: cfg, log: cfg.Logger.With("component", "executor", "name", cfg.Name),
		state: projections.NewState(), awaiting: map[string]uint64{}, handing: map[string]string{},
		single: !eventstore.AtomicMultiStream(cfg.Store), pending: map[string]*seen{}}, nil
}

// Start folds the log from the beginning and then follows it, deciding as it
// goes. It returns at once; the work runs until Stop or ctx ends.
func (e *Executor) Start(ctx context.Context) error {
	head, err := e.cfg.Store.Head(ctx)
	if err != nil {
		return fmt.Errorf("executor: read head: %w", err)
	}
	ctx, e.cancel = context.WithCancel(ctx)
	e.done = make(chan struct{})
	batches := make(chan []domain.Envelope, 64)
	subErr := make(chan error, 1)
	go func() {
		subErr <- e.cfg.Store.Subscribe(ctx, 0, eventstore.Filter{}, func(b []domain.Envelope) error {
			cp := make([]domain.Envelope, len(b))
			copy(cp, b)
			select {
			case batches <- cp:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	go e.loop(ctx, head, batches, subErr)
	return nil
}

// Stop ends the executor and waits for its loop to return.
func (e *Executor) Stop() {
	if e.cancel == nil {
		return
	}
	e.cancel()
	<-e.done
}

// Ready reports whether the fold has caught up with the log as it was at Start.
func (e *Executor) Ready() bool { return e.ready.Load() }

// Position returns the position after the last event folded.
func (e *Executor) Position() uint64 { return e.position.Load() }

// Inspect calls fn with the executor's fold, under its lock. fn must not keep it.
func (e *Executor) Inspect(fn func(*projections.State)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(e.state)
}

func (e *Executor) loop(ctx context.Context, head uint64, batches <-chan []domain.Envelope, subErr <-chan error) {
	defer close(e.done)
	tick := time.NewTicker(e.cfg.Tick)
	defer tick.Stop()
	if head == 0 {
		e.ready.Store(true) // an empty log: no worker of a previous run to lose
	}
	for {
		timed := false
		select {
		case <-ctx.Done():
			return
		case err := <-subErr:
			if ctx.Err() == nil {
				e.log.Error("log subscription ended", "err", err)
			}
			return
		case b := <-batches:
			e.apply(b)
		drain:
			for len(batches) > 0 { // fold everything already delivered before deciding
				select {
				case b := <-batches:
					e.apply(b)
				default:
					break drain
				}
			}
		case <-tick.C:
			timed = true
		}
		if !e.ready.Load() {
			if e.state.Next < head {
				continue
			}
			// Declare the previous run's workers lost before saying we are
			// ready, so that no worker of this run, which registers after
			// Ready, is taken for one of them.
			e.mu.Lock()
			ops := e.decideLostAtStart(nil)
			e.mu.Unlock()
			e.run(ctx, ops)
			e.ready.Store(true)
			e.log.Info("caught up with the log", "position", e.state.Next)
		}
		e.decide(ctx, timed)
	}
}

func (e *Executor) apply(batch []domain.Envelope) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range batch {
		env := &batch[i]
		if err := e.state.Apply(env); err != nil {
			// An event this build cannot read is skipped, loudly: the audit reports it.
			e.log.Error("cannot fold event", "position", env.Position, "stream", env.Stream, "err", err)
			e.state.Next = env.Position + 1
		}
		if v, ok := e.awaiting[env.Stream]; ok && env.Version >= v {
			delete(e.awaiting, env.Stream)
			delete(e.handing, env.Stream)
		}
	}
	e.position.Store(e.state.Next)
}

// op is one decision of the executor: one atomic append, or, on a store
// without atomic multi-stream appends, appends to one stream at a time in
// the order given, the first being the fence (see seqKind).
type op struct {
	what     string
	appends  []eventstore.StreamAppend
	count    *atomic.Int64
	n        int  // how many decisions count adds (0 means 1)
	takeBack bool // it takes executions back from a worker (or declares one lost)
	seq      seqKind
	key      int // index of the append whose landing makes the decision count
}

// seqKind says how an op's appends are written one stream at a time. The
// first append is always the fence: if it fails, nothing else is written.
type seqKind uint8

const (
	// seqChain: in order, stopping at the first failure.
	seqChain seqKind = iota
	// seqEach: after the fence, every append whatever the others did (they
	// are independent: each grant's handoff).
	seqEach
	// seqChainPastRaces: in order, going on past an append that lost a race
	// (its stream was written by someone else: a child another executor
	// requested) and stopping at any other failure.
	seqChainPastRaces
)

// written says which of an op's appends landed, and the first error.
type written struct {
	ok  []bool
	err error
}

// write appends o: atomically when the store can, else one stream at a
// time as o.seq says.
func (e *Executor) write(ctx context.Context, o *op) written {
	w := written{ok: make([]bool, len(o.appends))}
	all := func(err error) written {
		for i := range w.ok {
			w.ok[i] = err == nil
		}
		w.err = err
		return w
	}
	switch {
	case len(o.appends) == 1:
		a := &o.appends[0]
		_, err := e.cfg.Store.Append(ctx, a.Stream, a.Expected, a.Events...)
		return all(err)
	case !e.single:
		_, err := e.cfg.Store.AppendMulti(ctx, o.appends...)
		return all(err)
	}
	for i := range o.appends {
		a := &o.appends[i]
		_, err := e.cfg.Store.Append(ctx, a.Stream, a.Expected, a.Events...)
		if err == nil {
			w.ok[i] = true
			continue
		}
		if w.err == nil {
			w.err = err
		}
		switch {
		case i == 0:
			return w
		case o.seq == seqEach:
		case o.seq == seqChainPastRaces && aggregate.LostRace(err):
		default:
			return w
		}
	}
	return w
}

func (e *Executor) busy(stream string) bool {
	_, ok := e.awaiting[stream]
	return ok
}

func (e *Executor) decide(ctx context.Context, timed bool) {
	e.mu.Lock()
	now := e.cfg.Clock.Now()
	e.sweep++
	var ops []op
	ops = e.decideAnnounced(ops)
	ops = e.decideRejections(ops)
	if timed {
		ops = e.decideLeases(ops, now)
		ops = e.decideQueueTimeouts(ops, now)
	}
	ops = e.decideExpiries(ops, now, timed)
	if len(e.state.Attention) > 0 {
		attention := sortedKeys(e.state.Attention)
		ops = e.decideAttention(ops, attention)
		ops = e.decideParents(ops, attention)
	}
	ops = e.decideGrants(ops, now)
	for k, p := range e.pending { // forget partial writes the fold no longer shows
		if p.touched != e.sweep {
			delete(e.pending, k)
		}
	}
	e.mu.Unlock()
	e.run(ctx, ops)
	if timed {
		e.Stats.TimedCycles.Add(1)
	}
}

// run appends the decided ops concurrently (the store commits them together)
// and waits for all. A lost race is expected and harmless: the fold shows the
// winner's events and the next cycle decides again.
func (e *Executor) run(ctx context.Context, ops []op) {
	if len(ops) == 0 {
		return
	}
	res := make([]written, len(ops))
	var wg sync.WaitGroup
	for i := range ops {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			if e.beforeAppend != nil {
				e.beforeAppend(ops[i].what)
			}
			res[i] = e.write(ctx, &ops[i])
		}(i)
	}
	wg.Wait()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, r := range res {
		o := &ops[i]
		for j, ok := range r.ok {
			if !ok { // it will not show up in the fold: stop waiting for it
				delete(e.awaiting, o.appends[j].Stream)
				delete(e.handing, o.appends[j].Stream)
			}
		}
		if r.ok[o.key] && o.count != nil {
			o.count.Add(int64(max(o.n, 1)))
		}
		err := r.err
		if err == nil {
			continue
		}
		if r.ok[0] {
			// A single-stream op cut short after its fence: the fold shows
			// what is missing, and the next cycles complete it.
			if aggregate.LostRace(err) {
				e.Stats.Conflicts.Add(1)
			}
			if ctx.Err() == nil {
				e.log.Info("an op's appends after its fence did not all land; the log says what is missing", "op", o.what, "err", err)
			}
			continue
		}
		if aggregate.LostRace(err) {
			e.Stats.Conflicts.Add(1)
			if o.takeBack {
				// A worker (or another executor) wrote first: the log has
				// decided, and the next cycle decides on what it says.
				e.log.Info("lost a race for a take-back; the log decided otherwise", "op", o.what, "err", err)
			} else {
				e.log.Debug("lost a race, deciding again", "op", o.what, "err", err)
			}
			continue
		}
		if ctx.Err() == nil {
			e.log.Error("append failed", "op", o.what, "err", err)
		}
	}
}

// stage builds one stream's part of an op and marks the stream awaited.
// Its events' ids derive from this executor, the stream and the version.
func (e *Executor) stage(stream string, version int64, events ...domain.Event) eventstore.StreamAppend {
	return e.stageIDs(stream, version, func(i int, typ string) uuid.UUID {
		return aggregate.EventID(e.cfg.Name, stream, version+1+int64(i), typ)
	}, events...)
}

// stageAfter is stage for an append that follows the fence event fence:
// its ids derive from fence's id, so whoever completes it from the log
// (this executor after a restart, or another) writes the same ids.
func (e *Executor) stageAfter(fence uuid.UUID, stream string, version int64, events ...domain.Event) eventstore.StreamAppend {
	return e.stageIDs(stream, version, func(i int, typ string) uuid.UUID { return followID(fence, stream, i, typ) }, events...)
}

// followID is the id of the i-th event of type typ that an op writes to
// stream after its fence event fence.
func followID(fence uuid.UUID, stream string, i int, typ string) uuid.UUID {
	return uuid.NewSHA1(fence, fmt.Appendf(nil, "%s/%d/%s", stream, i, typ))
}

func (e *Executor) stageIDs(stream string, version int64, id func(i int, typ string) uuid.UUID, events ...domain.Event) eventstore.StreamAppend {
	a := eventstore.StreamAppend{Stream: stream, Expected: aggregate.Expected(version)}
	for i, ev := range events {
		env, err := domain.Catalogue.Encode(id(i, ev.EventType()), ev, domain.OwnerExecutor, e.cfg.Name)
		if err != nil {
			panic(fmt.Sprintf("executor: encode %s: %v", ev.EventType(), err)) // our own events always encode
		}
		a.Events = append(a.Events, env)
	}
	e.awaiting[stream] = uint64(version + int64(len(events)))
	return a
}

func (e *Executor) decideRejections(ops []op) []op {
	for _, r := range e.state.Queues.PendingRejections() {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Live[r.Execution]
		stream := domain.ExecutionStream(r.Execution)
		if x == nil || e.busy(stream) {
			continue
		}
		ev, err := x.Reject(r.Code, r.Reason)
		if err != nil {
			continue
		}
		ops = append(ops, op{what: "reject " + r.Execution, count: &e.Stats.Rejections,
			appends: []eventstore.StreamAppend{e.stage(stream, x.Version(), ev)}})
	}
	return ops
}

// rateMargin is how much earlier than its clock the executor judges the
// rate limit. The audit judges a grant at its commit time, which must not be
// before the decision's time; a store that rounds commit times down (the
// embedded store keeps microseconds) could otherwise put a grant a fraction
// of a microsecond before the window allowed it. Judging earlier only ever
// allows fewer grants.
const rateMargin = time.Millisecond

// decideGrants grants the heads of the queues, oldest request first across
// all queues, while workers have free slots, each with its handoff in the
// same atomic append as the grant (on a store without atomic multi-stream
// appends: after it, see seqEach). First it completes the handoffs of grants
// the log shows without one. A queue with an announced action change not yet
// in the action stream grants nothing.
func (e *Executor) decideGrants(ops []op, now time.Time) []op {
	workers := e.freeWorkers()
	if len(workers) == 0 {
		return ops
	}
	ops = e.decideUnscheduled(ops, workers)
	free := 0
	for _, w := range workers {
		free += w.free
	}
	type cand struct {
		q *domain.Queue
		w domain.Waiter
	}
	var cands []cand
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		if _, announced := e.state.Announced[ref]; announced || q.Waiting() == 0 || e.busy(domain.QueueStream(ref)) {
			continue
		}
		for _, w := range q.Grantable(free, now.Add(-rateMargin)) {
			cands = append(cands, cand{q, w})
		}
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].w.Position < cands[j].w.Position })
	perQueue := map[string]*op{}
	var order []string
	qVersion := map[string]int64{}
	// A waiter that cannot be granted now (its stream awaits one of our
	// writes, such as its cancellation, or no worker runs its action) holds
	// back everyone behind it in its key's queue: granting past it could
	// commit before it leaves the queue, out of FIFO order.
	blocked := map[[2]string]bool{}
	for _, c := range cands {
		if free == 0 || len(ops)+len(perQueue) >= e.cfg.MaxBatch {
			break
		}
		qk := [2]string{c.q.Ref, c.w.Key}
		if blocked[qk] {
			continue
		}
		blocked[qk] = true // until granted below
		x := e.state.Live[c.w.Execution]
		xs := domain.ExecutionStream(c.w.Execution)
		if x == nil || e.busy(xs) {
			continue
		}
		p := c.q.Policy()
		wk := pickWorker(workers, p.Runner)
		if wk == nil {
			continue
		}
		grant, err := x.Grant(c.w.Key)
		if err != nil {
			continue
		}
		// The handoff follows the grant in the same append; decide it on the
		// state the grant leads to.
		next := *x
		next.Apply(grant, uint64(x.Version()+1), time.Time{})
		sched, err := next.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		blocked[qk] = false
		o := perQueue[c.q.Ref]
		if o == nil {
			o = &op{what: "grant " + c.q.Ref, count: &e.Stats.Grants, seq: seqEach}
			perQueue[c.q.Ref] = o
			order = append(order, c.q.Ref)
			qVersion[c.q.Ref] = c.q.Version()
		}
		fence := e.queueGrant(o, c.q.Ref, qVersion, domain.QueueGranted{Execution: c.w.Execution, ConcurrencyKey: c.w.Key})
		o.appends = append(o.appends, e.stageAfter(fence, xs, x.Version(), grant, sched))
		e.handing[xs] = wk.id
		o.n++
		wk.free--
		free--
	}
	for _, ref := range order {
		o := perQueue[ref]
		ops = append(ops, *o)
	}
	return ops
}

// queueGrant adds a queue.granted event to the op's queue-stream append,
// creating it (fenced on the queue's version) on first use, and returns the
// event's id.
func (e *Executor) queueGrant(o *op, ref string, qVersion map[string]int64, g domain.QueueGranted) uuid.UUID {
	qs := domain.QueueStream(ref)
	for i := range o.appends {
		if o.appends[i].Stream == qs {
			a := &o.appends[i]
			v := qVersion[ref] + int64(len(a.Events)) + 1
			env, _ := domain.Catalogue.Encode(aggregate.EventID(e.cfg.Name, qs, v, g.EventType()), g, domain.OwnerExecutor, e.cfg.Name)
			a.Events = append(a.Events, env)
			e.awaiting[qs] = uint64(v)
			return env.ID
		}
	}
	a := e.stage(qs, qVersion[ref], g)
	o.appends = append([]eventstore.StreamAppend{a}, o.appends...)
	return a.Events[0].ID
}

// seen is how long a partial write has been in the fold.
type seen struct {
	since   int64 // Stats.TimedCycles when first seen
	touched int64 // the decision generation that last saw it
}

// ripe reports whether the partial write key has been in the fold for two
// timed cycles, so that its writer (another executor, or the API, still at
// work) had time to finish it before this executor completes it.
func (e *Executor) ripe(key string) bool {
	now := e.Stats.TimedCycles.Load()
	p := e.pending[key]
	if p == nil {
		p = &seen{since: now}
		e.pending[key] = p
	}
	p.touched = e.sweep
	return now >= p.since+2
}

// decideUnscheduled completes grants whose handoff the log does not show
// (a single-stream grant cut short after its queue.granted): the
// execution's execution.scheduling and execution.scheduled, at its current
// version, with ids derived from the grant's. An execution asked to cancel
// is left to decideAttention, which ends it and frees the slot.
func (e *Executor) decideUnscheduled(ops []op, workers []*freeWorker) []op {
	for _, id := range sortedKeys(e.state.Unscheduled) {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Live[id]
		xs := domain.ExecutionStream(id)
		if x == nil || x.CancelRequested() || e.busy(xs) || !e.ripe("grant "+id) {
			continue
		}
		ref, key, _, ok := e.state.Queues.Locate(id)
		q := e.state.Queues.Get(ref)
		if !ok || q == nil {
			continue
		}
		p := q.Policy()
		wk := pickWorker(workers, p.Runner)
		if wk == nil {
			continue
		}
		grant, err := x.Grant(key)
		if err != nil {
			continue
		}
		next := *x
		next.Apply(grant, uint64(x.Version()+1), time.Time{})
		sched, err := next.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		wk.free--
		e.handing[xs] = wk.id
		ops = append(ops, op{what: "hand over " + id, count: &e.Stats.Repairs,
			appends: []eventstore.StreamAppend{e.stageAfter(e.state.Unscheduled[id], xs, x.Version(), grant, sched)}})
	}
	return ops
}

// decideAnnounced completes action changes announced on their queue stream
// (by Commands on a store without atomic multi-stream appends) whose action
// event is not in the log: it appends the announced event as it was
// prepared (same id, same writer), so if its writer's own append lands too,
// one of them is an idempotent replay of the other.
func (e *Executor) decideAnnounced(ops []op) []op {
	for _, ref := range sortedKeys(e.state.Announced) {
		an := e.state.Announced[ref]
		as := domain.ActionStream(ref)
		if e.busy(as) || !e.ripe("action "+ref) {
			continue
		}
		if spec, ok := domain.Catalogue.Spec(an.Event.Type); !ok || spec.Stream != domain.StreamAction ||
			an.Event.ID == (uuid.UUID{}) || an.Event.Owner != domain.OwnerAPI {
			e.log.Error("cannot complete an announced action change: the announcement does not carry a usable event",
				"action", ref, "position", an.Position)
			continue
		}
		env := an.Event
		env.Stream, env.Version, env.Position, env.Time = "", 0, 0, time.Time{}
		e.awaiting[as] = an.ActionVersion
		ops = append(ops, op{what: "complete action change " + ref, count: &e.Stats.Repairs,
			appends: []eventstore.StreamAppend{{Stream: as, Expected: aggregate.Expected(int64(an.ActionVersion) - 1), Events: []domain.Envelope{env}}}})
	}
	return ops
}

type freeWorker struct {
	id, incarnation string
	free            int
	runners         map[string]bool // nil: runs everything
}

func (e *Executor) freeWorkers() []*freeWorker {
	var out []*freeWorker
	for _, id := range e.state.WorkerIDs() {
		w := e.state.Workers[id]
		if e.busy(domain.WorkerStream(id)) {
			continue // a verdict on it is being written
		}
		if n := w.Free(); n > 0 {
			fw := &freeWorker{id: id, incarnation: w.Incarnation(), free: n}
			if rs := w.Runners(); len(rs) > 0 {
				fw.runners = map[string]bool{}
				for _, r := range rs {
					fw.runners[r] = true
				}
			}
			out = append(out, fw)
		}
	}
	return out
}

// pickWorker returns the worker with the most free slots that runs runner.
func pickWorker(ws []*freeWorker, runner string) *freeWorker { return pickWorkerBut(ws, runner, "") }

// pickWorkerBut is pickWorker leaving out worker not.
func pickWorkerBut(ws []*freeWorker, runner, not string) *freeWorker {
	var best *freeWorker
	for _, w := range ws {
		if w.free <= 0 || w.id == not || (w.runners != nil && !w.runners[runner]) {
			continue
		}
		if best == nil || w.free > best.free {
			best = w
		}
	}
	return best
}

// decideAttention handles plain executions the executor owns outside the
// queue: pre-handoff cancellation requests, and executions taken back from a
// worker (hand them to another worker, or fail them when attempts are exhausted).
func (e *Executor) decideAttention(ops []op, attention []string) []op {
	workers := e.freeWorkers()
	for _, id := range attention {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Live[id]
		xs := domain.ExecutionStream(id)
		if x == nil || e.busy(xs) || x.IsParent() {
			continue
		}
		if x.CancelRequested() {
			if ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name, x.CancelReason()); err == nil {
				ev.Code = domain.CancelRequested
				ops = append(ops, op{what: "cancel " + id, count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
			continue
		}
		if x.Status() != domain.StatusScheduling {
			continue
		}
		q := e.state.Queues.Get(x.Action())
		if q == nil {
			continue
		}
		p := q.Policy()
		if x.Attempt() >= p.MaxAttempts {
			code := x.TakenBack()
			why := "no worker started it within its scheduled_timeout"
			if code == domain.FailWorkerLost {
				why = "its worker was lost or stopped while holding it"
			}
			ev, err := x.Fail(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("%s: gave up after %d attempts (max_attempts %d): %s", code, x.Attempt(), p.MaxAttempts, why), nil)
			if err == nil {
				ev.Code = code
				ops = append(ops, op{what: "fail " + id, count: &e.Stats.Failures,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
			continue
		}
		// Another worker than the one it was taken back from, if one is free.
		wk := pickWorkerBut(workers, p.Runner, x.Worker())
		if wk == nil {
			wk = pickWorker(workers, p.Runner)
		}
		if wk == nil {
			continue
		}
		ev, err := x.Schedule(wk.id, wk.incarnation, p)
		if err != nil {
			continue
		}
		wk.free--
		e.handing[xs] = wk.id
		ops = append(ops, op{what: "reschedule " + id, count: &e.Stats.Grants,
			appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
	}
	return ops
}

// maxChildrenPerOp bounds the children one fan-out append requests.
const maxChildrenPerOp = 64

// decideParents drives with_items parents: start (or reject, or cancel) a
// requested one; for a running one, request the next children in item order
// while fewer than its window are in flight, end it once every child has
// ended, and on a cancellation request pass the request on to its children
// and end it once they have ended.
//
// Zero over-dispatch holds whatever the timing: one append writes the
// parent's execution.children_requested (at the parent's expected version)
// and the next run of children in item order (ids derived from parent and
// item index, each at expected version "no stream"). A decision made on a
// lagging fold sees no more children ended than have, so the in-flight count
// at commit is at most the one decided on; the parent's version serialises
// fan-out with cancellation requests and the parent's end, so no child is
// requested twice, after a cancellation request, or after the end.
func (e *Executor) decideParents(ops []op, attention []string) []op {
	for _, id := range attention {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		x := e.state.Live[id]
		xs := domain.ExecutionStream(id)
		if x == nil || !x.IsParent() || e.busy(xs) {
			continue
		}
		switch x.Status() {
		case domain.StatusRequested:
			var ev domain.Event
			var err error
			var count *atomic.Int64
			switch q := e.state.Queues.Get(x.Action()); {
			case x.CancelRequested():
				c, cerr := x.Cancel(domain.OwnerExecutor, e.cfg.Name, x.CancelReason())
				c.Code = domain.CancelRequested
				ev, err, count = c, cerr, &e.Stats.Cancels
			case q == nil || !q.Defined():
				ev, err = x.Reject(domain.RejectUnknownAction, fmt.Sprintf("action %q is not defined", x.Action()))
				count = &e.Stats.Rejections
			default:
				ev, err = x.StartParent()
			}
			if err == nil {
				ops = append(ops, op{what: "parent " + id, count: count, appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		case domain.StatusRunning:
			ops = e.decideRunningParent(ops, id, x)
		}
	}
	return ops
}

func (e *Executor) decideRunningParent(ops []op, id string, x *domain.Execution) []op {
	f := e.state.Fanouts[id]
	if f == nil {
		return ops
	}
	xs := domain.ExecutionStream(id)
	// The parent's own stream says how many children it requested; children
	// whose events the fold has not reached yet count as in flight.
	asked := x.ChildrenRequested()
	if f.Requested < asked {
		// Children announced and not (yet) in the log: nothing else is
		// decided for this parent until they are; if they stay missing, its
		// fan-out was cut short after the announcement, so complete it.
		return e.requestChildren(ops, id, x, f.Requested, asked-f.Requested, f.Announce, true)
	}
	if x.CancelRequested() {
		for _, cid := range sortedKeys(f.Live) {
			c := e.state.Live[cid]
			cs := domain.ExecutionStream(cid)
			if c == nil || c.CancelRequested() || e.busy(cs) {
				continue
			}
			ev, err := c.RequestCancelAs(domain.OwnerExecutor, fmt.Sprintf("its with_items parent %s was cancelled", id))
			if err == nil {
				ops = append(ops, op{what: "cancel child " + cid, appends: []eventstore.StreamAppend{e.stage(cs, c.Version(), ev)}})
			}
		}
		if len(f.Live) == 0 && f.Ended == asked {
			ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("cancelled on request after %d of %d items were requested", asked, x.Items()))
			if err == nil {
				ev.Code = domain.CancelRequested
				ev.Result = fanoutResult(x, f)
				ops = append(ops, op{what: "cancel parent " + id, count: &e.Stats.ParentsEnded,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		}
		return ops
	}
	if asked >= x.Items() {
		if f.Ended < asked {
			return ops
		}
		var ev domain.Event
		var err error
		if f.Failed == 0 {
			ev, err = x.Complete(domain.OwnerExecutor, e.cfg.Name, fanoutResult(x, f))
		} else {
			fe, ferr := x.Fail(domain.OwnerExecutor, e.cfg.Name, fmt.Sprintf("%d of %d items did not complete", f.Failed, x.Items()), fanoutResult(x, f))
			fe.Code = domain.FailItems
			ev, err = fe, ferr
		}
		if err == nil {
			ops = append(ops, op{what: "end parent " + id, count: &e.Stats.ParentsEnded,
				appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
		}
		return ops
	}
	room := min(x.Window()-(asked-f.Ended), x.Items()-asked, maxChildrenPerOp)
	if room <= 0 {
		return ops
	}
	return e.requestChildren(ops, id, x, asked, room, uuid.UUID{}, false)
}

// requestChildren requests items first..first+n-1 of parent id: with
// repair unset, as a fan-out op led by the parent's
// execution.children_requested (the fence); with repair set, only the
// children, which the fold shows announced by the parent's event announce
// and missing (once ripe). Children's event ids derive from the
// announcement's, so every executor completing a fan-out writes the same ones.
func (e *Executor) requestChildren(ops []op, id string, x *domain.Execution, first, n int, announce uuid.UUID, repair bool) []op {
	o := op{what: "fan out " + id, count: &e.Stats.Children, seq: seqChainPastRaces}
	if repair {
		if !e.ripe("children " + id) {
			return ops
		}
		o.what, o.count = "request announced children of "+id, &e.Stats.Repairs
	} else {
		ev, err := x.RequestChildren(n)
		if err != nil {
			return ops
		}
		a := e.stage(domain.ExecutionStream(id), x.Version(), ev)
		announce = a.Events[0].ID
		o.appends = append(o.appends, a)
	}
	for i := first; i < first+n; i++ {
		cs := domain.ExecutionStream(domain.ChildID(id, i))
		if e.busy(cs) {
			break // a request for it is in flight; decide again once it is folded
		}
		in, err := domain.ChildInput(x.Input(), x.Item(i))
		if err != nil {
			e.log.Error("cannot build a child's input", "parent", id, "item", i, "err", err)
			break // the request was validated: this does not happen
		}
		ev, err := domain.NewExecution(domain.ChildID(id, i)).Request(domain.ExecutionRequested{Action: x.Action(), Input: in, Parent: id, ItemIndex: i})
		if err != nil {
			e.log.Error("cannot request a child", "parent", id, "item", i, "err", err)
			break
		}
		o.appends = append(o.appends, e.stageAfter(announce, cs, -1, ev))
		o.n++
	}
	if o.n != n && (!repair || o.n == 0) {
		for _, a := range o.appends {
			delete(e.awaiting, a.Stream)
		}
		return ops
	}
	return append(ops, o)
}

// fanoutResult is a with_items parent's result: how its items ended.
func fanoutResult(x *domain.Execution, f *projections.Fanout) json.RawMessage {
	b, _ := json.Marshal(struct {
		Items     int `json:"items"`
		Requested int `json:"requested"`
		Completed int `json:"completed"`
		Failed    int `json:"failed"`
	}{x.Items(), f.Requested, f.Ended - f.Failed, f.Failed})
	return b
}

// decideExpiries takes back handoffs that no worker started in time (on a
// timed cycle), executions held by an incarnation that is no longer the
// worker's current one or by a stopped or lost worker, and handoffs to a
// draining worker that it has not started (it takes nothing new).
func (e *Executor) decideExpiries(ops []op, now time.Time, timed bool) []op {
	for _, wid := range e.state.WorkerIDs() {
		w := e.state.Workers[wid]
		if len(w.InFlight) == 0 || (!timed && w.Status() == domain.WorkerActive) {
			continue // an active worker's replaced incarnations are found on the next tick
		}
		for _, id := range e.state.HeldBy(wid) {
			if len(ops) >= e.cfg.MaxBatch {
				return ops
			}
			x := e.state.Live[id]
			xs := domain.ExecutionStream(id)
			if x == nil || e.busy(xs) {
				continue
			}
			var reason string
			switch {
			case w.Status() == domain.WorkerLostStatus || w.Status() == domain.WorkerStoppedStatus:
				reason = fmt.Sprintf("worker %s incarnation %s is %s", wid, x.Incarnation(), w.Status())
			case x.Incarnation() != "" && x.Incarnation() != w.Incarnation():
				reason = fmt.Sprintf("worker %s incarnation %s was replaced by %s", wid, x.Incarnation(), w.Incarnation())
			case w.Status() == domain.WorkerDrainingStatus && x.Status() == domain.StatusScheduled:
				reason = fmt.Sprintf("worker %s is draining and had not started it", wid)
			}
			if reason != "" {
				if ev, err := x.Abandon(reason); err == nil {
					ops = append(ops, op{what: "abandon " + id, count: &e.Stats.Abandons, takeBack: true,
						appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				}
				continue
			}
			if timed && x.Status() == domain.StatusScheduled {
				if ev, err := x.ExpireHandoff(now); err == nil {
					ops = append(ops, op{what: "expire " + id, count: &e.Stats.Expiries, takeBack: true,
						appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
				}
			}
		}
	}
	return ops
}

// maxAbandonsWithVerdict bounds the abandonments written in the same append
// as a lost-worker verdict; the rest follow in decideExpiries.
const maxAbandonsWithVerdict = 4096

// loseWorker decides worker id's lost verdict and, in the same atomic append,
// the abandonment of every execution it holds: from the verdict's position
// on, no write of the lost incarnation for those executions can pass the
// handoff rule. If one of them moved meanwhile (the worker was alive after
// all), the whole append fails and the next cycle decides again.
func (e *Executor) loseWorker(ops []op, id string, now time.Time, lease time.Duration, force bool, reason string) []op {
	w := e.state.Workers[id]
	ws := domain.WorkerStream(id)
	if w == nil || (w.Status() != domain.WorkerActive && w.Status() != domain.WorkerDrainingStatus) || e.busy(ws) {
		return ops
	}
	verdict, err := w.DeclareLost(now, lease, force, reason)
	if err != nil {
		return ops
	}
	for _, w := range e.handing {
		if w == id {
			return ops // a handoff to it is not folded yet: decide once it is
		}
	}
	held := e.state.HeldBy(id)
	if len(held) > maxAbandonsWithVerdict {
		held = held[:maxAbandonsWithVerdict]
	}
	for _, xid := range held {
		if e.busy(domain.ExecutionStream(xid)) {
			return ops // decide once our own write to it is folded
		}
	}
	va := e.stage(ws, w.Version(), verdict)
	o := op{what: "lose worker " + id, count: &e.Stats.LostWorkers, takeBack: true, seq: seqChain, appends: []eventstore.StreamAppend{va}}
	for _, xid := range held {
		x := e.state.Live[xid]
		if x == nil {
			continue
		}
		ev, err := x.Abandon(fmt.Sprintf("worker %s incarnation %s was declared lost: %s", id, x.Incarnation(), reason))
		if err != nil {
			continue
		}
		o.appends = append(o.appends, e.stageAfter(va.Events[0].ID, domain.ExecutionStream(xid), x.Version(), ev))
	}
	if e.single && len(o.appends) > 1 {
		// One stream at a time: every abandonment first, each fenced by its
		// execution's version against the worker's own writes, then the
		// verdict, fenced by the worker stream's version against its
		// heartbeats. If the worker wrote to one of them meanwhile, it is
		// alive: the chain stops before the verdict (the abandonments that
		// landed stand, like handoff expiries). Once the verdict lands,
		// every execution it held is already taken back, so no write of the
		// lost incarnation can pass the handoff rule after it.
		o.appends = append(o.appends[1:], va)
		o.key = len(o.appends) - 1
	}
	return append(ops, o)
}

// decideLeases declares lost the workers whose last event in the log is
// older than the lease at now.
func (e *Executor) decideLeases(ops []op, now time.Time) []op {
	for _, id := range e.state.WorkerIDs() {
		if len(ops) >= e.cfg.MaxBatch {
			break
		}
		ops = e.loseWorker(ops, id, now, e.cfg.WorkerLease, false, fmt.Sprintf("no event in the log for %s (its lease)", e.cfg.WorkerLease))
	}
	return ops
}

// decideLostAtStart declares every active worker lost, right after the fold
// caught up, when the configuration says they all died with the last run.
func (e *Executor) decideLostAtStart(ops []op) []op {
	if !e.cfg.LoseWorkersAtStart {
		return ops
	}
	for _, id := range e.state.WorkerIDs() {
		ops = e.loseWorker(ops, id, e.cfg.Clock.Now(), 0, true, "its process ended with the previous run")
	}
	return ops
}

// decideQueueTimeouts cancels waiters that waited longer than their queue timeout.
func (e *Executor) decideQueueTimeouts(ops []op, now time.Time) []op {
	for _, ref := range e.state.Queues.Refs() {
		q := e.state.Queues.Get(ref)
		for _, w := range q.TimedOut(now, e.cfg.MaxBatch) {
			if len(ops) >= e.cfg.MaxBatch {
				return ops
			}
			x := e.state.Live[w.Execution]
			xs := domain.ExecutionStream(w.Execution)
			if x == nil || e.busy(xs) {
				continue
			}
			ev, err := x.Cancel(domain.OwnerExecutor, e.cfg.Name,
				fmt.Sprintf("%s: waited more than %s in the queue of %q", domain.CancelQueueTimeout, q.Policy().QueueTimeout(), ref))
			if err == nil {
				ev.Code = domain.CancelQueueTimeout
				ops = append(ops, op{what: "queue timeout " + w.Execution, count: &e.Stats.Cancels,
					appends: []eventstore.StreamAppend{e.stage(xs, x.Version(), ev)}})
			}
		}
	}
	return ops
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
