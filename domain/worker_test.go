package domain_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/valuediff"
)

// workerLog applies worker events at consecutive versions and given times.
type workerLog struct {
	t    *testing.T
	w    *domain.Worker
	v    uint64
	next time.Time
}

// at sets the log time of the next event.
func (l *workerLog) at(t time.Time) *workerLog {
	l.next = t
	return l
}

func (l *workerLog) must(ev domain.Event, err error) {
	l.t.Helper()
	if err != nil {
		l.t.Fatalf("%s refused: %v", ev.EventType(), err)
	}
	l.w.Apply(ev, l.v, l.next)
	l.v++
}

func TestWorkerRegister(t *testing.T) {
	t.Parallel()
	w := domain.NewWorker("w1")
	if w.ID() != "w1" || w.Status() != domain.WorkerUnknown || w.Version() != -1 || w.Accepting() {
		t.Fatalf("new worker: %q %q %d %v", w.ID(), w.Status(), w.Version(), w.Accepting())
	}
	for _, tc := range []struct {
		name        string
		incarnation string
		slots       int
	}{
		{"no incarnation", "", 1},
		{"no slots", "i1", 0},
		{"negative slots", "i1", -1},
		{"too many slots", "i1", 100_001},
	} {
		if _, err := w.Register(tc.incarnation, tc.slots, nil, "", 0); !errors.Is(err, domain.ErrInvalidRequest) {
			t.Errorf("Register %s = %v, want ErrInvalidRequest", tc.name, err)
		}
	}
	ev, err := w.Register("i1", 100_000, []string{"core.noop"}, "host", 42)
	if err != nil {
		t.Fatal(err)
	}
	want := domain.WorkerRegistered{Slots: 100_000, Runners: []string{"core.noop"}, Host: "host", PID: 42, Incarnation: "i1"}
	if d := valuediff.Diff(ev, want); d != "" {
		t.Fatalf("Register = %+v, want %+v", ev, want)
	}
	l := &workerLog{t: t, w: w}
	l.at(t0).must(ev, err)
	if w.Status() != domain.WorkerActive || !w.Accepting() || w.Incarnation() != "i1" || w.Slots() != 100_000 ||
		!slices.Equal(w.Runners(), []string{"core.noop"}) || !w.LastSeen().Equal(t0) || w.Version() != 0 {
		t.Fatalf("after register: %q accepting %v incarnation %q slots %d runners %v last seen %v version %d",
			w.Status(), w.Accepting(), w.Incarnation(), w.Slots(), w.Runners(), w.LastSeen(), w.Version())
	}
}

func TestWorkerCommandsByStatus(t *testing.T) {
	t.Parallel()
	// Each case builds a worker stream, then tries every command of
	// incarnation "i1" (or the current one, for DeclareLost with force).
	tests := []struct {
		name  string
		build func(l *workerLog)
		want  error // for Heartbeat, Drain, Stop by i1 and forced DeclareLost
	}{
		{"unregistered", func(*workerLog) {}, domain.ErrWorkerNotRegistered},
		{"active", func(l *workerLog) { l.at(t0).must(l.w.Register("i1", 1, nil, "", 0)) }, nil},
		{"draining", func(l *workerLog) {
			l.at(t0).must(l.w.Register("i1", 1, nil, "", 0))
			l.at(t0).must(l.w.Drain("i1"))
		}, nil},
		{"stopped", func(l *workerLog) {
			l.at(t0).must(l.w.Register("i1", 1, nil, "", 0))
			l.at(t0).must(l.w.Stop("i1"))
		}, domain.ErrWorkerReplaced},
		{"lost", func(l *workerLog) {
			l.at(t0).must(l.w.Register("i1", 1, nil, "", 0))
			l.at(t0).must(l.w.DeclareLost(t0, time.Minute, true, "gone"))
		}, domain.ErrWorkerReplaced},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := &workerLog{t: t, w: domain.NewWorker("w1")}
			tc.build(l)
			w := l.w
			_, hb := w.Heartbeat("i1", 0)
			_, dr := w.Drain("i1")
			_, st := w.Stop("i1")
			_, lost := w.DeclareLost(t0, time.Minute, true, "x")
			for name, err := range map[string]error{"Heartbeat": hb, "Drain": dr, "Stop": st, "DeclareLost(force)": lost} {
				if tc.want == nil && err != nil {
					t.Errorf("%s: %v", name, err)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Errorf("%s = %v, want %v", name, err, tc.want)
				}
			}
			// Another incarnation's commands are refused in every state.
			if _, err := w.Heartbeat("i0", 0); err == nil {
				t.Error("Heartbeat of another incarnation accepted")
			}
		})
	}
}

