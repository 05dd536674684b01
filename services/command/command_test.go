package command_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/command"
)

func TestRequestCommand(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	cmds := &command.Service{Store: store, Writer: "test"}
	ctx := context.Background()
	items := []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`2`)}

	for name, r := range map[string]command.Request{
		"a concurrency key":   {Action: "a", ConcurrencyKey: "k"},
		"a parent":            {Action: "a", Parent: "p"},
		"an item index":       {Action: "a", ItemIndex: 1},
		"items without items": {Action: "a", Items: 2},
		"a window alone":      {Action: "a", Concurrency: 2},
		"a bad item":          {Action: "a", WithItems: []json.RawMessage{json.RawMessage(`{`)}},
	} {
		if _, _, err := cmds.Request(ctx, r); !errors.Is(err, command.ErrInvalidRequest) {
			t.Errorf("request with %s: %v, want ErrInvalidRequest", name, err)
		}
	}

	id, created, err := cmds.Request(ctx, command.Request{Action: "a", WithItems: items, Concurrency: 1, IdempotencyKey: "k1"})
	if err != nil || !created {
		t.Fatalf("with_items request: %v %v", created, err)
	}
	again, created, err := cmds.Request(ctx, command.Request{Action: "a", WithItems: []json.RawMessage{json.RawMessage(`{ "a" : 1 }`), json.RawMessage(`2`)}, Concurrency: 1, IdempotencyKey: "k1"})
	if err != nil || created || again != id {
		t.Fatalf("the same request again: %s %v %v", again, created, err)
	}
	if _, _, err := cmds.Request(ctx, command.Request{Action: "a", WithItems: items[:1], Concurrency: 1, IdempotencyKey: "k1"}); !errors.Is(err, command.ErrIdempotencyMismatch) {
		t.Fatalf("other items under the same key: %v, want ErrIdempotencyMismatch", err)
	}
	x, err := cmds.LoadExecution(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if !x.IsParent() || x.Items() != 2 || x.Window() != 1 || len(x.State().Children) != 2 || x.State().Children[1] != domain.ChildID(id, 1) {
		t.Fatalf("parent: items %d window %d children %v", x.Items(), x.Window(), x.State().Children)
	}
	if _, err := cmds.LoadExecution(ctx, "nope"); !errors.Is(err, command.ErrUnknownExecution) {
		t.Fatalf("LoadExecution of an unknown id: %v", err)
	}
	if _, err := cmds.ChangePolicy(ctx, domain.Policy{Ref: "nope", Runner: "core.noop"}); !errors.Is(err, command.ErrUnknownAction) {
		t.Fatalf("ChangePolicy of an unknown action: %v", err)
	}
}

