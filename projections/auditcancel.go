package projections

import (
	"fmt"
	"sort"
	"strings"

	"github.com/turnstile/turnstile/domain"
)

// RuleCancelInProgress: an execution.cancel_requested written by the
// executor on an execution that is not a with_items child is justified only
// by on_limit cancel_in_progress: its action's policy has it and a waiter of
// its key value found every slot of that value taken; and only as many of
// them as its waiters need (see auditCancels).
const RuleCancelInProgress = "cancel_in_progress"

// auditCancels judges the executor's cancellations by on_limit
// cancel_in_progress. The executor decides on its fold, which may be a
// little behind the log (a policy change, a waiter's end or cancellation
// may be committed while it decides), and its cancellation is fenced by the
// execution's stream alone; so a cancellation is justified when the rule's
// condition holds at its position, or held at some position since the
// execution's grant (the executor only cancels an execution that holds a
// slot, so its decision was taken at such a position).
//
// It counts them too, per key value. At a decision (its fold after some
// position P) the executor asks at most need(P) cancellations in all: the
// waiters beyond the free slots, less those covered by the runs asked
// already and still holding their slot (A(P)) and by those in flight. So
// at the cancellation at position Q, with C(x) the executor's
// cancellations committed up to x, some position P since the execution's
// grant has
//
//	C(Q) - C(P) <= need(P) - A(P)
//
// (take for P the latest decision among the cancellations committed
// after this one's decision: every one committed in (P, Q] was decided at
// P or in flight then). The audit keeps, per key value, the largest
// need - A + C since each position (rooms), and finds a violation when
// C(Q) exceeds it since the grant.
type auditCancels struct {
	full    map[string]uint64 // ref + "\x00" + key → the last position at which the condition held
	granted map[string]uint64 // execution → the position of its queue.granted
	before  map[string]bool   // executions granted before an audit's checkpoint: not judged

	asked       map[string]string // execution → its ref + "\x00" + key: asked to cancel by the executor, holding its slot
	outstanding map[string]int    // ref + "\x00" + key → how many of asked are there: A
	committed   map[string]int    // ref + "\x00" + key → the executor's cancellations since the value last held no slot: C
	rooms       map[string][]room // ref + "\x00" + key → see mostSince
}

// room says that from position pos on (until the next room's), the
// largest need - A + C of a key value at any position since is n.
type room struct {
	pos uint64
	n   int
}

func newAuditCancels() *auditCancels {
	return &auditCancels{full: map[string]uint64{}, granted: map[string]uint64{}, before: map[string]bool{},
		asked: map[string]string{}, outstanding: map[string]int{}, committed: map[string]int{}, rooms: map[string][]room{}}
}

// cancelInProgressDue reports whether the condition holds in queue q for
// key: the policy has on_limit cancel_in_progress and the key value has
// more waiters than free slots of its own max_concurrent (as
// services/executor/cancelinprogress.go counts them).
func cancelInProgressDue(q *domain.Queue, key string) bool { return cancelInProgressNeed(q, key) > 0 }

// cancelInProgressNeed returns how many waiters of key value key find no
// free slot of its own max_concurrent (at least 0) under on_limit
// cancel_in_progress; 0 under another on_limit.
func cancelInProgressNeed(q *domain.Queue, key string) int {
	if q == nil {
		return 0
	}
	p := q.Policy()
	kq := q.Key(key)
	if p.OnLimit != domain.OnLimitCancelInProgress || kq == nil {
		return 0
	}
	return max(kq.Waiting()-max(p.MaxConcurrent-kq.Active(), 0), 0)
}

// mostSince returns the largest need - A + C of key value k at any
// position from pos on. rooms[k] holds one room per run of positions
// (rising) with the same answer (falling); a position before the first
// is the first's (the value held no slot before it: C and A were 0 and
// need no more).
func (a *auditCancels) mostSince(k string, pos uint64) int {
	rs := a.rooms[k]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].pos > pos })
	switch {
	case i > 0:
		return rs[i-1].n
	case len(rs) > 0:
		return rs[0].n
	}
	return 0
}

