package domain

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Resources: named limits shared by every action whose policy needs them
// (docs/policies.md, "Resources"). A resource is a resource-<name> stream,
// written by the API (defined, deleted); a grant that needs it appends
// resource.granted to it in the same atomic append as the queue's grant,
// with the resource stream's expected version: one more fence, so two
// executors can never over-grant it. Units are released when the holder
// ends or backs off (the same events that free its queue slot).

// Resource event names and stream category.
const (
	TypeResourceDefined = "resource.defined"
	TypeResourceDeleted = "resource.deleted"
	TypeResourceGranted = "resource.granted"

	StreamResource = "resource"
)

// ResourceStream names a resource's stream.
func ResourceStream(name string) string { return StreamResource + "-" + name }

// ResourceLimit is what a resource allows: at most MaxConcurrent units
// held at once (0: no such limit) and RateLimit grants per window (nil: no
// such limit), per value of the top-level input field KeyField when set.
type ResourceLimit struct {
	MaxConcurrent int        `json:"max_concurrent,omitempty"`
	RateLimit     *RateLimit `json:"rate_limit,omitempty"`
	KeyField      string     `json:"key_field,omitempty"`
}

// ResourceDefined defines a resource or changes its limit.
type ResourceDefined struct {
	ResourceLimit
}

// ResourceDeleted removes a resource; no policy may name it then.
type ResourceDeleted struct{}

// ResourceGranted records that an execution holds Units of the resource
// (of key value Key) from its grant on. It is written in the same atomic
// append as the execution's queue.granted.
type ResourceGranted struct {
	Execution string `json:"execution"`
	Key       string `json:"key,omitempty"`
	Units     int    `json:"units"`
	// Seen is the log position the grant was decided on (as QueueGranted.Seen).
	Seen uint64 `json:"seen,omitempty"`
}

func (ResourceDefined) EventType() string { return TypeResourceDefined }
func (ResourceDeleted) EventType() string { return TypeResourceDeleted }
func (ResourceGranted) EventType() string { return TypeResourceGranted }

// ResourceNeed is one resource an action's executions hold while they hold
// their slot: in a policy, "name" or {"name":…,"units":…} (units 1 by default).
type ResourceNeed struct {
	Name  string `json:"name"`
	Units int    `json:"units,omitempty"`
}

// UnmarshalJSON reads "name" or {"name","units"}.
func (n *ResourceNeed) UnmarshalJSON(b []byte) error {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '"' {
		*n = ResourceNeed{}
		return json.Unmarshal(t, &n.Name)
	}
	type plain ResourceNeed
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*n = ResourceNeed(p)
	return nil
}

// MaxResourceNeeds bounds how many resources one policy names.
const MaxResourceNeeds = 16

// validateNeeds checks a policy's resources: known-looking names, each
// once, units 1..MaxConcurrentLimit (whether the resources exist and allow
// that many units is checked against their definitions, CheckNeeds).
func validateNeeds(ns []ResourceNeed) error {
	if len(ns) > MaxResourceNeeds {
		return fmt.Errorf("%w: resources names more than %d resources", ErrInvalidPolicy, MaxResourceNeeds)
	}
	seen := map[string]bool{}
	for _, n := range ns {
		if err := ValidateResourceName(n.Name); err != nil {
			return err
		}
		if seen[n.Name] {
			return fmt.Errorf("%w: resources names %q twice", ErrInvalidPolicy, n.Name)
		}
		seen[n.Name] = true
		if n.Units < 1 || n.Units > MaxConcurrentLimit {
			return fmt.Errorf("%w: units %d of resource %q must be 1..%d", ErrInvalidPolicy, n.Units, n.Name, MaxConcurrentLimit)
		}
	}
	return nil
}

// ValidateResourceName checks a resource name (as an action ref).
func ValidateResourceName(name string) error {
	if name == "" || len(name) > MaxRefLen || !refPattern.MatchString(name) {
		return fmt.Errorf("%w: resource name %q must be 1..%d letters, digits, '_', '.' or '-', starting with a letter or digit", ErrInvalidPolicy, clip(name), MaxRefLen)
	}
	return nil
}

