// Package bus carries what one process must tell another, over watermill:
// handoffs to workers and cancellation requests. The log is the truth; the
// Forwarder derives every message from it and checkpoints its position, so a
// lost message is sent again, and handlers are idempotent by event id: a
// message carries one event (its UUID is the event id) or a batch of events
// for one topic (its UUID derives from theirs; see EncodeEvents).
package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/internal/backoff"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/crashpoint"
)

// Topics.
const (
	TopicCancel = "turnstile.cancel" // every execution.cancel_requested
	TopicPoison = "turnstile.poison" // messages no handler could process
)

// HandoffTopic is the topic of the handoffs to one worker.
func HandoffTopic(worker string) string { return "turnstile.handoff." + worker }

// Metadata keys set on every message.
const (
	MetaType     = "type"
	MetaStream   = "stream"
	MetaPosition = "position"
)

// Bus is a watermill publisher and subscriber pair.
type Bus struct {
	Publisher  message.Publisher
	Subscriber message.Subscriber
	Logger     watermill.LoggerAdapter
	close      func() error
}

// NewLogger adapts logger for watermill: its info messages (a handler
// starting, a router closing) become debug, its debug and trace messages
// trace, and its "all handlers stopped" error, which is how a router reports
// that its subscriptions were closed under it (the bus closed before the
// router, as when a process stops), becomes info. Other errors stay errors.
func NewLogger(logger *slog.Logger) watermill.LoggerAdapter {
	return quietStop{watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{
		slog.LevelInfo:  slog.LevelDebug,
		slog.LevelDebug: watermill.LevelTrace,
	}), logger}
}

// quietStop demotes watermill's error on a router whose handlers all
// stopped, which a clean stop produces when the subscriber closes first.
type quietStop struct {
	watermill.LoggerAdapter
	slog *slog.Logger
}

func (q quietStop) Error(msg string, err error, fields watermill.LogFields) {
	if msg == "All handlers stopped, closing router" {
		args := make([]any, 0, 2*len(fields))
		for k, v := range fields {
			args = append(args, k, v)
		}
		q.slog.Info("bus: router closing: its subscriptions were closed", args...)
		return
	}
	q.LoggerAdapter.Error(msg, err, fields)
}

// Trace, Debug and Info return at once when their level (as NewLogger maps
// it) is off: watermill logs every message it passes on at trace level, and
// building those records only to drop them costs more than a handoff's
// encoding.
func (q quietStop) Trace(msg string, fields watermill.LogFields) {
	if q.slog.Enabled(context.Background(), watermill.LevelTrace) {
		q.LoggerAdapter.Trace(msg, fields)
	}
}

func (q quietStop) Debug(msg string, fields watermill.LogFields) {
	if q.slog.Enabled(context.Background(), watermill.LevelTrace) {
		q.LoggerAdapter.Debug(msg, fields)
	}
}

func (q quietStop) Info(msg string, fields watermill.LogFields) {
	if q.slog.Enabled(context.Background(), slog.LevelDebug) {
		q.LoggerAdapter.Info(msg, fields)
	}
}

func (q quietStop) With(fields watermill.LogFields) watermill.LoggerAdapter {
	args := make([]any, 0, 2*len(fields))
	for k, v := range fields {
		args = append(args, k, v)
	}
	return quietStop{q.LoggerAdapter.With(fields), q.slog.With(args...)}
}

// NewInProcess returns a bus for one process (watermill's GoChannel).
func NewInProcess(logger *slog.Logger) *Bus {
	wl := NewLogger(logger.With("component", "bus"))
	ch := gochannel.NewGoChannel(gochannel.Config{OutputChannelBuffer: 4096}, wl)
	return &Bus{Publisher: ch, Subscriber: ch, Logger: wl, close: ch.Close}
}

// Close closes the bus.
func (b *Bus) Close() error {
	if b.close != nil {
		return b.close()
	}
	return nil
}

