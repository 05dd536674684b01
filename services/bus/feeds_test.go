package bus_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/bus"
)

func TestFeedPublisherCarriesTheAPIFeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	store := memstore.New(memstore.Options{})
	defer store.Close()
	b := bus.NewFeedBus(slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer b.Close()
	sub := func(topic string) <-chan *message.Message {
		ch, err := b.Subscriber.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		return ch
	}
	events, execs, stats := sub(bus.TopicFeedEvents), sub(bus.TopicFeedExecutions), sub(bus.TopicFeedQueueStats)

	views := projections.NewViews()
	go func() { _ = views.Run(ctx, store) }()
	start := uint64(0) // the test appends right away: publish from the start, not from whenever Run begins
	fp := &bus.FeedPublisher{Store: store, Views: views, Publisher: b.Publisher, From: &start}
	done := make(chan error, 1)
	go func() { done <- fp.Run(ctx) }()

	put := func(stream string, ev domain.Event) uuid.UUID {
		env, err := codec.Events.Encode(uuid.New(), ev, domain.OwnerExecutor, "test")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Append(ctx, stream, eventstore.Any, env); err != nil {
			t.Fatal(err)
		}
		return env.ID
	}
	ids := []uuid.UUID{put(domain.ActionStream("a"), domain.ActionDefined{Policy: domain.Policy{Ref: "a", Runner: "core.noop"}.WithDefaults()})}
	for i := range 3 {
		ids = append(ids, put(domain.ExecutionStream(fmt.Sprint("x", i)), domain.ExecutionRequested{Action: "a"}))
	}

	// Read the three topics together: the feed bus delivers in order, each
	// message waiting for its subscriber's ack, so reading one topic at a
	// time could stall the publisher on another.
	var gotEvents []*message.Message
	seen := map[string]bool{}
	statsDone := false
	for len(gotEvents) < len(ids) || len(seen) < 3 || !statsDone {
		select {
		case m := <-events:
			m.Ack()
			gotEvents = append(gotEvents, m)
		case m := <-execs:
			m.Ack()
			var x projections.ExecutionView
			if err := json.Unmarshal(m.Payload, &x); err != nil {
				t.Fatal(err)
			}
			if x.Status != domain.StatusRequested || m.Metadata.Get(bus.MetaPosition) != strconv.FormatUint(x.Position, 10) {
				t.Fatalf("execution message: %+v, position metadata %s", x, m.Metadata.Get(bus.MetaPosition))
			}
			seen[x.ID] = true
		case m := <-stats:
			m.Ack()
			var st projections.QueueStats
			if err := json.Unmarshal(m.Payload, &st); err != nil {
				t.Fatal(err)
			}
			if st.Action != "a" {
				t.Fatalf("stats of %q", st.Action)
			}
			statsDone = statsDone || (st.TotalEnqueued == 3 && st.QueueLength == 3)
		case <-ctx.Done():
			t.Fatalf("feeds incomplete: %d events, %d executions, final stats %v", len(gotEvents), len(seen), statsDone)
		}
	}
	for i, id := range ids {
		m := gotEvents[i]
		if m.UUID != id.String() || m.Metadata.Get(bus.MetaPosition) != strconv.Itoa(i) {
			t.Fatalf("event message %d: uuid %s position %s, want %s at %d", i, m.UUID, m.Metadata.Get(bus.MetaPosition), id, i)
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