// Validate checks a resource's limit.
func (l ResourceLimit) Validate() error {
	if l.MaxConcurrent == 0 && l.RateLimit == nil {
		return fmt.Errorf("%w: a resource needs max_concurrent or rate_limit", ErrInvalidPolicy)
	}
	if l.MaxConcurrent < 0 || l.MaxConcurrent > MaxConcurrentLimit {
		return fmt.Errorf("%w: max_concurrent %d must be 1..%d", ErrInvalidPolicy, l.MaxConcurrent, MaxConcurrentLimit)
	}
	if rl := l.RateLimit; rl != nil {
		if rl.Count < 1 || rl.Count > 1_000_000 || math.IsNaN(rl.PerSeconds) || rl.PerSeconds <= 0 || rl.PerSeconds > 86400 {
			return fmt.Errorf("%w: rate_limit needs count 1..1000000 and per_seconds in (0, 86400]", ErrInvalidPolicy)
		}
	}
	if len(l.KeyField) > MaxRefLen || strings.ContainsAny(l.KeyField, "\n\r") {
		return fmt.Errorf("%w: key_field must be at most %d bytes, on one line", ErrInvalidPolicy, MaxRefLen)
	}
	return nil
}

// rateWindow returns the rate limit's window (0 without one).
func (l ResourceLimit) rateWindow() time.Duration {
	if l.RateLimit == nil {
		return 0
	}
	return seconds(l.RateLimit.PerSeconds)
}

// KeyOf returns the key value of an execution with input in: "" for an
// unkeyed resource, else the input's field KeyField as Policy.KeyOf reads
// a concurrency_key (a missing field is an error wrapping ErrInvalidRequest).
func (l ResourceLimit) KeyOf(in json.RawMessage) (string, error) {
	return Policy{ConcurrencyKey: l.KeyField}.KeyOf(in)
}

// KeyValue is the key value a grant to an execution with input in holds:
// KeyOf's, or "" when the input lacks the field (a request the API
// refuses; the fold admits it under "").
func (l ResourceLimit) KeyValue(in json.RawMessage) string {
	if l.KeyField == "" {
		return ""
	}
	k, err := l.KeyOf(in)
	if err != nil {
		return ""
	}
	return k
}

// ResourceKey is the state of one key value of a resource.
type ResourceKey struct {
	Key     string
	InUse   int            // units held
	holders map[string]int // execution → units
	grants  []time.Time    // log times of grants, oldest first, for the rate limit
}

// Holders returns how many executions hold units of the key value.
func (k *ResourceKey) Holders() int { return len(k.holders) }

// Resource is one resource as the log defines it, and who holds it.
type Resource struct {
	Name    string
	limit   ResourceLimit
	defined bool
	version int64 // of resource-<name>, -1 when empty
	keys    map[string]*ResourceKey
}

// Limit returns the resource's limit as last defined.
func (r *Resource) Limit() ResourceLimit { return r.limit }

// Defined reports whether the resource exists (defined and not deleted).
func (r *Resource) Defined() bool { return r.defined }

// Version returns the resource stream's last version (-1 for none): the
// expected version of its next grant.
func (r *Resource) Version() int64 { return r.version }

// Key returns the state of key value key, or nil when nothing holds it.
func (r *Resource) Key(key string) *ResourceKey { return r.keys[key] }

// Keys returns the key values with holders or recent grants, busiest
// (most units in use) first, then by key.
func (r *Resource) Keys() []*ResourceKey {
	out := make([]*ResourceKey, 0, len(r.keys))
	for _, k := range r.keys {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].InUse != out[j].InUse {
			return out[i].InUse > out[j].InUse
		}
		return out[i].Key < out[j].Key
	})
	return out
}

// InUse returns the units held across every key value.
func (r *Resource) InUse() (n int) {
	for _, k := range r.keys {
		n += k.InUse
	}
	return n
}

// Room returns how many more units key value key may take at log time now
// (math.MaxInt without a max_concurrent) and how many more grants its rate
// limit allows (math.MaxInt without one). An undefined resource has none.
func (r *Resource) Room(key string, now time.Time) (units, grants int) {
	if !r.defined {
		return 0, 0
	}
	units, grants = math.MaxInt, math.MaxInt
	k := r.keys[key]
	if r.limit.MaxConcurrent > 0 {
		units = r.limit.MaxConcurrent
		if k != nil {
			units -= k.InUse
		}
	}
	if rl := r.limit.RateLimit; rl != nil {
		grants = rl.Count
		if k != nil {
			cutoff := now.Add(-r.limit.rateWindow())
			i := sort.Search(len(k.grants), func(i int) bool { return k.grants[i].After(cutoff) })
			grants -= len(k.grants) - i
		}
	}
	return max(units, 0), max(grants, 0)
}