// NewRouter returns a watermill router with the middleware every handler of
// ours runs under: a recoverer (a panic becomes an error), bounded retries,
// and a poison queue for messages that still fail.
func (b *Bus) NewRouter() (*message.Router, error) {
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, b.Logger)
	if err != nil {
		return nil, fmt.Errorf("bus: router: %w", err)
	}
	poison, err := middleware.PoisonQueue(b.Publisher, TopicPoison)
	if err != nil {
		return nil, fmt.Errorf("bus: poison queue: %w", err)
	}
	r.AddMiddleware(
		poison,
		middleware.Retry{MaxRetries: 3, InitialInterval: 10 * time.Millisecond, MaxInterval: time.Second, Multiplier: 2, Logger: b.Logger}.Middleware,
		middleware.Recoverer,
	)
	return r, nil
}

// PoisonCounter counts the messages that reached the poison topic.
type PoisonCounter struct {
	startstop.Base // Stop ends the watch and waits for its goroutine
	n              atomic.Uint64
}

// Count returns how many messages have reached the poison topic.
func (p *PoisonCounter) Count() uint64 { return p.n.Load() }

// WatchPoison subscribes to the poison topic until ctx ends or the
// counter's Stop: each message that arrives there (one a handler still
// failed on after its retries) is counted and logged with the reason the
// router gave, then acknowledged. Subscribe before the handlers start, so
// none is missed.
func (b *Bus) WatchPoison(ctx context.Context, logger *slog.Logger) (*PoisonCounter, error) {
	pc := &PoisonCounter{}
	ctx, _ = pc.StartInit(ctx)
	msgs, err := b.Subscriber.Subscribe(ctx, TopicPoison)
	if err != nil {
		pc.StartFailed()
		return nil, fmt.Errorf("bus: subscribe to %s: %w", TopicPoison, err)
	}
	pc.Go(func() {
		for {
			var m *message.Message
			var ok bool
			select {
			case m, ok = <-msgs:
			case <-ctx.Done():
			}
			if !ok {
				return
			}
			pc.n.Add(1)
			logger.Warn("bus: a message was set aside in the poison topic after its retries",
				"uuid", m.UUID, "topic", m.Metadata.Get(middleware.PoisonedTopicKey),
				"handler", m.Metadata.Get(middleware.PoisonedHandlerKey), "reason", m.Metadata.Get(middleware.ReasonForPoisonedKey))
			m.Ack()
		}
	})
	pc.MarkStarted()
	return pc, nil
}

// EncodeEvent turns a log event into a message whose UUID is the event id.
func EncodeEvent(env *domain.Envelope) (*message.Message, error) {
	payload, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("bus: encode event %s: %w", env.ID, err)
	}
	m := message.NewMessage(env.ID.String(), payload)
	m.Metadata.Set(MetaType, env.Type)
	m.Metadata.Set(MetaStream, env.Stream)
	m.Metadata.Set(MetaPosition, strconv.FormatUint(env.Position, 10))
	return m, nil
}

// DecodeEvent reads back a message made by EncodeEvent or EncodeEventCompact.
func DecodeEvent(m *message.Message) (domain.Envelope, error) {
	var env domain.Envelope
	if len(m.Payload) > 0 && m.Payload[0] == compactTag {
		var err error
		if env, err = decodeCompact(m.Payload); err != nil {
			return domain.Envelope{}, fmt.Errorf("bus: message %s is not an event: %w", m.UUID, err)
		}
	} else if err := json.Unmarshal(m.Payload, &env); err != nil {
		return env, fmt.Errorf("bus: message %s is not an event: %w", m.UUID, err)
	}
	if env.Type == "" || env.Stream == "" {
		return env, fmt.Errorf("bus: message %s is not an event: no type or stream", m.UUID)
	}
	return env, nil
}

// ForwarderConfig configures a Forwarder.
type ForwarderConfig struct {
	Store       eventstore.Store
	Publisher   message.Publisher
	Checkpoints projections.Checkpoints
	Name        string // checkpoint name; default "forwarder"
	Logger      *slog.Logger
	// SaveEvery is how often the checkpoint is saved. Default 200ms.
	SaveEvery time.Duration
	// From overrides the checkpoint when set (>0).
	From uint64
}

// Forwarder publishes the log's handoffs and cancel requests to the bus,
// the events of one read of the log that go to one topic in one message
// (EncodeEvents). Delivery is at least once: after a crash it resumes from its checkpoint,
// and after a failed read of the log from the first event it has not
// published, either of which may send a message again.
type Forwarder struct {
	startstop.Base // Started and Stop (lifecycle.go)

	cfg ForwarderConfig
	log *slog.Logger
	err error // what stopped it, set by its goroutine
}

