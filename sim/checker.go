package sim

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/projections"
)

// checker folds the log one event at a time and checks every event as it
// comes: the documented handoff rule by an oracle of its own that shares no
// table with domain (oracle.go), the rules the audit checks (decoding,
// owners, the handoff rule,
// hence one terminal event per execution, FIFO grants and the limit by the
// domain's queue fold, no write for a lost incarnation), and the same
// queue rules again with a model of its own that shares no code with the
// executor (FIFO per action and key, the limit and the pause at the grant's
// position), which also gives the queue statistics the read model must show.
type checker struct {
	next    uint64 // position after the last event checked
	execs   map[string]*domain.Execution
	queues  *domain.Queues
	granted map[string]bool
	lost    map[string]map[string]bool // worker → incarnations declared lost
	oracle  map[string]*oracleExec     // the oracle's own fold of each execution (oracle.go)

	actions map[string]*actionModel
	place   map[string]*placement // queued executions (waiting or active) → where
	open    int                   // executions requested and not ended
	void    int                   // void grants: of executions that had ended (single-stream path)
	ticks   map[string]string     // schedule + "\x00" + tick → the execution it produced (ticks.go)
	leases  *leaseModel           // the lease rule (leases.go)
}

type actionModel struct {
	policy          domain.Policy
	defined, paused bool
	keys            map[string]*keyModel
	stats           projections.QueueStats // the totals, queue length and active count the model expects
	waiting, active int
	lastKey         string // the key value of the last grant (hasLast): where the round robin resumes
	hasLast         bool
}

type keyModel struct {
	waiting []string // in request order
	active  map[string]bool
	skips   int // total limit: grants that passed it in the round while it could have been granted, since its last grant or idle
}

type placement struct {
	action, key string
	active      bool
	backoffEnd  time.Time // backing off after a failed run, or a request not due, until then (log time): neither waiting nor active
	backingOff  bool
	prio        int    // 1..4
	pos         uint64 // of its request, or of its requeue: its place in the FIFO
}

func newChecker() *checker {
	return &checker{execs: map[string]*domain.Execution{}, queues: domain.NewQueues(), granted: map[string]bool{},
		lost: map[string]map[string]bool{}, oracle: map[string]*oracleExec{}, actions: map[string]*actionModel{}, place: map[string]*placement{},
		leases: newLeaseModel()}
}

// violation is a broken invariant, found at a log position.
type violation struct {
	Position uint64
	Stream   string
	Type     string
	Rule     string
	Detail   string
}

func (v *violation) Error() string {
	return fmt.Sprintf("%s at position %d (%s %s): %s", v.Rule, v.Position, v.Stream, v.Type, v.Detail)
}

func (c *checker) action(ref string) *actionModel {
	a := c.actions[ref]
	if a == nil {
		a = &actionModel{keys: map[string]*keyModel{}}
		a.stats.Action = ref
		c.actions[ref] = a
	}
	return a
}

func (a *actionModel) key(k string) *keyModel {
	km := a.keys[k]
	if km == nil {
		km = &keyModel{active: map[string]bool{}}
		a.keys[k] = km
	}
	return km
}