// held is what one execution holds of one resource.
type held struct {
	name, key string
	units     int
}

// Resources is the fold of every resource stream and of the releases the
// execution streams imply. Apply never validates; CheckGrant says whether
// a grant is legal.
type Resources struct {
	byName map[string]*Resource
	held   map[string][]held // execution → what it holds
}

// NewResources returns the fold of an empty log.
func NewResources() *Resources {
	return &Resources{byName: map[string]*Resource{}, held: map[string][]held{}}
}

// Get returns resource name, or nil if the log never named it.
func (rs *Resources) Get(name string) *Resource { return rs.byName[name] }

// Names returns every resource the log named, sorted.
func (rs *Resources) Names() []string {
	out := make([]string, 0, len(rs.byName))
	for n := range rs.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Holds reports whether execution id holds units of resource name.
func (rs *Resources) Holds(id, name string) bool {
	for _, h := range rs.held[id] {
		if h.name == name {
			return true
		}
	}
	return false
}

// GetOrEmpty returns resource name, or an undefined one (version -1).
func (rs *Resources) GetOrEmpty(name string) *Resource { return rs.resource(name) }

// Define sets resource name's limit outside a log (a fold of definitions
// gathered elsewhere, to check policies against).
func (rs *Resources) Define(name string, l ResourceLimit) {
	r := rs.resource(name)
	r.limit, r.defined = l, true
}

func (rs *Resources) resource(name string) *Resource {
	r := rs.byName[name]
	if r == nil {
		r = &Resource{Name: name, version: -1, keys: map[string]*ResourceKey{}}
		rs.byName[name] = r
	}
	return r
}

// Apply folds one decoded event; env gives its stream, version and time.
func (rs *Resources) Apply(env *Envelope, ev Event) {
	switch e := ev.(type) {
	case ResourceDefined:
		_, name := SplitStream(env.Stream)
		r := rs.resource(name)
		r.version, r.limit, r.defined = int64(env.Version), e.ResourceLimit, true
		r.trim(env.Time)
	case ResourceDeleted:
		_, name := SplitStream(env.Stream)
		r := rs.resource(name)
		r.version, r.defined = int64(env.Version), false
	case ResourceGranted:
		_, name := SplitStream(env.Stream)
		r := rs.resource(name)
		r.version = int64(env.Version)
		if rs.Holds(e.Execution, name) {
			return // (a log that says so twice: it holds once)
		}
		k := r.keys[e.Key]
		if k == nil {
			k = &ResourceKey{Key: e.Key, holders: map[string]int{}}
			r.keys[e.Key] = k
		}
		k.holders[e.Execution] = e.Units
		k.InUse += e.Units
		rs.held[e.Execution] = append(rs.held[e.Execution], held{name, e.Key, e.Units})
		if r.limit.RateLimit != nil {
			at := env.Time
			if n := len(k.grants); n > 0 && at.Before(k.grants[n-1]) {
				at = k.grants[n-1] // (a clock that went back: keep the list sorted)
			}
			k.grants = append(k.grants, at)
			r.trim(at)
		}
	case ExecutionRetryScheduled, ExecutionRejected, ExecutionCompleted, ExecutionFailed, ExecutionTimedOut, ExecutionCancelled:
		_, id := SplitStream(env.Stream)
		rs.Release(id)
	}
}

// Release frees every unit execution id holds (it ended, or backs off).
func (rs *Resources) Release(id string) {
	if len(rs.held) == 0 {
		return
	}
	hs, ok := rs.held[id]
	if !ok {
		return
	}
	delete(rs.held, id)
	for _, h := range hs {
		r := rs.byName[h.name]
		k := r.keys[h.key]
		delete(k.holders, id)
		k.InUse -= h.units
		if len(k.holders) == 0 && len(k.grants) == 0 {
			delete(r.keys, h.key)
		}
	}
}

// trim drops grant times that left every key's rate window at log time now.
func (r *Resource) trim(now time.Time) {
	win := r.limit.rateWindow()
	for key, k := range r.keys {
		i := 0
		if win == 0 {
			i = len(k.grants)
		} else {
			cutoff := now.Add(-win)
			for i < len(k.grants) && !k.grants[i].After(cutoff) {
				i++
			}
		}
		if i > 0 {
			k.grants = append(k.grants[:0], k.grants[i:]...)
		}
		if len(k.holders) == 0 && len(k.grants) == 0 {
			delete(r.keys, key)
		}
	}
}

// CheckNeeds checks a policy's resources against the resources defined:
// each exists and allows that many units at once.
func (rs *Resources) CheckNeeds(ns []ResourceNeed) error {
	for _, n := range ns {
		r := rs.byName[n.Name]
		if r == nil || !r.defined {
			return fmt.Errorf("%w: resource %q is not defined", ErrInvalidPolicy, n.Name)
		}
		if m := r.limit.MaxConcurrent; m > 0 && n.Units > m {
			return fmt.Errorf("%w: units %d of resource %q are above its max_concurrent %d", ErrInvalidPolicy, n.Units, n.Name, m)
		}
	}
	return nil
}

// CheckGrant reports whether granting units of resource name, key value
// key, to execution id at log time at keeps the resource's limits: nil, or
// an error naming what it breaks. (The order rule is the audit's, which
// knows the queues: see projections.)
func (rs *Resources) CheckGrant(name, id, key string, units int, at time.Time) error {
	r := rs.byName[name]
	if r == nil || !r.defined {
		return fmt.Errorf("grant of %s: resource %q is not defined", id, name)
	}
	if rs.Holds(id, name) {
		return fmt.Errorf("grant of %s: it holds resource %q already", id, name)
	}
	u, g := r.Room(key, at)
	if units > u {
		return fmt.Errorf("grant of %s takes %d units of resource %q key %q: %d in use, max_concurrent %d", id, units, name, key, r.limit.MaxConcurrent-u, r.limit.MaxConcurrent)
	}
	if g <= 0 {
		rl := r.limit.RateLimit
		return fmt.Errorf("grant of %s at %s exceeds the rate limit of resource %q key %q (%d per %gs)", id, at.Format(time.RFC3339Nano), name, key, rl.Count, rl.PerSeconds)
	}
	return nil
}

// ResourceSnapshot is one Resource's content, for snapshots and checkpoints.
type ResourceSnapshot struct {
	Name    string
	Limit   ResourceLimit
	Defined bool
	Version int64
	Keys    []ResourceKeySnapshot // by key
}

// ResourceKeySnapshot is one key value's holders and recent grant times.
type ResourceKeySnapshot struct {
	Key     string
	Holders []ResourceHolder // by execution
	Grants  []time.Time
}

// ResourceHolder is an execution holding units.
type ResourceHolder struct {
	Execution string
	Units     int
}

// Snapshot returns every resource's content, by name.
func (rs *Resources) Snapshot() []ResourceSnapshot {
	var out []ResourceSnapshot
	for _, name := range rs.Names() {
		r := rs.byName[name]
		sn := ResourceSnapshot{Name: name, Limit: r.limit, Defined: r.defined, Version: r.version}
		keys := make([]string, 0, len(r.keys))
		for k := range r.keys {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, key := range keys {
			k := r.keys[key]
			ks := ResourceKeySnapshot{Key: key, Grants: append([]time.Time(nil), k.grants...)}
			for id, u := range k.holders {
				ks.Holders = append(ks.Holders, ResourceHolder{id, u})
			}
			sort.Slice(ks.Holders, func(i, j int) bool { return ks.Holders[i].Execution < ks.Holders[j].Execution })
			sn.Keys = append(sn.Keys, ks)
		}
		out = append(out, sn)
	}
	return out
}

// RestoreResources returns the fold sn describes.
func RestoreResources(sn []ResourceSnapshot) *Resources {
	rs := NewResources()
	for _, s := range sn {
		r := rs.resource(s.Name)
		r.limit, r.defined, r.version = s.Limit, s.Defined, s.Version
		for _, ks := range s.Keys {
			k := &ResourceKey{Key: ks.Key, holders: map[string]int{}, grants: append([]time.Time(nil), ks.Grants...)}
			for _, h := range ks.Holders {
				k.holders[h.Execution] = h.Units
				k.InUse += h.Units
				rs.held[h.Execution] = append(rs.held[h.Execution], held{s.Name, ks.Key, h.Units})
			}
			r.keys[ks.Key] = k
		}
	}
	return rs
}