// NewForwarder checks cfg and returns a forwarder; it does nothing until Start.
func NewForwarder(cfg ForwarderConfig) (*Forwarder, error) {
	if cfg.Store == nil || cfg.Publisher == nil || cfg.Checkpoints == nil {
		return nil, errors.New("bus: forwarder needs Store, Publisher and Checkpoints")
	}
	if cfg.Name == "" {
		cfg.Name = "forwarder"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.SaveEvery == 0 {
		cfg.SaveEvery = 200 * time.Millisecond
	}
	return &Forwarder{cfg: cfg, log: cfg.Logger.With("component", "forwarder")}, nil
}

// Start begins forwarding from the checkpoint; a second Start does nothing.
func (f *Forwarder) Start(ctx context.Context) error {
	ctx, ok := f.StartInit(ctx)
	if !ok {
		return nil
	}
	from, err := f.cfg.Checkpoints.Load(ctx, f.cfg.Name)
	if err != nil {
		f.StartFailed()
		return err
	}
	if f.cfg.From > 0 {
		from = f.cfg.From
	}
	filter := eventstore.Filter{Types: []string{domain.TypeExecutionScheduled, domain.TypeExecutionCancelRequested}}
	f.Go(func() {
		next, lastSave := from, time.Now()
		pause := backoff.Backoff{Min: 10 * time.Millisecond, Max: time.Second, Jitter: backoff.Equal}
		var err error
		for {
			err = f.cfg.Store.Subscribe(ctx, next, filter, func(batch []domain.Envelope) error {
				if err := f.publish(batch); err != nil {
					return err
				}
				next = batch[len(batch)-1].Position + 1
				pause.Reset()
				if time.Since(lastSave) >= f.cfg.SaveEvery {
					lastSave = time.Now()
					crashpoint.Hit(crashpoint.ForwarderBeforeCheckpoint)
					if err := f.cfg.Checkpoints.Save(ctx, f.cfg.Name, next); err != nil {
						f.log.Warn("cannot save checkpoint", "err", err)
					}
				}
				return nil
			})
			if ctx.Err() != nil || errors.Is(err, eventstore.ErrClosed) {
				break
			}
			if te := (*eventstore.TrimmedError)(nil); errors.As(err, &te) && next < te.First {
				// The log before its live start was archived: a handoff there
				// that no worker took expires and is handed again.
				f.log.Warn("the live log starts after the forwarder's position: forwarding from its start", "from", next, "start", te.First)
				next = te.First
				continue
			}
			// A failed read of the log (or publish): the log is the truth, so
			// go on from the first event not yet published.
			wait := pause.Next()
			f.log.Warn("forwarding failed; subscribing again", "from", next, "err", err, "in", wait)
			backoff.Sleep(ctx, wait)
		}
		if next > from {
			_ = f.cfg.Checkpoints.Save(context.Background(), f.cfg.Name, next)
		}
		if ctx.Err() != nil {
			err = nil
		}
		f.err = err
	})
	f.MarkStarted()
	return nil
}

// publish sends batch's events, in log order per topic: one message per
// topic and up to MaxBatch events.
func (f *Forwarder) publish(batch []domain.Envelope) error {
	var order []string
	groups := map[string][]*domain.Envelope{}
	for i := range batch {
		env := &batch[i]
		topic := TopicCancel
		if env.Type == domain.TypeExecutionScheduled {
			ev, err := codec.Events.Decode(env)
			if err != nil {
				f.log.Error("cannot read handoff, not forwarded", "position", env.Position, "err", err)
				continue
			}
			topic = HandoffTopic(ev.(domain.ExecutionScheduled).Worker)
		}
		g, ok := groups[topic]
		if !ok {
			order = append(order, topic)
		}
		groups[topic] = append(g, env)
	}
	for _, topic := range order {
		for g := groups[topic]; len(g) > 0; {
			n := min(len(g), MaxBatch)
			crashpoint.Hit(crashpoint.ForwarderBeforePublish)
			if err := f.cfg.Publisher.Publish(topic, EncodeEvents(g[:n])); err != nil {
				return fmt.Errorf("bus: publish %s: %w", topic, err)
			}
			g = g[n:]
		}
	}
	return nil
}
