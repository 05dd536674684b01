package sim

import (
	"fmt"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// TestModelRound: the checker's own model of the total limit and the round
// robin (not domain's): a grant over max_concurrent_total, and one that
// passes a key value with a waiter a second time, are violations; serving
// the values in turn is not. Catches: a checker that does not model the
// total (BugIgnoreTotal would then be found only by domain's CheckGrant).
func TestModelRound(t *testing.T) {
	bad := func(rule, format string, args ...any) *violation {
		return &violation{Rule: rule, Detail: fmt.Sprintf(format, args...)}
	}
	newAction := func() *actionModel {
		a := &actionModel{policy: domain.Policy{MaxConcurrent: 5, MaxConcurrentTotal: 2}, keys: map[string]*keyModel{}}
		for _, k := range []string{"a", "b", "c"} {
			a.key(k).waiting = []string{k + "1", k + "2", k + "3"}
		}
		return a
	}
	grant := func(a *actionModel, id, key string) *violation {
		v := a.modelRound(id, key, bad)
		if v == nil {
			km := a.keys[key]
			km.waiting = km.waiting[1:]
			km.active[id] = true
			a.active++
		}
		return v
	}
	end := func(a *actionModel, id, key string) {
		delete(a.keys[key].active, id)
		a.active--
	}
	a := newAction()
	for _, g := range [][2]string{{"a1", "a"}, {"b1", "b"}} {
		if v := grant(a, g[0], g[1]); v != nil {
			t.Fatal(v)
		}
	}
	if v := grant(a, "c1", "c"); v == nil || v.Rule != "total" {
		t.Fatalf("a third grant with max_concurrent_total 2: %v", v)
	}
	end(a, "a1", "a")
	end(a, "b1", "b")
	for _, g := range [][2]string{{"c1", "c"}, {"a2", "a"}} {
		if v := grant(a, g[0], g[1]); v != nil {
			t.Fatal(v)
		}
	}
	end(a, "c1", "c")
	end(a, "a2", "a")
	// From after a: b is next; passing it once (a stale decision) is
	// allowed, twice is not.
	if v := grant(a, "c2", "c"); v != nil {
		t.Fatal(v)
	}
	end(a, "c2", "c")
	if v := grant(a, "a3", "a"); v != nil {
		t.Fatal(v)
	}
	if v := grant(a, "c3", "c"); v == nil || v.Rule != "round_robin" || !strings.Contains(v.Detail, `"b"`) {
		t.Fatalf("passing b twice: %v", v)
	}
}