// check folds one event; it returns the first rule the event breaks, if any.
func (c *checker) check(env *domain.Envelope) *violation {
	bad := func(rule, format string, args ...any) *violation {
		return &violation{Position: env.Position, Stream: env.Stream, Type: env.Type, Rule: rule, Detail: fmt.Sprintf(format, args...)}
	}
	if env.Position != c.next {
		return bad("log", "position %d follows %d", env.Position, c.next-1)
	}
	c.next = env.Position + 1
	ev, err := codec.Events.Decode(env)
	if err != nil {
		return bad("decode", "%v", err)
	}
	spec, _ := codec.Events.Catalogue().Spec(env.Type)
	if !slices.Contains(spec.Owners, env.Owner) {
		return bad(domain.RuleOwner, "%s may not be written by %q", env.Type, env.Owner)
	}
	cat, id := domain.SplitStream(env.Stream)
	if cat != spec.Stream {
		return bad("stream", "%s belongs in a %s stream", env.Type, spec.Stream)
	}
	if cat == domain.StreamWorker {
		if detail := c.leases.worker(id, ev, env.Time); detail != "" {
			return bad("lease", "%s", detail)
		}
	}
	switch e := ev.(type) {
	case domain.ExecutionRequested:
		if detail := c.checkTick(id, e); detail != "" {
			return bad("schedule_tick", "%s", detail)
		}
	case domain.QueueGranted:
		if x := c.execs[e.Execution]; x != nil && x.Status().Terminal() && !c.granted[e.Execution] {
			// A void grant: on a log without atomic multi-stream appends a
			// grant decided on a stale fold can land after the execution
			// ended (the queue stream does not fence its stream). It takes
			// no slot.
			c.void++
			break
		}
		q := c.queues.Get(id)
		if q == nil {
			return bad("grant", "grant of %s: action %q has no queue", e.Execution, id)
		}
		if err := q.CheckGrantSeen(e.Execution, e.ConcurrencyKey, env.Time, e.Seen); err != nil {
			return bad("grant", "%v", err)
		}
		c.granted[e.Execution] = true
		if v := c.modelGrant(e, bad); v != nil {
			return v
		}
	case domain.WorkerLost:
		if c.lost[id] == nil {
			c.lost[id] = map[string]bool{}
		}
		c.lost[id][e.Incarnation] = true
	case domain.ActionDefined:
		a := c.action(id)
		a.policy, a.defined = e.Policy, true
		a.stats.MaxConcurrent = e.Policy.MaxConcurrent
	case domain.ActionPolicyChanged:
		a := c.action(id)
		a.policy = e.Policy
		a.stats.MaxConcurrent = e.Policy.MaxConcurrent
	case domain.ActionPaused:
		c.action(id).paused = true
		c.action(id).stats.Paused = true
	case domain.ActionResumed:
		c.action(id).paused = false
		c.action(id).stats.Paused = false
	}
	if cat == domain.StreamExecution {
		x := c.execs[id]
		if x == nil {
			x = domain.NewExecution(id)
			c.execs[id] = x
		}
		ox := c.oracle[id]
		if ox == nil {
			ox = &oracleExec{state: oNew}
			c.oracle[id] = ox
		}
		if detail := oracleJudge(ox, env.Type, string(env.Owner), env.Writer, env.Data); detail != "" {
			return bad("oracle", "the documented handoff rule refuses it: %s", detail)
		}
		if err := x.Validate(ev, env.Owner, env.Writer); err != nil {
			rule := "rule"
			var re *domain.RuleError
			if errors.As(err, &re) {
				rule = re.Rule
			}
			return bad(rule, "%v", err)
		}
		if _, ok := ev.(domain.ExecutionScheduling); ok && !c.granted[id] {
			return bad("grant", "execution %s took a slot with no queue.granted before it", id)
		}
		if env.Owner == domain.OwnerWorker && c.lost[env.Writer][x.Incarnation()] {
			return bad("lease", "worker %s wrote for its incarnation %s, declared lost before", env.Writer, x.Incarnation())
		}
		wasTerminal := x.Status().Terminal()
		x.Apply(ev, env.Version, env.Time)
		c.leases.execution(id, x, ev, env.Time)
		if v := c.model(env, id, x, ev, bad); v != nil {
			return v
		}
		switch {
		case x.Status().Terminal() && !wasTerminal:
			c.open--
		case env.Version == 0:
			c.open++
		}
	}
	c.queues.Apply(env, ev)
	return nil
}