// noteRoom records key value key's need - A + C at position pos.
func (a *auditCancels) noteRoom(qs *domain.Queues, ref, key string, pos uint64) {
	k := ref + "\x00" + key
	q := qs.Get(ref)
	n := cancelInProgressNeed(q, key)
	if q == nil || q.Key(key) == nil || q.Key(key).Active() == 0 {
		// No slot held (so none asked): the count starts again, and the
		// next question is for a grant after pos.
		delete(a.committed, k)
		if n == 0 {
			delete(a.rooms, k)
		} else {
			a.rooms[k] = append(a.rooms[k][:0], room{pos, n})
		}
		return
	}
	v := n - a.outstanding[k] + a.committed[k]
	rs, start := a.rooms[k], pos
	for len(rs) > 0 && rs[len(rs)-1].n <= v {
		start = rs[len(rs)-1].pos
		rs = rs[:len(rs)-1]
	}
	a.rooms[k] = append(rs, room{start, v})
}

// check says what is wrong with cancellation ev of execution id (before it
// is applied to x, after every earlier event was folded into qs), "" if
// nothing. It counts the cancellation.
func (a *auditCancels) check(qs *domain.Queues, env *domain.Envelope, id string, x *domain.Execution, ev domain.Event) string {
	if _, ok := ev.(domain.ExecutionCancelRequested); !ok || env.Owner != domain.OwnerExecutor || x.Parent() != "" {
		return ""
	}
	ref, key, granted, ok := qs.Locate(id)
	k := ref + "\x00" + key
	if ok && granted {
		a.committed[k]++
		if _, was := a.asked[id]; !was {
			a.asked[id] = k
			a.outstanding[k]++
		}
	}
	if a.before[id] {
		return ""
	}
	if !ok || !granted {
		return fmt.Sprintf("the executor asked execution %s to cancel, which holds no slot (and is not a with_items child)", id)
	}
	q := qs.Get(ref)
	if !cancelInProgressDue(q, key) {
		if at, ok := a.full[k]; !ok || at < a.granted[id] {
			if q.Policy().OnLimit != domain.OnLimitCancelInProgress {
				return fmt.Sprintf("the executor asked execution %s to cancel; action %q has on_limit %q, not cancel_in_progress", id, ref, q.Policy().OnLimit)
			}
			return fmt.Sprintf("the executor asked execution %s to cancel; no waiter of action %q key %q found every slot of that value taken since its grant", id, ref, key)
		}
	}
	if c, most := a.committed[k], a.mostSince(k, a.granted[id]); c > most {
		return fmt.Sprintf("the executor asked execution %s to cancel beyond what the waiters of action %q key %q need: "+
			"its cancellations there number %d since the value last held no slot (%d outstanding), "+
			"where its waiters beyond the free slots, less the runs asked already, left room for %d since the execution's grant",
			id, ref, key, c, a.outstanding[k], most)
	}
	return ""
}

// locate returns where the execution of an event of an execution stream
// is before the event is folded into qs: ref + "\x00" + key, or "".
func (a *auditCancels) locate(qs *domain.Queues, cat, id string) string {
	if cat != domain.StreamExecution {
		return ""
	}
	if ref, key, _, ok := qs.Locate(id); ok {
		return ref + "\x00" + key
	}
	return ""
}

// track folds one event (already applied to qs; was is where its
// execution was before, as locate said): it notes the grant positions,
// the asked executions whose slot ends and, for the key values the event
// touched, whether the condition holds now and their room.
func (a *auditCancels) track(qs *domain.Queues, env *domain.Envelope, ev domain.Event, cat, id, was string) {
	note := func(ref, key string) {
		if cancelInProgressDue(qs.Get(ref), key) {
			a.full[ref+"\x00"+key] = env.Position
		}
		a.noteRoom(qs, ref, key, env.Position)
	}
	switch e := ev.(type) {
	case domain.ActionDefined, domain.ActionPolicyChanged:
		_, ref := domain.SplitStream(env.Stream)
		if q := qs.Get(ref); q != nil {
			for _, key := range q.Keys() {
				note(ref, key)
			}
		}
		return
	case domain.QueueGranted:
		id = e.Execution
		if _, _, granted, ok := qs.Locate(id); ok && granted {
			a.granted[id] = env.Position
		}
	default:
		if cat != domain.StreamExecution {
			return
		}
	}
	ref, key, granted, ok := qs.Locate(id)
	if !ok {
		delete(a.granted, id)
	}
	if k, asked := a.asked[id]; asked && (!ok || !granted) {
		delete(a.asked, id)
		if a.outstanding[k]--; a.outstanding[k] <= 0 {
			delete(a.outstanding, k)
		}
	}
	if ok {
		note(ref, key)
	}
	if was != "" && (!ok || was != ref+"\x00"+key) {
		r, k, _ := strings.Cut(was, "\x00")
		note(r, k)
	}
}