func TestWorkerDeclareLost(t *testing.T) {
	t.Parallel()
	w := domain.NewWorker("w1")
	l := &workerLog{t: t, w: w}
	l.at(t0).must(w.Register("i1", 2, nil, "", 0))
	hb := t0.Add(40 * time.Second)
	l.at(hb).must(w.Heartbeat("i1", 1))
	if !w.LastSeen().Equal(hb) {
		t.Fatalf("LastSeen %v after a heartbeat at %v", w.LastSeen(), hb)
	}
	lease := 30 * time.Second
	// An idle incarnation owes nothing: its lease never lapses, however
	// quiet the log.
	for _, now := range []time.Time{hb.Add(lease), hb.Add(24 * time.Hour)} {
		if _, err := w.DeclareLost(now, lease, false, "silent"); !errors.Is(err, domain.ErrLeaseNotExpired) {
			t.Errorf("DeclareLost of an idle worker at %v = %v, want ErrLeaseNotExpired", now, err)
		}
	}
	// Handed work an hour later: the lease counts from the handoff, not
	// from its last event. A later handoff, or one to another incarnation,
	// does not move the start of the debt.
	handed := hb.Add(time.Hour)
	w.Owe("i1", handed)
	w.Owe("i1", handed.Add(10*time.Second))
	w.Owe("i0", handed.Add(-time.Minute))
	if since, owes := w.OwedSince(); !owes || !since.Equal(handed) {
		t.Fatalf("OwedSince = %v %v, want %v", since, owes, handed)
	}
	for _, now := range []time.Time{hb.Add(lease), handed, handed.Add(lease - time.Nanosecond)} {
		if _, err := w.DeclareLost(now, lease, false, "silent"); !errors.Is(err, domain.ErrLeaseNotExpired) {
			t.Errorf("DeclareLost at %v = %v, want ErrLeaseNotExpired", now, err)
		}
	}
	// A sign of life pays the debt.
	paid := w.Clone()
	(&workerLog{t: t, w: paid, v: 2}).at(handed.Add(5 * time.Second)).must(paid.Heartbeat("i1", 0))
	if _, owes := paid.OwedSince(); owes {
		t.Fatal("a heartbeat did not pay the debt")
	}
	if _, err := paid.DeclareLost(handed.Add(lease), lease, false, "silent"); !errors.Is(err, domain.ErrLeaseNotExpired) {
		t.Errorf("DeclareLost after the debt was paid = %v, want ErrLeaseNotExpired", err)
	}
	ev, err := w.DeclareLost(handed.Add(lease), lease, false, strings.Repeat("r", domain.MaxReasonLen+5))
	if err != nil {
		t.Fatalf("DeclareLost when the lease has passed: %v", err)
	}
	if ev.Incarnation != "i1" || !ev.LastSeen.Equal(hb) || !ev.OwedSince.Equal(handed) || ev.LeaseMillis != lease.Milliseconds() ||
		len(ev.Reason) > domain.MaxReasonLen+len("…") {
		t.Fatalf("DeclareLost = %+v", ev)
	}
	// The audit's check of the verdict, by log time.
	if d := w.CheckLost(ev, handed.Add(lease)); d != "" {
		t.Errorf("CheckLost of a lawful verdict: %s", d)
	}
	if d := w.CheckLost(ev, handed.Add(lease-time.Millisecond)); d == "" {
		t.Error("CheckLost of a verdict before the lease passed found nothing")
	}
	if d := paid.CheckLost(ev, handed.Add(time.Hour)); d == "" {
		t.Error("CheckLost of a verdict on a worker that owed nothing found nothing")
	}
	if d := paid.CheckLost(domain.WorkerLost{Incarnation: "i1"}, handed); d != "" {
		t.Errorf("CheckLost of a forced verdict: %s", d)
	}
	// force decides without the lease.
	if _, err := w.DeclareLost(hb, lease, true, "previous run"); err != nil {
		t.Fatalf("forced DeclareLost: %v", err)
	}
	l.at(hb.Add(time.Hour)).must(ev, err)
	if w.Status() != domain.WorkerLostStatus || w.Accepting() || !w.LastSeen().Equal(hb) {
		t.Fatalf("after lost: %q accepting %v last seen %v", w.Status(), w.Accepting(), w.LastSeen())
	}
	if _, err := w.DeclareLost(hb.Add(2*time.Hour), lease, false, "again"); !errors.Is(err, domain.ErrWorkerReplaced) {
		t.Fatalf("DeclareLost twice = %v, want ErrWorkerReplaced", err)
	}
	// The lost incarnation comes back: refused. A new one registers.
	if _, err := w.Heartbeat("i1", 0); !errors.Is(err, domain.ErrWorkerReplaced) {
		t.Fatalf("heartbeat of the lost incarnation = %v, want ErrWorkerReplaced", err)
	}
	l.at(hb.Add(2 * time.Hour)).must(w.Register("i2", 4, nil, "", 0))
	if w.Status() != domain.WorkerActive || w.Incarnation() != "i2" || w.Slots() != 4 {
		t.Fatalf("after re-registering: %q %q %d", w.Status(), w.Incarnation(), w.Slots())
	}
	if _, err := w.Drain("i1"); !errors.Is(err, domain.ErrWorkerReplaced) {
		t.Fatalf("drain by the old incarnation = %v, want ErrWorkerReplaced", err)
	}
}

