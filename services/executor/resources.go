// Resources in the grant cycle (docs/policies.md, "Resources"): a waiter
// whose action needs resources is granted only when every unit it needs is
// free and every rate window allows it, at the resources' state the fold
// shows plus what this cycle's own grants took; its resource.granted
// events join its queue.granted in one atomic append, each fenced by its
// resource stream's version. A ready waiter (a candidate of the cycle)
// that cannot be granted reserves the resource key values it needs for the
// rest of the cycle: no later candidate takes their units (the head
// reserves; a waiter that needs more is never passed for ever). On a store
// without atomic multi-stream appends nothing that needs a resource is
// granted: a fence on several streams needs one append.
//
// Writes: resource.granted on resource-<name>, in the grant's op.

package executor

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/repository"
)

// allReady asks Grantable for every ready waiter of a queue.
const allReady = math.MaxInt32

// resourcesOp is the op key of the grants that need resources.
const resourcesOp = "\x00resources"

// resHeld is units of one resource key value a grant takes.
type resHeld struct {
	name, key string
	units     int
}

type resKey struct{ name, key string }

// resCycle is one grant cycle's view of resources: the units and grants its
// own grants took, the key values reserved, and the resource streams'
// versions its op appends at.
type resCycle struct {
	units    map[resKey]int
	grants   map[resKey]int
	reserved map[resKey]bool
	version  map[string]int64
	bad      bool // a need that names no defined resource: never fits
}

func newResCycle() *resCycle {
	return &resCycle{units: map[resKey]int{}, grants: map[resKey]int{}, reserved: map[resKey]bool{}, version: map[string]int64{}}
}

// needs returns the resource key values execution x needs (its input gives
// keyed resources' key values; a missing key field reads as ""), or a
// single entry naming an undefined resource, which never fits.
func (rc *resCycle) needs(e *Executor, x *domain.Execution, ns []domain.ResourceNeed) []resHeld {
	out := make([]resHeld, 0, len(ns))
	for _, n := range ns {
		key := ""
		if r := e.state.Resources.Get(n.Name); r != nil && x != nil {
			key = r.Limit().KeyValue(x.Input())
		}
		out = append(out, resHeld{n.Name, key, n.Units})
	}
	return out
}

// fits reports whether every unit of hs is free at log time now, after
// this cycle's grants, none reserved, and its resource stream not awaiting
// a write (or the store cannot fence several streams in one append).
func (rc *resCycle) fits(e *Executor, hs []resHeld, now time.Time) bool {
	if e.single {
		return false
	}
	for _, h := range hs {
		k := resKey{h.name, h.key}
		r := e.state.Resources.Get(h.name)
		_, mine := rc.version[h.name] // (staged by this cycle: busy with our own op)
		if r == nil || rc.reserved[k] || e.busy(domain.ResourceStream(h.name)) && !mine {
			return false
		}
		u, g := r.Room(h.key, now)
		if h.units > u-rc.units[k] || g-rc.grants[k] <= 0 {
			return false
		}
	}
	return true
}

// reserve is rc.reserve for a waiter of an action with runner runner,
// unless no accepting worker serves that runner at all: such a waiter is
// not ready (it waits for a worker, not for the units) and reserves nothing,
// or one action nobody serves would hold a shared resource for ever.
func (e *Executor) reserve(rc *resCycle, hs []resHeld, runner string) {
	if hs == nil {
		return
	}
	for _, w := range e.state.Workers {
		if w.Accepting() && (len(w.Runners()) == 0 || slices.Contains(w.Runners(), runner)) {
			rc.reserve(hs)
			return
		}
	}
}

// reserve keeps hs's key values from every later candidate of the cycle.
func (rc *resCycle) reserve(hs []resHeld) {
	for _, h := range hs {
		rc.reserved[resKey{h.name, h.key}] = true
	}
}

// take counts hs's units as taken by a grant of the cycle.
func (rc *resCycle) take(hs []resHeld) {
	for _, h := range hs {
		k := resKey{h.name, h.key}
		rc.units[k] += h.units
		rc.grants[k]++
	}
}

// resourceGrant adds g to the op's append to resource stream name,
// creating it (fenced on the resource's version) on first use.
func (e *Executor) resourceGrant(o *op, rc *resCycle, name string, g domain.ResourceGranted) {
	rs := domain.ResourceStream(name)
	for i := range o.appends {
		if o.appends[i].Stream == rs {
			a := &o.appends[i]
			v := rc.version[name] + int64(len(a.Events)) + 1
			env, _ := codec.Events.Encode(repository.EventID(e.cfg.Name, rs, v, g.EventType()), g, domain.OwnerExecutor, e.cfg.Name)
			a.Events = append(a.Events, env)
			e.awaiting[rs] = uint64(v)
			return
		}
	}
	rc.version[name] = e.state.Resources.Get(name).Version()
	o.appends = append(o.appends, e.stage(rs, rc.version[name], g))
}

// resourceKeyFields returns the key fields of the keyed resources in ns,
// one per line (ExecutionScheduled.ResourceKeyFields).
func (e *Executor) resourceKeyFields(ns []domain.ResourceNeed) string {
	var out []string
	for _, n := range ns {
		if r := e.state.Resources.Get(n.Name); r != nil && r.Limit().KeyField != "" {
			out = append(out, r.Limit().KeyField)
		}
	}
	return strings.Join(out, "\n")
}
