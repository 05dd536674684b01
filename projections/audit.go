package projections

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// Violation is one place where the log breaks a rule.
type Violation struct {
	Position uint64 `json:"position"`
	Stream   string `json:"stream"`
	Type     string `json:"type"`
	Rule     string `json:"rule"` // decode, owner, stream, handoff, transition, terminal, attempt, grant, with_items, lease, principal, policy, schedule_tick, cancel_in_progress, chain, checkpoint, resource
	Detail   string `json:"detail"`
	// Principal is who asked for the event through the API, as its
	// metadata records ("" for none).
	Principal string `json:"principal,omitempty"`
}

// AuditReport is what Audit found.
type AuditReport struct {
	Events     uint64         `json:"events"`
	Executions int            `json:"executions"`
	Ended      int            `json:"ended"`
	Open       []string       `json:"open,omitempty"` // executions with no terminal event yet
	Grants     int            `json:"grants"`
	VoidGrants int            `json:"void_grants,omitempty"` // grants of executions that had already ended (no slot taken)
	ByStatus   map[string]int `json:"by_status"`
	// Principals counts the events written for each principal (the token
	// names the events' metadata records).
	Principals map[string]int `json:"principals,omitempty"`
	Violations []Violation    `json:"violations"`
	// From is set on an audit of a trimmed live log alone (AuditLive): where
	// it started, and what it could not judge.
	From *AuditStart `json:"from,omitempty"`
}

// OK reports whether no rule was broken.
func (r *AuditReport) OK() bool { return len(r.Violations) == 0 }

// MaxViolations bounds how many violations a report lists.
const MaxViolations = 10_000

// Audit folds the whole log and checks every event against the rules of
// DESIGN.md: each event decodes and is written by an owner its type allows;
// each execution event passes the handoff rule (owner, named worker, state,
// attempt) on the state before it, so an execution has at most one terminal
// event; every grant takes the head of its FIFO queue while the queue has a
// free slot (so the concurrency limit holds at every position), the action
// is not paused and the rate limit allows it at the grant's log time; every
// execution.scheduling has its queue.granted. A grant of an execution that
// had already ended is void (it takes no slot; on a store without atomic
// multi-stream appends a grant can lose that race) and is counted apart.
// For with_items: children are requested only while their parent runs, in
// item order, with their derived ids, each announced by the parent's
// execution.children_requested (which the handoff rule refuses once the
// parent was asked to cancel), never more in flight than the parent's window
// at any position; a parent ends only after every child it requested has
// ended (and, unless cancelled, after all its items were requested). No
// worker writes for a handoff to an incarnation that was declared lost before,
// and no incarnation is declared lost by its lease before that lease had
// passed by log time since it owed a sign of life (auditlease.go). No
// execution is handed to an incarnation that did not register its runner.
// Who acted (RulePrincipal): a principal recorded in an event's metadata is
// valid, and a client asks to cancel only executions it requested; the
// report counts each principal's events. The action policies' own rules
// (retries and their backoffs, attempts) are checkPolicies'; the executor's
// cancellations are justified by on_limit cancel_in_progress
// (RuleCancelInProgress, auditCancels). On a store that keeps the hash
// chain, every event carries the hash the chain gives it (RuleChain,
// auditChain), the archived part too: a log that refuses to serve what does
// not verify (archive.History) is read through its Unverified view, so the
// audit names the first broken link instead of failing. Each checkpoint in
// the log is the
// fold of the log before it (RuleCheckpoint, auditcheckpoint.go). progress, if
// not nil, is called with the position
// reached now and then.
func Audit(ctx context.Context, store eventstore.Store, progress func(pos uint64)) (*AuditReport, error) {
	return audit(ctx, store, nil, progress)
}