// TestWorkerApplyIgnoresOldIncarnations: events of a replaced incarnation
// that reach the log (a race) do not change the current one.
func TestWorkerApplyIgnoresOldIncarnations(t *testing.T) {
	t.Parallel()
	w := domain.NewWorker("w1")
	l := &workerLog{t: t, w: w}
	l.at(t0).must(w.Register("i1", 1, nil, "", 0))
	l.at(t0.Add(time.Second)).must(w.Register("i2", 1, nil, "", 0))
	seen := w.LastSeen()
	for _, ev := range []domain.Event{
		domain.WorkerHeartbeat{Incarnation: "i1"},
		domain.WorkerDraining{Incarnation: "i1"},
		domain.WorkerStopped{Incarnation: "i1"},
		domain.WorkerLost{Incarnation: "i1"},
	} {
		l.at(t0.Add(time.Hour)).must(ev, nil)
		if w.Status() != domain.WorkerActive || !w.LastSeen().Equal(seen) || w.Incarnation() != "i2" {
			t.Fatalf("%s of the old incarnation changed the worker: %q last seen %v", ev.EventType(), w.Status(), w.LastSeen())
		}
	}
	if w.Version() != 5 {
		t.Fatalf("Version %d, want 5", w.Version())
	}
	// Draining and stopping the current incarnation.
	l.at(t0.Add(2 * time.Hour)).must(w.Drain("i2"))
	if w.Status() != domain.WorkerDrainingStatus || w.Accepting() || !w.LastSeen().Equal(t0.Add(2*time.Hour)) {
		t.Fatalf("after drain: %q accepting %v", w.Status(), w.Accepting())
	}
	l.at(t0.Add(3 * time.Hour)).must(w.Stop("i2"))
	if w.Status() != domain.WorkerStoppedStatus || w.Accepting() {
		t.Fatalf("after stop: %q", w.Status())
	}
}
