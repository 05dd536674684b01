package domain_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// resLog builds a hand-written log for the resources fold.
type resLog struct {
	rs  *domain.Resources
	pos uint64
	ver map[string]uint64
}

func newResLog() *resLog { return &resLog{rs: domain.NewResources(), ver: map[string]uint64{}} }

func (l *resLog) add(stream string, at time.Time, ev domain.Event) {
	l.pos++
	v := l.ver[stream]
	l.ver[stream]++
	l.rs.Apply(&domain.Envelope{Stream: stream, Version: v, Position: l.pos, Time: at}, ev)
}

func (l *resLog) define(name string, lim domain.ResourceLimit) {
	l.add(domain.ResourceStream(name), t0, domain.ResourceDefined{ResourceLimit: lim})
}

func (l *resLog) grant(name, id, key string, units int, at time.Time) error {
	err := l.rs.CheckGrant(name, id, key, units, at)
	l.add(domain.ResourceStream(name), at, domain.ResourceGranted{Execution: id, Key: key, Units: units})
	return err
}

func TestResourceMaxConcurrentPerKeyAndRelease(t *testing.T) {
	t.Parallel()
	l := newResLog()
	l.define("gpu", domain.ResourceLimit{MaxConcurrent: 3, KeyField: "tenant"})
	if err := l.grant("gpu", "a", "acme", 2, t0); err != nil {
		t.Fatal(err)
	}
	if err := l.rs.CheckGrant("gpu", "b", "acme", 2, t0); err == nil || !strings.Contains(err.Error(), "max_concurrent 3") {
		t.Fatalf("2 more units of acme with 2 of 3 held: %v, want refused by max_concurrent", err)
	}
	if err := l.grant("gpu", "c", "acme", 1, t0); err != nil {
		t.Fatalf("the third unit: %v", err)
	}
	if err := l.grant("gpu", "d", "other", 3, t0); err != nil {
		t.Fatalf("another key value has its own limit: %v", err)
	}
	r := l.rs.Get("gpu")
	if got := r.Key("acme").InUse; got != 3 {
		t.Fatalf("acme in use %d, want 3", got)
	}
	if err := l.rs.CheckGrant("gpu", "a", "acme", 1, t0); err == nil {
		t.Fatal("a grant to a holder is legal, want refused")
	}
	l.add(domain.ExecutionStream("a"), t0, domain.ExecutionCompleted{})
	if got := r.Key("acme").InUse; got != 1 {
		t.Fatalf("acme in use %d after a ended, want 1", got)
	}
	l.add(domain.ExecutionStream("a"), t0, domain.ExecutionCompleted{}) // released twice: nothing more
	if got := r.Key("acme").InUse; got != 1 {
		t.Fatalf("acme in use %d after a second end, want 1", got)
	}
	l.add(domain.ExecutionStream("c"), t0, domain.ExecutionRetryScheduled{})
	if r.Key("acme") != nil {
		t.Fatalf("acme still listed with nothing held: %+v", r.Key("acme"))
	}
	if got := r.InUse(); got != 3 {
		t.Fatalf("in use %d, want 3 (other)", got)
	}
}

