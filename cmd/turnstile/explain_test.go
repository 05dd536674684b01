package main

import (
	"strings"
	"testing"

	"github.com/turnstile/turnstile/client/wire"
)

// TestClientExplain: "turnstile exec explain ID" says why a waiter waits
// (its action paused) and, once it ran, that it waits for nothing; --json
// gives the server's document; an unknown id exits 4.
func TestClientExplain(t *testing.T) {
	t.Parallel()
	srv := startTestServer(t)
	mustCLI(t, srv, "actions", "create", "--ref", "demo.held", "--runner", "core.noop")
	mustCLI(t, srv, "actions", "pause", "demo.held")
	id := strings.TrimSpace(mustCLI(t, srv, "exec", "request", "demo.held"))
	out := mustCLI(t, srv, "exec", "explain", id)
	if !field("status", "requested").MatchString(out) || !field("waiting_for", "paused").MatchString(out) ||
		!field("queue_place", "1").MatchString(out) || !field("ahead", "0").MatchString(out) {
		t.Fatalf("exec explain of a paused waiter:\n%s", out)
	}
	e := decode[wire.Explanation](t, mustCLI(t, srv, "exec", "explain", id, "--json"))
	if e.Status != "requested" || e.QueuePlace != 1 || e.Position != 1 || len(e.WaitingFor) == 0 || e.WaitingFor[0] != "paused" {
		t.Fatalf("exec explain --json: %+v", e)
	}
	mustCLI(t, srv, "actions", "resume", "demo.held")
	mustCLI(t, srv, "exec", "wait", id)
	if out := mustCLI(t, srv, "exec", "explain", id); !field("waiting_for", "-").MatchString(out) {
		t.Fatalf("exec explain once completed:\n%s", out)
	}
	wantExit(t, srv, exitNotFound, "no execution", "exec", "explain", "00000000-0000-0000-0000-000000000000")
}
