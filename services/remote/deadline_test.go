package remote_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/services/remote"
)

// TestDeadlinesLeaveWithTheirRuns: a run's deadline is kept from its
// running report on, and leaves as soon as the run ends (not when it would
// have been due, an hour later by default), so the deadlines of a busy
// server stay as many as its runs in flight.
func TestDeadlinesLeaveWithTheirRuns(t *testing.T) {
	t.Parallel()
	mem := memstore.New(memstore.Options{})
	rs, err := remote.New(remote.Config{Store: mem, Lease: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := rs.Start(ctx); err != nil {
		t.Fatal(err)
	}
	<-rs.Started()
	t.Cleanup(func() {
		rs.Stop()
		cancel()
		_ = mem.Close()
	})
	f := &fixture{store: mem, rs: rs}
	ss := f.register(t)
	ids := []string{"x1", "x2", "x3"}
	for _, id := range ids {
		f.request(t, id)
		f.hand(t, id, ss.Incarnation())
	}
	f.pollFor(t, ss, ids...)
	for _, id := range ids {
		if _, err := rs.Report(ctx, ss, remote.Report{Execution: id, Attempt: 1, Status: remote.ReportRunning}); err != nil {
			t.Fatal(err)
		}
	}
	if n := rs.Deadlines(); n != 3 {
		t.Fatalf("%d deadlines for 3 runs started", n)
	}
	for _, id := range ids[:2] {
		if _, err := rs.Report(ctx, ss, remote.Report{Execution: id, Attempt: 1, Status: remote.ReportCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	waitfor.That(t, "1 deadline after 2 of 3 runs ended", func() bool { return rs.Deadlines() == 1 },
		waitfor.Note(func() string { return fmt.Sprintf("%d deadlines", rs.Deadlines()) }))
}
