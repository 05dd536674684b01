package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/services/executor"
)

// TestStandbyFoldsThenTakesOver: a standby executor follows the log and
// writes nothing; once the active one stops and the standby is made active,
// it decides on the fold it kept and the rest of the work gets done.
func TestStandbyFoldsThenTakesOver(t *testing.T) {
	bothLogs(t, testStandbyFoldsThenTakesOver)
}

func testStandbyFoldsThenTakesOver(t *testing.T, single bool) {
	store := newStore(single)
	defer func() { _ = store.Close() }()
	s := startSystem(t, store, 1, 2, 4)
	log := quietLogger()
	standby, err := executor.New(executor.Config{Store: store, Logger: log, Name: "standby", Tick: 20 * time.Millisecond, Standby: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := standby.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer standby.Stop()
	if standby.Active() {
		t.Fatal("a standby executor says it is active")
	}
	limits := map[string]int{"sb.one": 1, "sb.three": 3}
	for ref, l := range limits {
		define(t, s.cmds, ref, "core.sleep", l)
	}
	requestAll(t, s.cmds, []string{"sb.one", "sb.three"}, 200, 4, `{"seconds":0.001}`)
	s.waitIdle(t, 60*time.Second)
	head, err := store.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	waitfor.That(t, "the standby to fold the whole log", func() bool { return standby.Position() >= head })
	if !standby.Ready() || standby.Position() < head {
		t.Fatalf("the standby folded to %d (ready %v), the log is at %d", standby.Position(), standby.Ready(), head)
	}
	if n := writtenBy(t, store, "standby"); n != 0 {
		t.Fatalf("the standby wrote %d events while standing by", n)
	}

	// The active executor goes; the standby takes over.
	s.executors[0].Stop()
	standby.SetActive(true)
	s.executors = []*executor.Executor{standby}
	requestAll(t, s.cmds, []string{"sb.one", "sb.three"}, 200, 4, `{"seconds":0.001}`)
	s.waitIdle(t, 60*time.Second)
	audit(t, store, 400)
	grantOrderMatchesRequests(t, store, limits)
	if n := writtenBy(t, store, "standby"); n == 0 {
		t.Fatal("the standby, made active, wrote nothing")
	}
	standby.SetActive(false)
	if standby.Active() {
		t.Fatal("SetActive(false) left it active")
	}
}

// writtenBy counts the events executor writer wrote.
func writtenBy(t *testing.T, store eventstore.Store, writer string) int {
	t.Helper()
	evs, err := store.ReadAll(context.Background(), 0, 10_000_000)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for i := range evs {
		if evs[i].Owner == domain.OwnerExecutor && evs[i].Writer == writer {
			n++
		}
	}
	return n
}
