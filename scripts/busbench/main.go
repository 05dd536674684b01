// Command busbench measures how a handoff (an execution.scheduled event)
// reaches a worker in another process on a PostgreSQL log, two ways:
//
//   - direct: the worker's process subscribes to the log itself (the store's
//     Subscribe, woken by LISTEN/NOTIFY, filtered on the event type) and routes
//     what it reads over its in-process watermill bus (what turnstile does);
//   - sql: the executor's process forwards each handoff from the log to
//     watermill-sql (v4, pgx adapter, the default PostgreSQL schema) and the
//     worker's process consumes the topic with watermill-sql's subscriber,
//     which polls.
//
// Each side has its own connection pool, as two processes would. Writers
// append single events at --rate per second (0: as fast as they can); the
// figure is the time from an event's commit time (the log's) to its arrival
// in the worker's handler. It lives in a module of its own so that turnstile
// does not depend on watermill-sql.
//
//	go run . --url "$TURNSTILE_POSTGRES_URL" --mode direct --rate 2000 --events 20000
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wsql "github.com/ThreeDotsLabs/watermill-sql/v4/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/services/bus"
)

func main() {
	dbURL := flag.String("url", "", "PostgreSQL URL (default: $TURNSTILE_POSTGRES_URL)")
	*dbURL = os.Getenv("TURNSTILE_POSTGRES_URL") // not the flag's default: -help would print it
	mode := flag.String("mode", "direct", "direct or sql")
	rate := flag.Int("rate", 2000, "events per second (0: unthrottled)")
	events := flag.Int("events", 20000, "events to send")
	writers := flag.Int("writers", 16, "appending goroutines")
	poll := flag.Duration("poll", 10*time.Millisecond, "watermill-sql subscriber poll interval")
	flag.Parse()
	if err := run(*dbURL, *mode, *rate, *events, *writers, *poll); err != nil {
		fmt.Fprintln(os.Stderr, "busbench:", err)
		os.Exit(1)
	}
}

func run(dbURL, mode string, rate, n, writers int, poll time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	schema := "busbench_" + hex.EncodeToString(b)
	admin, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := postgres.Migrate(ctx, admin, schema); err != nil {
		return err
	}
	defer func() { _, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") }()
	u, _ := url.Parse(dbURL)
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	producer, err := postgres.OpenURL(ctx, u.String(), postgres.Options{}) // the executor's process
	if err != nil {
		return err
	}
	defer producer.Close()
	consumer, err := postgres.OpenURL(ctx, u.String(), postgres.Options{}) // the worker's process
	if err != nil {
		return err
	}
	defer consumer.Close()

	var mu sync.Mutex
	lat := make([]float64, 0, n)
	got := make(chan struct{})
	var count atomic.Int64
	handler := func(m *message.Message) error {
		env, err := bus.DecodeEvent(m)
		if err != nil {
			return err
		}
		d := float64(time.Since(env.Time).Microseconds()) / 1000
		mu.Lock()
		lat = append(lat, d)
		mu.Unlock()
		if count.Add(1) == int64(n) {
			close(got)
		}
		return nil
	}
	wlog := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	router, err := message.NewRouter(message.RouterConfig{}, wlog)
	if err != nil {
		return err
	}
	topic := bus.HandoffTopic("w1")
	filter := eventstore.Filter{Types: []string{domain.TypeExecutionScheduled}}
	subCtx, stopSub := context.WithCancel(ctx)
	defer stopSub()
	var sqlTopic string
	switch mode {
	case "direct":
		in := bus.NewInProcess(slog.New(slog.DiscardHandler))
		defer in.Close()
		router.AddConsumerHandler("assign", topic, in.Subscriber, handler)
		go func() {
			_ = consumer.Subscribe(subCtx, 0, filter, func(batch []domain.Envelope) error {
				return forward(in.Publisher, topic, batch)
			})
		}()
	case "sql":
		sqlTopic = "turnstile_assign_w1"
		pubPool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			return err
		}
		defer pubPool.Close()
		subPool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			return err
		}
		defer subPool.Close()
		pub, err := wsql.NewPublisher(wsql.BeginnerFromPgx(pubPool), wsql.PublisherConfig{
			SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, AutoInitializeSchema: true}, wlog)
		if err != nil {
			return err
		}
		sub, err := wsql.NewSubscriber(wsql.BeginnerFromPgx(subPool), wsql.SubscriberConfig{
			ConsumerGroup: "workers", PollInterval: poll, InitializeSchema: true,
			SchemaAdapter: wsql.DefaultPostgreSQLSchema{}, OffsetsAdapter: wsql.DefaultPostgreSQLOffsetsAdapter{}}, wlog)
		if err != nil {
			return err
		}
		if err := sub.SubscribeInitialize(sqlTopic); err != nil {
			return err
		}
		router.AddConsumerHandler("assign", sqlTopic, sub, handler)
		go func() {
			_ = producer.Subscribe(subCtx, 0, filter, func(batch []domain.Envelope) error {
				return forward(pub, sqlTopic, batch)
			})
		}()
	default:
		return fmt.Errorf("--mode %q: direct or sql", mode)
	}
	go func() { _ = router.Run(ctx) }()
	<-router.Running()
	time.Sleep(200 * time.Millisecond)

	data, _ := json.Marshal(map[string]any{"worker": "w1", "incarnation": uuid.NewString(), "attempt": 1, "runner": "core.noop",
		"input": map[string]any{}, "scheduled_timeout_ms": 30000, "timeout_ms": 600000})
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(n) {
					return
				}
				if rate > 0 {
					if d := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(rate))); d > 0 {
						time.Sleep(d)
					}
				}
				env := domain.Envelope{ID: uuid.New(), Type: domain.TypeExecutionScheduled, SchemaVersion: 1,
					Owner: domain.OwnerExecutor, Writer: "busbench", Data: data}
				if _, err := producer.Append(ctx, "execution-"+uuid.NewString(), eventstore.NoStream, env); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	sent := time.Since(start)
	select {
	case <-got:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("only %d of %d arrived", count.Load(), n)
	}
	elapsed := time.Since(start)
	_ = router.Close()
	sort.Float64s(lat)
	qq := func(p float64) float64 { return lat[min(len(lat)-1, int(p*float64(len(lat))))] }
	fmt.Printf("mode=%s rate=%d events=%d writers=%d poll=%s: sent in %.2fs (%.0f/s), all arrived in %.2fs (%.0f/s); commit→handler p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
		mode, rate, n, writers, poll, sent.Seconds(), float64(n)/sent.Seconds(), elapsed.Seconds(), float64(n)/elapsed.Seconds(), qq(0.5), qq(0.99), lat[len(lat)-1])
	return nil
}

// forward publishes a batch of log events to topic, one message each (the
// message UUID is the event id, as turnstile's forwarder does).
func forward(pub message.Publisher, topic string, batch []domain.Envelope) error {
	msgs := make([]*message.Message, 0, len(batch))
	for i := range batch {
		m, err := bus.EncodeEvent(&batch[i])
		if err != nil {
			return err
		}
		msgs = append(msgs, m)
	}
	return pub.Publish(topic, msgs...)
}
