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
	fp := &bus.FeedPublisher{Store: store, Views: views, Publisher: b.Publisher}
	done := make(chan error, 1)
	go func() { done <- fp.Run(ctx) }()

	put := func(stream string, ev domain.Event) uuid.UUID {
		env, err := domain.Catalogue.Encode(uuid.New(), ev, domain.OwnerExecutor, "test")
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

	next := func(ch <-chan *message.Message, what string) *message.Message {
		select {
		case m := <-ch:
			m.Ack()
			return m
		case <-ctx.Done():
			t.Fatalf("no %s message", what)
			return nil
		}
	}
	for i, id := range ids {
		m := next(events, "event")
		if m.UUID != id.String() || m.Metadata.Get(bus.MetaPosition) != strconv.Itoa(i) {
			t.Fatalf("event message %d: uuid %s position %s, want %s at %d", i, m.UUID, m.Metadata.Get(bus.MetaPosition), id, i)
		}
	}
	seen := map[string]bool{}
	for len(seen) < 3 {
		var x projections.ExecutionView
		m := next(execs, "execution")
		if err := json.Unmarshal(m.Payload, &x); err != nil {
			t.Fatal(err)
		}
		if x.Status != domain.StatusRequested || m.Metadata.Get(bus.MetaPosition) != strconv.FormatUint(x.Position, 10) {
			t.Fatalf("execution message: %+v, position metadata %s", x, m.Metadata.Get(bus.MetaPosition))
		}
		seen[x.ID] = true
	}
	for {
		var s projections.QueueStats
		if err := json.Unmarshal(next(stats, "queue-stats").Payload, &s); err != nil {
			t.Fatal(err)
		}
		if s.Action != "a" {
			t.Fatalf("stats of %q", s.Action)
		}
		if s.TotalEnqueued == 3 && s.QueueLength == 3 {
			break
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
