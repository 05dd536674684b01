package projections_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// putBy appends ev for principal p (metadata given raw when p is nil).
func (w logWriter) putBy(stream string, owner domain.Owner, meta json.RawMessage, ev domain.Event) {
	w.t.Helper()
	env, err := codec.Events.Encode(uuid.New(), ev, owner, "api-1")
	if err != nil {
		w.t.Fatal(err)
	}
	env.Metadata = meta
	if _, err := w.store.Append(context.Background(), stream, eventstore.Any, env); err != nil {
		w.t.Fatal(err)
	}
}

func by(name, role string) json.RawMessage {
	return domain.PrincipalMetadata(domain.Principal{Name: name, Role: role})
}

// TestAuditPrincipals: the audit counts each principal's events, passes a
// client's cancellation of its own execution (a with_items child counts as
// its parent's) and an admin's of anyone's, and reports a client's
// cancellation of another's execution and metadata naming no valid
// principal, with the principal in the violation.
func TestAuditPrincipals(t *testing.T) {
	store := memstore.New(memstore.Options{})
	defer store.Close()
	w := logWriter{t: t, store: store}
	w.action("a", 2)
	cancel := domain.ExecutionCancelRequested{Reason: "x"}
	w.putBy(domain.ExecutionStream("x1"), domain.OwnerExecutor, by("alice", "client"), domain.ExecutionRequested{Action: "a"})
	w.putBy(domain.ExecutionStream("x1"), domain.OwnerAPI, by("alice", "client"), cancel) // her own: lawful
	w.putBy(domain.ExecutionStream("x2"), domain.OwnerExecutor, by("alice", "client"), domain.ExecutionRequested{Action: "a"})
	w.putBy(domain.ExecutionStream("x2"), domain.OwnerAPI, by("root", "admin"), cancel) // an admin: lawful
	w.putBy(domain.ExecutionStream("p"), domain.OwnerExecutor, by("alice", "client"), domain.ExecutionRequested{Action: "a", Items: 1, WithItems: []json.RawMessage{json.RawMessage(`1`)}})
	w.put(domain.ExecutionStream("p"), domain.OwnerExecutor, "x", domain.ExecutionRunning{})
	w.announce("p", 0, 1)
	child := w.child("p", "a", 0)
	w.putBy(domain.ExecutionStream(child), domain.OwnerAPI, by("alice", "client"), cancel) // her parent's child: lawful
	lawful, err := projections.Audit(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !lawful.OK() {
		t.Fatalf("lawful log: %+v", lawful.Violations)
	}
	if lawful.Principals["alice"] != 5 || lawful.Principals["root"] != 1 {
		t.Errorf("principals %v, want alice 5 and root 1", lawful.Principals)
	}

	w.putBy(domain.ExecutionStream("x3"), domain.OwnerExecutor, by("bob", "client"), domain.ExecutionRequested{Action: "a"})
	w.putBy(domain.ExecutionStream("x3"), domain.OwnerAPI, by("alice", "client"), cancel)
	w.putBy(domain.ExecutionStream("x4"), domain.OwnerExecutor, json.RawMessage(`{"principal":"no spaces allowed"}`), domain.ExecutionRequested{Action: "a"})
	rep, err := projections.Audit(context.Background(), store, nil)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range rep.Violations {
		if v.Rule == projections.RulePrincipal {
			got = append(got, v.Principal+": "+v.Detail)
		}
	}
	if len(got) != 2 || !strings.Contains(got[0], "alice: client alice asked to cancel execution x3, requested by bob") ||
		!strings.Contains(got[1], "does not name a valid principal") {
		t.Errorf("principal violations %q", got)
	}
}