// audit is Audit from position 0 (base nil) or from a checkpoint
// (AuditLive).
func audit(ctx context.Context, store eventstore.Store, base *auditBase, progress func(pos uint64)) (*AuditReport, error) {
	if u, ok := store.(unverifiedReader); ok {
		store = u.Unverified() // damage is a violation at its position, not a failed read
	}
	rep := &AuditReport{ByStatus: map[string]int{}}
	execs := map[string]*domain.Execution{}
	queues := domain.NewQueues()
	granted := map[string]bool{} // executions whose queue.granted has been seen
	fans := map[string]*auditFanout{}
	lost := map[string]map[string]bool{}   // worker → incarnations declared lost
	serves := map[string]map[string]bool{} // worker + "\x00" + incarnation → the runners it registered (nil: every runner)
	who := newAuditPrincipals()
	ticks := auditTicks{}
	cancels := newAuditCancels()
	chain := newAuditChain(store)
	leases := newAuditLeases()
	res := newAuditResources()
	principal := ""
	add := func(env *domain.Envelope, rule, detail string) {
		if len(rep.Violations) < MaxViolations {
			rep.Violations = append(rep.Violations, Violation{Position: env.Position, Stream: env.Stream, Type: env.Type, Rule: rule, Detail: detail, Principal: principal})
		}
	}
	cps, err := newAuditCheckpoints(ctx, store, func(v Violation) {
		if len(rep.Violations) < MaxViolations {
			rep.Violations = append(rep.Violations, v)
		}
	})
	if err != nil {
		return rep, fmt.Errorf("audit: %w", err)
	}
	from, foldFrom := uint64(0), uint64(0)
	if base != nil {
		queues = base.seed(execs, granted, fans, lost, serves, who, cancels, leases)
		from, foldFrom, chain.prev = base.first, base.sn.Next, base.prev
		res.rs = domain.RestoreResources(base.sn.Resources)
		if cps != nil {
			cps.startAt(base.sn, base.prev)
		}
		rep.From = &base.start
	}
	for {
		batch, err := store.ReadAll(ctx, from, 4096)
		if err != nil {
			return rep, fmt.Errorf("audit: read from %d: %w", from, err)
		}
		if len(batch) == 0 {
			break
		}
		for i := range batch {
			env := &batch[i]
			from = env.Position + 1
			rep.Events++
			cps.step(env)
			principal = ""
			if detail := chain.check(env); detail != "" {
				add(env, RuleChain, detail)
			}
			if env.Position < foldFrom {
				continue // before the checkpoint the audit starts at: the chain only
			}
			ev, err := codec.Events.Decode(env)
			if err != nil {
				add(env, "decode", err.Error())
				continue
			}
			spec, _ := codec.Events.Catalogue().Spec(env.Type)
			if !ownerAllowed(spec.Owners, env.Owner) {
				add(env, domain.RuleOwner, fmt.Sprintf("%s may not be written by %q", env.Type, env.Owner))
				continue
			}
			cat, id := domain.SplitStream(env.Stream)
			if cat != spec.Stream {
				add(env, "stream", fmt.Sprintf("%s belongs in a %s stream", env.Type, spec.Stream))
				continue
			}
			var detail string
			if principal, detail = who.check(env, ev, cat, id); detail != "" {
				add(env, RulePrincipal, detail)
			}
			if detail := res.check(queues, execs, env, ev); detail != "" {
				add(env, RuleResource, detail)
			}
			switch e := ev.(type) {
			case domain.ExecutionRequested:
				if detail := ticks.check(id, e); detail != "" {
					add(env, RuleScheduleTick, detail)
				}
			case domain.QueueGranted:
				_, ref := domain.SplitStream(env.Stream)
				if base != nil && execs[e.Execution] == nil {
					base.start.Unjudged++ // of an execution ended before the checkpoint (void) or never requested
					break
				}
				if x := execs[e.Execution]; x != nil && x.Status().Terminal() && !granted[e.Execution] {
					rep.VoidGrants++ // it lost a race with the execution's end: it takes no slot
					break
				}
				if err := queueCheck(queues, ref, e, env); err != nil {
					add(env, "grant", err.Error())
				}
				granted[e.Execution] = true
				rep.Grants++
			case domain.WorkerRegistered:
				var rs map[string]bool
				if len(e.Runners) > 0 {
					rs = map[string]bool{}
					for _, r := range e.Runners {
						rs[r] = true
					}
				}
				serves[id+"\x00"+e.Incarnation] = rs
			case domain.ExecutionScheduled:
				if detail := checkServes(serves, e); detail != "" {
					add(env, "runner", detail)
				}
			case domain.WorkerLost:
				if lost[id] == nil {
					lost[id] = map[string]bool{}
				}
				lost[id][e.Incarnation] = true
			}
			if cat == domain.StreamWorker {
				if detail := leases.checkWorker(id, ev, env.Version, env.Time); detail != "" {
					add(env, "lease", detail)
				}
			}
			if cat == domain.StreamExecution {
				x := execs[id]
				unknown := x == nil
				if unknown {
					x = domain.NewExecution(id)
					execs[id] = x
				}
				if err := x.Validate(ev, env.Owner, env.Writer); err != nil {
					var re *domain.RuleError
					rule := "rule"
					if errors.As(err, &re) {
						rule = re.Rule
					}
					detail := err.Error()
					if unknown && base != nil {
						detail += fmt.Sprintf(" (not live at the checkpoint at %d the audit starts from: it ended before it, or was never requested)", base.sn.Next)
					}
					add(env, rule, detail)
					continue // a refused event is not folded: the rest is judged on the lawful history
				}
				if _, ok := ev.(domain.ExecutionScheduling); ok && !granted[id] {
					add(env, "grant", fmt.Sprintf("execution %s took a slot with no queue.granted before it", id))
				}
				if env.Owner == domain.OwnerWorker && lost[env.Writer][x.Incarnation()] {
					add(env, "lease", fmt.Sprintf("worker %s wrote for its incarnation %s, declared lost before", env.Writer, x.Incarnation()))
				}
				if detail := checkFanout(fans, execs, id, x, ev); detail != "" {
					add(env, "with_items", detail)
				}
				if detail := checkPolicies(queues, x, ev, env.Time); detail != "" {
					add(env, "policy", detail)
				}
				if detail := cancels.check(queues, env, id, x, ev); detail != "" {
					add(env, RuleCancelInProgress, detail)
				}
				prevWorker, prevStatus := x.Worker(), x.Status()
				x.Apply(ev, env.Version, env.Time)
				leases.execution(id, x, prevWorker, prevStatus, ev, env.Time)
				trackFanout(fans, id, x, ev)
			}
			was := cancels.locate(queues, cat, id)
			res.fold(queues, env, ev, cat, id)
			queues.Apply(env, ev)
			cancels.track(queues, env, ev, cat, id, was)
		}
		if progress != nil {
			progress(from)
		}
	}
	cps.end(from)
	rep.Executions = len(execs)
	if len(who.counts) > 0 {
		rep.Principals = who.counts
	}
	for id, x := range execs {
		rep.ByStatus[string(x.Status())]++
		if x.Status().Terminal() {
			rep.Ended++
		} else {
			rep.Open = append(rep.Open, id)
		}
	}
	sort.Strings(rep.Open)
	return rep, nil
}

