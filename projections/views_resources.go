package projections

import (
	"sort"

	"github.com/turnstile/turnstile/domain"
)

// ResourceView is a resource as the read model holds it: its limit, units
// in use and executions waiting for it, in all and per key value.
type ResourceView struct {
	Name    string
	Limit   domain.ResourceLimit
	InUse   int
	Waiting int
	Keys    []ResourceKeyView // busiest first (units in use, then waiting), then by key
}

// ResourceKeyView is one key value's use of a resource.
type ResourceKeyView struct {
	Key            string
	InUse, Waiting int
}

// Resource returns a resource that exists (defined and not deleted).
// Waiting counts the executions waiting in the queues of the actions
// whose policies need it (each under the key value its input gives): a
// scan of those queues.
func (v *Views) Resource(name string) (ResourceView, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.resource(name)
}

func (v *Views) resource(name string) (ResourceView, bool) {
	r := v.st.Resources.Get(name)
	if r == nil || !r.Defined() {
		return ResourceView{}, false
	}
	out := ResourceView{Name: name, Limit: r.Limit()}
	keys := map[string]*ResourceKeyView{}
	kv := func(k string) *ResourceKeyView {
		if keys[k] == nil {
			keys[k] = &ResourceKeyView{Key: k}
		}
		return keys[k]
	}
	for _, k := range r.Keys() {
		if k.InUse > 0 {
			kv(k.Key).InUse = k.InUse
			out.InUse += k.InUse
		}
	}
	for _, ref := range v.st.Queues.Refs() {
		q := v.st.Queues.Get(ref)
		if !needs(q.Policy(), name) {
			continue
		}
		for _, key := range q.Keys() {
			q.Key(key).EachWaiting(func(w domain.Waiter) bool {
				k := ""
				if x, ok := v.st.Queues.Waiting(w.Execution); ok {
					k = r.Limit().KeyValue(x.Input())
				}
				kv(k).Waiting++
				out.Waiting++
				return true
			})
		}
	}
	for _, k := range keys {
		out.Keys = append(out.Keys, *k)
	}
	sort.Slice(out.Keys, func(i, j int) bool {
		a, b := out.Keys[i], out.Keys[j]
		if a.InUse != b.InUse {
			return a.InUse > b.InUse
		}
		if a.Waiting != b.Waiting {
			return a.Waiting > b.Waiting
		}
		return a.Key < b.Key
	})
	return out, true
}

// ResourceLimit returns the limit of a resource that exists.
func (v *Views) ResourceLimit(name string) (domain.ResourceLimit, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	r := v.st.Resources.Get(name)
	if r == nil || !r.Defined() {
		return domain.ResourceLimit{}, false
	}
	return r.Limit(), true
}

// Resources returns every resource that exists, sorted by name.
func (v *Views) Resources() []ResourceView {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := []ResourceView{}
	for _, name := range v.st.Resources.Names() {
		if r, ok := v.resource(name); ok {
			out = append(out, r)
		}
	}
	return out
}

// ResourceUsers returns the actions whose policies need resource name, sorted.
func (v *Views) ResourceUsers(name string) []string {
	v.mu.RLock()
	defer v.mu.RUnlock()
	var out []string
	for ref, a := range v.st.Actions {
		if a.Defined() && needs(a.Policy(), name) {
			out = append(out, ref)
		}
	}
	sort.Strings(out)
	return out
}

func needs(p domain.Policy, name string) bool {
	for _, n := range p.Resources {
		if n.Name == name {
			return true
		}
	}
	return false
}