// model applies an execution event to the checker's own queue model and
// checks a grant against it.
func (c *checker) model(env *domain.Envelope, id string, x *domain.Execution, ev domain.Event,
	bad func(rule, format string, args ...any) *violation) *violation {
	if x.IsParent() {
		return nil // a with_items parent takes no slot
	}
	switch e := ev.(type) {
	case domain.ExecutionRequested:
		a := c.actions[e.Action]
		if a == nil || !a.defined || domain.ValidateInput(e.Input) != nil {
			return nil // it will be rejected
		}
		k, err := a.policy.KeyOf(e.Input)
		if err != nil {
			return nil
		}
		if a.policy.OnLimit == domain.OnLimitReject || a.waiting >= a.policy.MaxQueueLength {
			return bad("sim", "the simulation's model does not cover on_limit reject or full queues")
		}
		p := &placement{action: e.Action, key: k, prio: e.Priority, pos: env.Position}
		if p.prio == 0 {
			p.prio = 2
		}
		c.place[id] = p
		a.stats.TotalEnqueued++
		// Not due before run_at or the delay after the request's log time.
		if t, err := time.Parse(time.RFC3339, e.RunAt); e.RunAt != "" && err == nil && t.After(env.Time) {
			p.backingOff, p.backoffEnd = true, t
		}
		if e.DelayMillis > 0 {
			p.backingOff, p.backoffEnd = true, env.Time.Add(time.Duration(e.DelayMillis)*time.Millisecond)
		}
		if p.backingOff {
			a.key(k) // (its key's queue exists from the request on)
			return nil
		}
		km := a.key(k)
		km.waiting = append(km.waiting, id)
		a.waiting++
	case domain.ExecutionScheduling:
		if p := c.place[id]; p == nil || !p.active || e.ConcurrencyKey != p.key {
			return bad("model", "execution %s takes a slot but was not granted one (in key %q)", id, e.ConcurrencyKey)
		}
		c.actions[x.Action()].stats.TotalGranted++
	case domain.ExecutionScheduled:
		a := c.actions[x.Action()]
		if limit := attemptLimit(a.policy); limit > 0 && e.Attempt > limit {
			return bad("attempts", "execution %s handed off for attempt %d; %q allows %d", id, e.Attempt, x.Action(), limit)
		}
	case domain.ExecutionRetryScheduled:
		p := c.place[id]
		if p == nil || !p.active {
			return bad("model", "execution %s backs off but holds no slot", id)
		}
		a := c.actions[p.action]
		want := modelBackoff(a.policy, e.Attempt)
		if time.Duration(e.BackoffMillis)*time.Millisecond != want {
			return bad("backoff", "execution %s backs off %dms after run %d; %q says %s", id, e.BackoffMillis, e.Attempt, p.action, want)
		}
		delete(a.keys[p.key].active, id)
		a.active--
		a.keys[p.key].idle()
		p.active, p.backingOff, p.backoffEnd = false, true, env.Time.Add(want)
	case domain.ExecutionRequeued:
		p := c.place[id]
		if p == nil || !p.backingOff {
			return bad("model", "execution %s requeued but was not backing off", id)
		}
		if env.Time.Before(p.backoffEnd) {
			return bad("backoff", "execution %s requeued at %s, its backoff ends at %s", id, env.Time, p.backoffEnd)
		}
		a := c.actions[p.action]
		km := a.keys[p.key]
		if km == nil {
			km = a.key(p.key)
		}
		km.waiting = append(km.waiting, id)
		a.waiting++
		p.backingOff, p.pos = false, env.Position
	case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionTimedOut, domain.ExecutionCancelled, domain.ExecutionRejected:
		a := c.actions[x.Action()]
		if a == nil {
			return nil // rejected: unknown action
		}
		switch ev.(type) {
		case domain.ExecutionCompleted:
			a.stats.TotalCompleted++
		case domain.ExecutionFailed:
			a.stats.TotalFailed++
		case domain.ExecutionTimedOut:
			a.stats.TotalTimedOut++
		case domain.ExecutionCancelled:
			a.stats.TotalCancelled++
		case domain.ExecutionRejected:
			a.stats.TotalRejected++
		}
		p := c.place[id]
		if p == nil {
			return nil
		}
		delete(c.place, id)
		km := a.keys[p.key]
		if p.backingOff {
			return nil // in no queue and holding no slot
		}
		if p.active {
			delete(km.active, id)
			a.active--
		} else {
			km.waiting = slices.DeleteFunc(km.waiting, func(w string) bool { return w == id })
			a.waiting--
		}
		km.idle()
	}
	return nil
}