// checkServes says why handoff sched went to an incarnation that does not
// serve its runner ("" if it serves it): one that registered other runners,
// or one that never registered.
func checkServes(serves map[string]map[string]bool, sched domain.ExecutionScheduled) string {
	if sched.Incarnation == "" {
		return "" // a handoff of a log before incarnations were named
	}
	rs, ok := serves[sched.Worker+"\x00"+sched.Incarnation]
	switch {
	case !ok:
		return fmt.Sprintf("handed to worker %s incarnation %s, which never registered", sched.Worker, sched.Incarnation)
	case rs != nil && !rs[sched.Runner]:
		return fmt.Sprintf("runner %s handed to worker %s incarnation %s, which does not serve it", sched.Runner, sched.Worker, sched.Incarnation)
	}
	return ""
}

func queueCheck(qs *domain.Queues, ref string, g domain.QueueGranted, env *domain.Envelope) error {
	q := qs.Get(ref)
	if q == nil {
		return fmt.Errorf("grant of %s: action %q has no queue", g.Execution, ref)
	}
	return q.CheckGrantSeen(g.Execution, g.ConcurrencyKey, env.Time, g.Seen)
}

// auditFanout is what the audit knows of a with_items parent's children.
type auditFanout struct {
	requested int
	live      map[string]bool
}