// TestChangeActionAnswersTheLog: the action ChangeAction returns is the one
// a fold of its stream gives after the change, written or not.
func TestChangeActionAnswersTheLog(t *testing.T) {
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	cmds := &command.Service{Store: store, Writer: "test"}
	ctx := context.Background()
	p := domain.Policy{Ref: "a", Runner: "core.noop"}
	for i, change := range []command.ActionChange{
		command.Define(p), command.Define(p), command.Pause("why"), command.Pause("again"),
		command.SetPolicy(domain.Policy{Ref: "a", Runner: "core.noop", MaxConcurrent: 3}), command.Resume(),
	} {
		got, wrote, err := cmds.ChangeAction(ctx, "a", change)
		if err != nil {
			t.Fatalf("change %d: %v", i, err)
		}
		want, err := cmds.LoadAction(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		if got.Version() != want.Version() || got.Paused() != want.Paused() || !reflect.DeepEqual(got.Policy(), want.Policy()) {
			t.Errorf("change %d (wrote %v): got version %d paused %v %+v, the log has %d %v %+v", i, wrote,
				got.Version(), got.Paused(), got.Policy(), want.Version(), want.Paused(), want.Policy())
		}
		if wantWrote := i != 1 && i != 3; wrote != wantWrote {
			t.Errorf("change %d: wrote %v, want %v", i, wrote, wantWrote)
		}
	}
	if _, _, err := cmds.ChangeAction(ctx, "nope", command.Pause("")); !errors.Is(err, command.ErrUnknownAction) {
		t.Errorf("pause of an unknown action: %v", err)
	}
}

// TestWithViewsKeepsEveryField: the copy WithViews makes differs from the
// service only in its Views (a field it forgot, as it once forgot History,
// silently turns a feature off behind the API).
func TestWithViewsKeepsEveryField(t *testing.T) {
	c := &command.Service{Store: memstore.New(memstore.Options{}), Writer: "w", NewID: uuid.New, Log: slog.Default(),
		History: memstore.New(memstore.Options{}), Now: time.Now}
	views := projections.NewViews()
	got := reflect.ValueOf(c.WithViews(views)).Elem()
	want := reflect.ValueOf(c).Elem()
	for i := range got.NumField() {
		f := got.Type().Field(i)
		if !f.IsExported() {
			continue
		}
		if f.Name == "Views" {
			if got.Field(i).Interface() != views {
				t.Error("the copy does not consult the views it was given")
			}
			continue
		}
		if want.Field(i).IsZero() {
			t.Errorf("this test sets no %s: set it, so that its copy is checked", f.Name)
		}
		if got.Field(i).Kind() == reflect.Func {
			if got.Field(i).Pointer() != want.Field(i).Pointer() {
				t.Errorf("the copy's %s differs", f.Name)
			}
		} else if got.Field(i).Interface() != want.Field(i).Interface() {
			t.Errorf("the copy's %s differs", f.Name)
		}
	}
}

// TestKeysAreDated: a key names one execution for at least KeyWindow: a
// retry just past midnight, or on a process whose clock is behind or ahead
// of the one that took the request, is the same execution (another body is
// refused); two days later the key names a new execution, with another id,
// so no stream is requested twice.
func TestKeysAreDated(t *testing.T) {
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	clock := func(at time.Time) *command.Service {
		return &command.Service{Store: store, Writer: "api", Now: func() time.Time { return at }}
	}
	midnight := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	r := command.Request{Action: "a", Input: json.RawMessage(`{"n":1}`), IdempotencyKey: "order-7"}
	id, created, err := clock(midnight.Add(-time.Second)).Request(ctx, r)
	if err != nil || !created {
		t.Fatalf("first request: created %v, %v", created, err)
	}
	for _, at := range []time.Time{midnight.Add(time.Second), midnight.Add(23 * time.Hour), midnight.Add(-5 * time.Hour)} {
		again, created, err := clock(at).Request(ctx, r)
		if err != nil || created || again != id {
			t.Fatalf("a retry at %s: %s created %v, %v; want %s", at, again, created, err, id)
		}
	}
	other := r
	other.Input = json.RawMessage(`{"n":2}`)
	if _, _, err := clock(midnight.Add(time.Hour)).Request(ctx, other); !errors.Is(err, command.ErrIdempotencyMismatch) {
		t.Fatalf("another body the next day: %v", err)
	}
	// A process whose clock runs ahead took it after midnight by its clock.
	ahead, created, err := clock(midnight.Add(10*time.Second)).Request(ctx, command.Request{Action: "a", IdempotencyKey: "order-8"})
	if err != nil || !created {
		t.Fatal(err)
	}
	if again, created, err := clock(midnight.Add(-time.Second)).Request(ctx, command.Request{Action: "a", IdempotencyKey: "order-8"}); err != nil || created || again != ahead {
		t.Fatalf("a retry on a process whose clock is behind: %s created %v, %v; want %s", again, created, err, ahead)
	}
	later, created, err := clock(midnight.Add(48*time.Hour+time.Second)).Request(ctx, r)
	if err != nil || !created || later == id {
		t.Fatalf("two days later: %s created %v, %v; want a new execution", later, created, err)
	}
}
