package projections_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// TestAuditResources: the audit checks every resource.granted against the
// resource's limit per key value, its rate, the key value the input gives,
// the units the policy names and the order rule, and every slot taken for
// its units. Each mutated log breaks one rule and must be named; the
// lawful one is clean. Catches: an audit blind to over-grants (by one), a
// wrong key, wrong units, a waiter passed while ready, a slot taken
// without its units, or a unit released twice (the over-grant it allows).
func TestAuditResources(t *testing.T) {
	t.Parallel()
	run := func(mutate string) *projections.AuditReport {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		store := memstore.New(memstore.Options{Clock: func() time.Time { return now }})
		w := logWriter{t, store}
		lim := domain.ResourceLimit{MaxConcurrent: 2, KeyField: "t"}
		if mutate == "rate" {
			lim = domain.ResourceLimit{RateLimit: &domain.RateLimit{Count: 1, PerSeconds: 60}, KeyField: "t"}
		}
		// A worker that serves every runner: the waiters are ready.
		w.put(domain.WorkerStream("w0"), domain.OwnerWorker, "w0", domain.WorkerRegistered{Slots: 8, Incarnation: "i0"})
		w.put(domain.ResourceStream("gpu"), domain.OwnerAPI, "", domain.ResourceDefined{ResourceLimit: lim})
		for ref, units := range map[string]int{"big": 2, "small": 1} {
			p := domain.Policy{Ref: ref, Runner: "core.noop", MaxConcurrent: 5, ConcurrencyKey: "t", Resources: []domain.ResourceNeed{{Name: "gpu", Units: units}}}.WithDefaults()
			w.put(domain.ActionStream(ref), domain.OwnerAPI, "", domain.ActionDefined{Policy: p})
		}
		req := func(id, ref, key string) {
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x",
				domain.ExecutionRequested{Action: ref, Input: json.RawMessage(`{"t":"` + key + `"}`)})
		}
		qkey := func(id string) string {
			if id == "z1" {
				return "zeta"
			}
			return "acme"
		}
		grant := func(id, ref, key string, units int, withUnits bool) {
			seen, _ := store.Head(context.Background())
			w.put(domain.QueueStream(ref), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: id, ConcurrencyKey: qkey(id), Seen: seen})
			if withUnits {
				w.put(domain.ResourceStream("gpu"), domain.OwnerExecutor, "x", domain.ResourceGranted{Execution: id, Key: key, Units: units, Seen: seen})
			}
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: ref, Runner: "core.noop"})
		}
		req("s1", "small", "acme")
		req("b1", "big", "acme")
		req("s2", "small", "acme")
		req("z1", "small", "zeta")
		switch mutate {
		case "over-grant by one":
			grant("s1", "small", "acme", 1, true)
			grant("b1", "big", "acme", 2, true)
		case "wrong key":
			grant("s1", "small", "zeta", 1, true)
		case "wrong units":
			grant("s1", "small", "acme", 2, true)
		case "order skipped":
			grant("s1", "small", "acme", 1, true)
			grant("s2", "small", "acme", 1, true) // passes b1, ready for acme before it
		case "no units":
			grant("s1", "small", "acme", 1, false)
		case "rate":
			grant("s1", "small", "acme", 1, true)
			w.run("s1", "w1")
			grant("b1", "big", "acme", 2, true)
		default:
			grant("s1", "small", "acme", 1, true)
			grant("z1", "small", "zeta", 1, true) // another key value: not held back by b1
			w.run("s1", "w1")
			grant("b1", "big", "acme", 2, true)
			w.run("b1", "w1")
			grant("s2", "small", "acme", 1, true)
			w.run("s2", "w1")
			w.run("z1", "w1")
		}
		return audit(t, store)
	}
	if rep := run(""); !rep.OK() || rep.Ended != 4 {
		t.Fatalf("lawful: %+v", rep)
	}
	for mutate, want := range map[string]string{
		"over-grant by one": `2 units of resource "gpu" key "acme": 1 in use, max_concurrent 2`,
		"wrong key":         `holds key "zeta" of resource "gpu"; its input's "t" gives "acme"`,
		"wrong units":       `takes 2 units of resource "gpu"; the policy of "small" names 1`,
		"order skipped":     `grant of s2 passes b1`,
		"no units":          `took its slot without units of resource "gpu"`,
		"rate":              `exceeds the rate limit of resource "gpu" key "acme"`,
	} {
		found := false
		var got []string
		for _, v := range run(mutate).Violations {
			found = found || (v.Rule == projections.RuleResource && strings.Contains(v.Detail, want))
			got = append(got, v.Rule+": "+v.Detail)
		}
		if !found {
			t.Errorf("%s: no resource violation saying %q; got %q", mutate, want, got)
		}
	}
}

// TestCheckpointKeepsResourceStreams: a checkpoint keeps every resource
// stream in the live log (grants append to it after the checkpoint).
// Catches: a resource stream trimmed away, its version lost, every later
// grant that needs it failing on its fence.
func TestCheckpointKeepsResourceStreams(t *testing.T) {
	t.Parallel()
	st := projections.NewState()
	env, err := codec.Events.Encode(uuid.New(), domain.ResourceDefined{ResourceLimit: domain.ResourceLimit{MaxConcurrent: 1}}, domain.OwnerAPI, "t")
	if err != nil {
		t.Fatal(err)
	}
	env.Stream, env.Time = domain.ResourceStream("gpu"), time.Now()
	st.ApplyDecoded(&env, domain.ResourceDefined{ResourceLimit: domain.ResourceLimit{MaxConcurrent: 1}})
	if keep := projections.CheckpointKeep(st.Snapshot()); !slices.Contains(keep, domain.ResourceStream("gpu")) {
		t.Fatalf("keep %v lacks resource-gpu", keep)
	}
}
