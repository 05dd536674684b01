package command_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/repository"
)

// TestCancelOwnExecutionsOnly: a client's principal cancels what it
// requested and the with_items children of what it requested (the executor
// writes those, with no principal); another client's request is
// ErrNotYours and nothing is written; an admin cancels anything.
func TestCancelOwnExecutionsOnly(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	cmds := &command.Service{Store: store, Writer: "test"}
	bg := context.Background()
	alice := repository.WithPrincipal(bg, domain.Principal{Name: "alice", Role: "client"})
	bob := repository.WithPrincipal(bg, domain.Principal{Name: "bob", Role: "client"})
	root := repository.WithPrincipal(bg, domain.Principal{Name: "root", Role: "admin"})

	parent, _, err := cmds.Request(alice, command.Request{Action: "a", WithItems: []json.RawMessage{json.RawMessage(`1`)}})
	if err != nil {
		t.Fatal(err)
	}
	child := domain.ChildID(parent, 0)
	env, err := codec.Events.Encode(uuid.New(), domain.ExecutionRequested{Action: "a", Parent: parent}, domain.OwnerExecutor, "exec")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Append(bg, domain.ExecutionStream(child), eventstore.NoStream, env); err != nil {
		t.Fatal(err)
	}
	if by, ok, err := cmds.Requester(bg, child); err != nil || !ok || by.Name != "alice" {
		t.Fatalf("the child's requester: %+v %v %v, want alice (its parent's)", by, ok, err)
	}
	head, _ := store.Head(bg)
	if _, err := cmds.Cancel(bob, child, ""); !errors.Is(err, command.ErrNotYours) {
		t.Errorf("bob cancelling alice's child: %v, want ErrNotYours", err)
	}
	if _, err := cmds.Cancel(bob, parent, ""); !errors.Is(err, command.ErrNotYours) {
		t.Errorf("bob cancelling alice's parent: %v, want ErrNotYours", err)
	}
	if now, _ := store.Head(bg); now != head {
		t.Errorf("refused cancellations wrote %d events", now-head)
	}
	if _, err := cmds.Cancel(alice, child, ""); err != nil {
		t.Errorf("alice cancelling her child: %v", err)
	}
	mine, _, err := cmds.Request(bob, command.Request{Action: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cmds.Cancel(root, mine, ""); err != nil {
		t.Errorf("an admin cancelling bob's: %v", err)
	}
	if _, _, err := cmds.Requester(bg, "no-such"); !errors.Is(err, command.ErrUnknownExecution) {
		t.Errorf("Requester of an unknown id: %v", err)
	}
	// the cancellation records who asked
	evs, err := store.ReadStream(bg, domain.ExecutionStream(mine), 0, 10)
	if err != nil || len(evs) != 2 {
		t.Fatalf("bob's stream: %d events, %v", len(evs), err)
	}
	if p, ok, _ := domain.PrincipalOf(&evs[1]); !ok || p.Name != "root" || p.Role != "admin" {
		t.Errorf("the cancellation records %+v", p)
	}
}