func TestResourceRateLimitPerKey(t *testing.T) {
	t.Parallel()
	l := newResLog()
	l.define("stripe", domain.ResourceLimit{RateLimit: &domain.RateLimit{Count: 2, PerSeconds: 1}, KeyField: "tenant"})
	for i, id := range []string{"a", "b"} {
		if err := l.grant("stripe", id, "acme", 1, t0.Add(time.Duration(i)*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.rs.CheckGrant("stripe", "c", "acme", 1, t0.Add(500*time.Millisecond)); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("third grant within the window: %v, want refused by the rate limit", err)
	}
	if err := l.rs.CheckGrant("stripe", "c", "other", 1, t0.Add(500*time.Millisecond)); err != nil {
		t.Fatalf("another key value: %v", err)
	}
	if err := l.rs.CheckGrant("stripe", "c", "acme", 1, t0.Add(time.Second)); err != nil {
		t.Fatalf("after the first grant left the window: %v", err)
	}
}

func TestResourceDeletedAndUnknownRefuseGrants(t *testing.T) {
	t.Parallel()
	l := newResLog()
	if err := l.rs.CheckGrant("x", "a", "", 1, t0); err == nil {
		t.Fatal("grant of an unknown resource is legal")
	}
	l.define("x", domain.ResourceLimit{MaxConcurrent: 1})
	l.add(domain.ResourceStream("x"), t0, domain.ResourceDeleted{})
	if err := l.rs.CheckGrant("x", "a", "", 1, t0); err == nil {
		t.Fatal("grant of a deleted resource is legal")
	}
	if err := l.rs.CheckNeeds([]domain.ResourceNeed{{Name: "x", Units: 1}}); err == nil || !errors.Is(err, domain.ErrInvalidPolicy) {
		t.Fatalf("a policy naming a deleted resource: %v", err)
	}
	l.define("y", domain.ResourceLimit{MaxConcurrent: 2})
	if err := l.rs.CheckNeeds([]domain.ResourceNeed{{Name: "y", Units: 3}}); err == nil || !strings.Contains(err.Error(), "above its max_concurrent 2") {
		t.Fatalf("units above max_concurrent: %v", err)
	}
	if err := l.rs.CheckNeeds([]domain.ResourceNeed{{Name: "y", Units: 2}}); err != nil {
		t.Fatal(err)
	}
}

func TestPolicyResourcesJSON(t *testing.T) {
	t.Parallel()
	var p domain.Policy
	if err := json.Unmarshal([]byte(`{"ref":"a","runner":"core.noop","resources":["stripe",{"name":"gpu","units":2}]}`), &p); err != nil {
		t.Fatal(err)
	}
	p = p.WithDefaults()
	want := []domain.ResourceNeed{{Name: "stripe", Units: 1}, {Name: "gpu", Units: 2}}
	if len(p.Resources) != 2 || p.Resources[0] != want[0] || p.Resources[1] != want[1] {
		t.Fatalf("resources %+v, want %+v", p.Resources, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(p)
	var back domain.Policy
	if err := json.Unmarshal(b, &back); err != nil || len(back.Resources) != 2 || back.Resources[1] != want[1] {
		t.Fatalf("round trip: %v %+v", err, back.Resources)
	}
	for _, bad := range []string{
		`{"ref":"a","runner":"r","resources":["x","x"]}`,
		`{"ref":"a","runner":"r","resources":[{"name":"x","units":-1}]}`,
		`{"ref":"a","runner":"r","resources":[""]}`,
	} {
		var p domain.Policy
		if err := json.Unmarshal([]byte(bad), &p); err != nil {
			continue
		}
		if err := p.WithDefaults().Validate(); err == nil {
			t.Errorf("%s: valid, want refused", bad)
		}
	}
	if p := (domain.Policy{Ref: "a", Runner: "r"}).WithDefaults(); p.Resources != nil {
		t.Fatalf("no resources: %v, want nil", p.Resources)
	}
}

// TestResourcesSnapshotRoundTrip: a snapshot of the fold restores to a
// fold that judges grants and releases as the original does. Catches:
// holders, grant times or a definition lost in a snapshot (an executor
// restarted from a checkpoint over-granting).
func TestResourcesSnapshotRoundTrip(t *testing.T) {
	t.Parallel()
	l := newResLog()
	l.define("gpu", domain.ResourceLimit{MaxConcurrent: 2, RateLimit: &domain.RateLimit{Count: 3, PerSeconds: 60}, KeyField: "t"})
	for _, id := range []string{"a", "b"} {
		if err := l.grant("gpu", id, "acme", 1, t0); err != nil {
			t.Fatal(err)
		}
	}
	back := domain.RestoreResources(l.rs.Snapshot())
	if err := back.CheckGrant("gpu", "c", "acme", 1, t0); err == nil {
		t.Fatal("restored fold grants a third unit of 2")
	}
	back.Release("a")
	if err := back.CheckGrant("gpu", "c", "acme", 1, t0); err != nil {
		t.Fatalf("after a release: %v", err)
	}
	back.Release("b")
	if r := back.Get("gpu"); r.Version() != l.rs.Get("gpu").Version() || r.Key("acme") == nil || r.Key("acme").InUse != 0 {
		t.Fatalf("restored: version %d, key %+v (grant times kept for the rate)", r.Version(), r.Key("acme"))
	}
	if _, g := back.Get("gpu").Room("acme", t0); g != 1 {
		t.Fatalf("rate room %d after 2 of 3 grants, want 1", g)
	}
}
