// with_items fan-out: a parent starts (or is rejected, or cancelled),
// requests its children in item order while fewer than its window are in
// flight, never more (the parent's version fences each fan-out), passes a
// cancellation request on to its children, and ends once every child has
// ended.
//
// Writes: on execution-<parent>, execution.running, .children_requested
// and the parent's end (completed, failed, cancelled or rejected); each
// child's execution.requested (at "no stream"), and its
// execution.cancel_requested when the parent is cancelled. When: every
// cycle.

package executor

import (
	"encoding/json"
	"fmt"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
)

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
		x := e.state.Execution(id)
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
			c := e.state.Execution(cid)
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
