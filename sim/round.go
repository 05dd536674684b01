package sim

import (
	"sort"
)

// The checker's own model of max_concurrent_total and its round robin,
// written from the rule (docs/policies.md), not from domain/total.go:
//
//   - at a grant, fewer than max_concurrent_total executions of the action
//     hold a slot;
//   - the key values are served in turn: walking the sorted key values
//     cyclically from after the last granted one to the granted one, every
//     value passed that could have been granted (a waiter, and a free slot
//     of its own max_concurrent) is passed once more; passing a value a
//     second time before it is granted (or goes idle, or is passed while it
//     could not have been granted) breaks the round robin.

// idle starts a key value's round again when it has nothing waiting or
// running.
func (km *keyModel) idle() {
	if len(km.waiting) == 0 && len(km.active) == 0 {
		km.skips = 0
	}
}

// modelRound checks a grant of execution id in key value key against the
// total limit and the round robin, and folds it into the round.
func (a *actionModel) modelRound(id, key string, bad func(rule, format string, args ...any) *violation) *violation {
	total := a.policy.MaxConcurrentTotal
	if total <= 0 {
		a.lastKey, a.hasLast = key, true
		return nil
	}
	if a.active >= total {
		return bad("total", "%s is granted with %d running across the key values, max_concurrent_total %d", id, a.active, total)
	}
	keys := make([]string, 0, len(a.keys))
	for k := range a.keys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	i := 0
	if a.hasLast {
		i = sort.Search(len(keys), func(j int) bool { return keys[j] > a.lastKey })
	}
	var passed []*keyModel
	for n := 0; n < len(keys); n++ {
		k := keys[(i+n)%len(keys)]
		if k == key {
			break
		}
		km := a.keys[k]
		if len(km.waiting) > 0 && len(km.active) < a.policy.MaxConcurrent {
			if km.skips > 0 {
				return bad("round_robin", "%s (key %q) is granted passing key %q a second time in its round", id, key, k)
			}
			passed = append(passed, km)
		} else {
			km.skips = 0
		}
	}
	for _, km := range passed {
		km.skips++
	}
	a.keys[key].skips = 0
	a.lastKey, a.hasLast = key, true
	return nil
}
