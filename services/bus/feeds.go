package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/projections"
)

// Feed topics: the API's live feeds, for programs inside the deployment.
const (
	TopicFeedEvents     = "turnstile.feed.events"      // every event, in log order
	TopicFeedExecutions = "turnstile.feed.executions"  // projections.ExecutionView, conflated
	TopicFeedQueueStats = "turnstile.feed.queue-stats" // projections.QueueStats, conflated
)

// NewFeedBus returns an in-process bus for the feeds (watermill's GoChannel
// in its ordered mode: each message waits for every subscriber's ack, so a
// subscriber receives them in order and a slow one slows only the
// FeedPublisher, which catches up from the log and the read model). Its
// routine logging (such as "no subscribers") is kept below Warn.
func NewFeedBus(logger *slog.Logger) *Bus {
	quiet := slog.New(minLevel{logger.With("component", "feed-bus").Handler(), slog.LevelWarn})
	wl := watermill.NewSlogLogger(quiet)
	ch := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, wl)
	return &Bus{Publisher: ch, Subscriber: ch, Logger: wl, close: ch.Close}
}

// minLevel drops records below a level.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.Handler.WithAttrs(a), h.min}
}
func (h minLevel) WithGroup(g string) slog.Handler { return minLevel{h.Handler.WithGroup(g), h.min} }

// feedNS derives the UUIDs of conflated feed messages, so that the same state
// published twice has the same UUID (handlers deduplicate by it).
var feedNS = uuid.MustParse("6f1f3a52-2d7e-4f57-9a43-5b0c3f4d8e21")

// FeedPublisher publishes the feeds of the HTTP API on the bus, from the
// moment it starts: every event (the message UUID is the event id), and the
// conflated states of executions and queue statistics as the read model
// changes. Like the SSE feeds, a subscriber that needs history reads the
// log; the bus carries what happens now.
type FeedPublisher struct {
	Store     eventstore.Store
	Views     *projections.Views
	Publisher message.Publisher // e.g. NewFeedBus's
	Logger    *slog.Logger
	// From, if set, is the log position to publish from; by default, the
	// read model's position when Run starts.
	From *uint64
}

// Run publishes until ctx ends or publishing fails.
func (f *FeedPublisher) Run(ctx context.Context) error {
	if f.Logger == nil {
		f.Logger = slog.Default()
	}
	from := f.Views.Next()
	if f.From != nil {
		from = *f.From
	}
	errs := make(chan error, 2)
	go func() { errs <- f.events(ctx, from) }()
	go func() { errs <- f.states(ctx, from) }()
	err := errors.Join(<-errs, <-errs)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (f *FeedPublisher) events(ctx context.Context, from uint64) error {
	return f.Store.Subscribe(ctx, from, eventstore.Filter{}, func(batch []domain.Envelope) error {
		msgs := make([]*message.Message, 0, len(batch))
		for i := range batch {
			m, err := EncodeEvent(&batch[i])
			if err != nil {
				return err
			}
			m.Metadata.Set(MetaPosition, strconv.FormatUint(batch[i].Position, 10))
			msgs = append(msgs, m)
		}
		return f.Publisher.Publish(TopicFeedEvents, msgs...)
	})
}

func (f *FeedPublisher) states(ctx context.Context, from uint64) error {
	execFrom, statsFrom := from, from
	for {
		changed := f.Views.Changed()
		xs, nextX := f.Views.ExecutionsSince(execFrom, "", 256)
		for _, x := range xs {
			if err := f.publishState(TopicFeedExecutions, "execution/"+x.ID, x.Position, x); err != nil {
				return err
			}
		}
		st, nextS := f.Views.StatsSince(statsFrom, "", 256)
		for _, s := range st {
			if err := f.publishState(TopicFeedQueueStats, "stats/"+s.Action, s.Position, s); err != nil {
				return err
			}
		}
		execFrom, statsFrom = nextX, nextS
		if len(xs) > 0 || len(st) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return nil
		}
	}
}

func (f *FeedPublisher) publishState(topic, key string, pos uint64, v any) error {
	payload, err := json.Marshal(v)
	if err != nil {
		return err
	}
	pstr := strconv.FormatUint(pos, 10)
	m := message.NewMessage(uuid.NewSHA1(feedNS, []byte(key+"@"+pstr)).String(), payload)
	m.Metadata.Set(MetaPosition, pstr)
	if err := f.Publisher.Publish(topic, m); err != nil {
		return fmt.Errorf("bus: publish %s: %w", topic, err)
	}
	return nil
}