// checkFanout judges one execution event (before it is applied to x) by the
// with_items rules. It returns "" or what is wrong.
func checkFanout(fans map[string]*auditFanout, execs map[string]*domain.Execution, id string, x *domain.Execution, ev domain.Event) string {
	if r, ok := ev.(domain.ExecutionRequested); ok && r.Parent != "" {
		p := execs[r.Parent]
		f := fans[r.Parent]
		switch {
		case p == nil || !p.IsParent() || f == nil:
			return fmt.Sprintf("child %s names %s, which is not a with_items parent", id, r.Parent)
		case r.Action != p.Action():
			return fmt.Sprintf("child %s is for action %q, its parent for %q", id, r.Action, p.Action())
		case p.Status() != domain.StatusRunning:
			return fmt.Sprintf("child %s requested while its parent %s is %s", id, r.Parent, p.Status())
		case r.ItemIndex != f.requested || r.ItemIndex >= p.ChildrenRequested():
			return fmt.Sprintf("child %s is item %d; the next item of %s is %d, and it requested %d of %d",
				id, r.ItemIndex, r.Parent, f.requested, p.ChildrenRequested(), p.Items())
		case id != domain.ChildID(r.Parent, r.ItemIndex):
			return fmt.Sprintf("child of %s item %d has id %s, not the derived %s", r.Parent, r.ItemIndex, id, domain.ChildID(r.Parent, r.ItemIndex))
		case len(f.live)+1 > p.Window():
			return fmt.Sprintf("child %s would be the %dth in flight of %s, its window is %d", id, len(f.live)+1, r.Parent, p.Window())
		}
		return ""
	}
	if !x.IsParent() {
		return ""
	}
	f := fans[id]
	if f == nil {
		return ""
	}
	switch e := ev.(type) {
	case domain.ExecutionChildrenRequested:
		if f.requested != x.ChildrenRequested() {
			return fmt.Sprintf("parent %s requests more children while %d it requested have no stream", id, x.ChildrenRequested()-f.requested)
		}
		if len(f.live)+e.Count > x.Window() {
			return fmt.Sprintf("parent %s requests %d children with %d in flight, its window is %d", id, e.Count, len(f.live), x.Window())
		}
	case domain.ExecutionCompleted, domain.ExecutionFailed, domain.ExecutionCancelled:
		if len(f.live) > 0 || f.requested < x.ChildrenRequested() {
			return fmt.Sprintf("parent %s ended with %d children still in flight", id, len(f.live)+x.ChildrenRequested()-f.requested)
		}
		if _, cancelled := ev.(domain.ExecutionCancelled); !cancelled && f.requested < x.Items() {
			return fmt.Sprintf("parent %s ended after requesting %d of its %d items", id, f.requested, x.Items())
		}
	}
	return ""
}

// trackFanout folds one execution event (already applied to x) into fans.
func trackFanout(fans map[string]*auditFanout, id string, x *domain.Execution, ev domain.Event) {
	if _, ok := ev.(domain.ExecutionRequested); ok {
		if x.IsParent() {
			fans[id] = &auditFanout{live: map[string]bool{}}
		} else if f := fans[x.Parent()]; f != nil {
			f.requested++
			f.live[id] = true
		}
		return
	}
	if x.Status().Terminal() && x.Parent() != "" {
		if f := fans[x.Parent()]; f != nil {
			delete(f.live, id)
		}
	}
}

func ownerAllowed(owners []domain.Owner, o domain.Owner) bool {
	for _, x := range owners {
		if x == o {
			return true
		}
	}
	return false
}
