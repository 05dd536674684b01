package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/internal/waitfor"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
	"github.com/turnstile/turnstile/services/command"
	"github.com/turnstile/turnstile/services/node"
)

// TestPoisonIsSetAside runs a node while about 1% of the bus messages its
// workers receive and 1% of the events in its log are malformed: every
// malformed message reaches the poison topic after its bounded retries and
// is counted, every malformed event is passed over by the executor and the
// read model and counted (and reported by the audit), and every real
// execution, on every action, still ends as its runner says.
func TestPoisonIsSetAside(t *testing.T) {
	const actions, perAction = 5, 60 // 300 executions
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	n, err := node.Start(ctx, store, node.Config{Workers: 2, Slots: 4, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	views := projections.NewViews()
	vctx, stopViews := context.WithCancel(ctx)
	viewsDone := make(chan error, 1)
	go func() { viewsDone <- views.Run(vctx, store) }()
	defer func() {
		stopViews()
		if err := <-viewsDone; err != nil {
			t.Errorf("read model: %v", err)
		}
	}()

	cmds := n.Commands
	for a := range actions {
		runner := "core.echo"
		if a == actions-1 {
			runner = "core.fail"
		}
		if _, err := cmds.DefineAction(ctx, domain.Policy{Ref: fmt.Sprintf("poison.a%d", a), Runner: runner, MaxConcurrent: 1 + a}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		ids                     []string
		badMessages, badEvents  int
		wantPoison              int
		workers                 = []string{"local-1", "local-2"}
		badPayloads             = [][]byte{[]byte("not json at all"), []byte(`{"stream":"execution-x","type":"execution.scheduled","data":{"worker":7}}`), []byte(`{}`)}
		badEventTypes, badDatas = []string{"execution.requested", "execution.mystery", "worker.heartbeat"}, []string{`{"action":42}`, `{}`, `{"in_flight":"many"}`}
	)
	for k := range actions * perAction {
		id, _, err := cmds.Request(ctx, command.Request{Action: fmt.Sprintf("poison.a%d", k%actions), Input: json.RawMessage(fmt.Sprintf(`{"k":%d}`, k))})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		if k%100 != 50 {
			continue
		}
		// One malformed message on a worker's assignment topic and one on
		// the cancel topic (both workers take it), and one malformed event.
		i := k / 100
		m := message.NewMessage(uuid.NewString(), badPayloads[i%len(badPayloads)])
		if err := n.Bus.Publisher.Publish(bus.HandoffTopic(workers[i%2]), m); err != nil {
			t.Fatal(err)
		}
		if err := n.Bus.Publisher.Publish(bus.TopicCancel, message.NewMessage(uuid.NewString(), []byte("{{{"))); err != nil {
			t.Fatal(err)
		}
		badMessages += 2
		wantPoison += 1 + len(workers)
		env := domain.Envelope{ID: uuid.New(), Type: badEventTypes[i%3], SchemaVersion: 1, Owner: domain.OwnerExecutor, Data: json.RawMessage(badDatas[i%3])}
		stream := domain.ExecutionStream(uuid.NewString())
		if env.Type == "worker.heartbeat" {
			stream = domain.WorkerStream("local-1")
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, env); err != nil {
			t.Fatal(err)
		}
		badEvents++
	}

	// Every real execution ends, as its runner says.
	for _, id := range ids {
		var v projections.ExecutionView
		waitfor.That(t, "execution "+id+" to end", func() bool {
			var ok bool
			v, ok = views.View(id)
			return ok && v.Status.Terminal()
		}, waitfor.Note(func() string { return fmt.Sprintf("its view: %+v", v) }))
		want := domain.StatusCompleted
		if v.Action == fmt.Sprintf("poison.a%d", actions-1) {
			want = domain.StatusFailed
		}
		if v.Status != want {
			t.Errorf("execution %s of %s: %s, want %s", id, v.Action, v.Status, want)
		}
	}
	waitfor.That(t, fmt.Sprintf("%d messages in the poison topic", wantPoison), func() bool { return n.Poison.Count() >= uint64(wantPoison) })
	if got := n.Poison.Count(); got != uint64(wantPoison) {
		t.Errorf("%d messages in the poison topic, want %d (%d malformed messages, the cancel topic's taken by %d workers)", got, wantPoison, badMessages, len(workers))
	}
	if got := n.Executor.Stats.Undecodable.Load(); got != int64(badEvents) {
		t.Errorf("the executor passed over %d events, want %d", got, badEvents)
	}
	if got := views.Skipped(); got != uint64(badEvents) {
		t.Errorf("the read model passed over %d events, want %d", got, badEvents)
	}
	rep, err := projections.Audit(ctx, store, nil)
	if err != nil {
		t.Fatal(err)
	}
	decode := 0
	for _, v := range rep.Violations {
		if v.Rule == "decode" {
			decode++
		} else {
			t.Errorf("audit: position %d %s %s [%s] %s", v.Position, v.Stream, v.Type, v.Rule, v.Detail)
		}
	}
	if decode != badEvents {
		t.Errorf("the audit reports %d undecodable events, want %d", decode, badEvents)
	}
	if rep.Ended != len(ids) {
		t.Errorf("%d executions ended, want %d", rep.Ended, len(ids))
	}
	t.Logf("%d executions, %d malformed messages (%d poisoned deliveries), %d malformed events", len(ids), badMessages, wantPoison, badEvents)
}