// modelGrant applies a grant to the checker's own queue model and checks it
// there: the grant is what takes the slot (its execution.scheduling follows,
// in the same append, or on a log without atomic multi-stream appends,
// later), so FIFO order, the limit and the pause are judged at its position.
func (c *checker) modelGrant(e domain.QueueGranted, bad func(rule, format string, args ...any) *violation) *violation {
	id := e.Execution
	p := c.place[id]
	if p == nil || p.active {
		return bad("model", "execution %s is granted but is not waiting", id)
	}
	a := c.actions[p.action]
	km := a.keys[p.key]
	// The waiter to grant: the first (in request order) of the highest priority.
	// (Among the waiters the grant's decision had seen: a request of a
	// higher priority committed after it may be passed.)
	next := km.waiting[0]
	for _, w := range km.waiting {
		if c.place[w].prio < c.place[next].prio && (e.Seen == 0 || c.place[w].pos < e.Seen) {
			next = w
		}
	}
	switch {
	case e.ConcurrencyKey != p.key:
		return bad("model", "execution %s is granted in key %q; its input gives %q", id, e.ConcurrencyKey, p.key)
	case next != id && c.place[next].prio < p.prio:
		return bad("priority", "%s (priority %d) is granted while %s of priority %d waits in %q key %q", id, p.prio, next, c.place[next].prio, p.action, p.key)
	case next != id:
		return bad("model", "FIFO: %s is granted while %s, requested before it, waits in %q key %q", id, next, p.action, p.key)
	case len(km.active) >= a.policy.MaxConcurrent:
		return bad("model", "limit: %s is granted with %d active in %q key %q, max_concurrent %d", id, len(km.active), p.action, p.key, a.policy.MaxConcurrent)
	case a.paused:
		return bad("model", "%s is granted while %q is paused", id, p.action)
	}
	if v := a.modelRound(id, p.key, bad); v != nil {
		return v
	}
	km.waiting = slices.DeleteFunc(km.waiting, func(w string) bool { return w == id })
	km.active[id] = true
	p.active = true
	a.waiting--
	a.active++
	return nil
}

// compareStats checks the read model's queue statistics against the model,
// for every action: queue length, active count, limit, pause and totals.
func (c *checker) compareStats(v *projections.Views) error {
	for ref, a := range c.actions {
		if !a.defined {
			continue
		}
		got, ok := v.Stats(ref)
		if !ok {
			return fmt.Errorf("queue_stats of %q missing from the read model", ref)
		}
		want := a.stats
		want.QueueLength, want.ActiveCount = a.waiting, a.active
		got.OldestEnqueuedAt, got.WaitP50Ms, got.WaitP95Ms, got.Position = nil, 0, 0, 0
		if got != want {
			return fmt.Errorf("queue_stats of %q at position %d: the read model says %+v, a fold of the log %+v", ref, c.next, got, want)
		}
	}
	return nil
}

// attemptLimit is how many handoffs policy p allows an execution, computed
// here apart from the domain: max_attempts, or the retry's max_attempts
// when larger; 0 for no limit.
func attemptLimit(p domain.Policy) int {
	if p.MaxAttempts <= 0 {
		return 0
	}
	if p.Retry != nil && p.Retry.MaxAttempts > p.MaxAttempts {
		return p.Retry.MaxAttempts
	}
	return p.MaxAttempts
}

// modelBackoff is the backoff after failed run n under p, computed here
// apart from the domain: backoff_seconds × multiplier^(n-1), at most
// max_backoff_seconds, to the millisecond.
func modelBackoff(p domain.Policy, n int) time.Duration {
	r := p.Retry
	if r == nil {
		return 0
	}
	s := r.BackoffSeconds
	for i := 1; i < n && s < r.MaxBackoffSeconds; i++ {
		s *= r.BackoffMultiplier
	}
	s = math.Min(s, r.MaxBackoffSeconds)
	return time.Duration(math.Round(s*1000)) * time.Millisecond
}
