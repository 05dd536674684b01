// Command riverbench runs River, the PostgreSQL job queue a Go user would
// pick instead of turnstile, in the arrival pattern of turnstile's
// `bench lifecycle --executions 20000 --actions 10 --max-concurrent 10`:
// N no-op jobs on Q queues of W workers each, inserted one by one (one
// transaction each) from S goroutines, and reports jobs/s from the first
// insert to the last completion, so that both can be measured on one
// machine in one state (BENCHMARKS.md, "River's pattern on PostgreSQL"). It lives
// in a module of its own so that turnstile does not depend on River.
//
//	go run . --url "$TURNSTILE_POSTGRES_URL" --jobs 20000 --queues 10 --workers 10 --submitters 64
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

type noopArgs struct{}

func (noopArgs) Kind() string { return "noop" }

type noopWorker struct {
	river.WorkerDefaults[noopArgs]
}

func (*noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

func main() {
	url := flag.String("url", "", "PostgreSQL URL (default: $TURNSTILE_POSTGRES_URL)")
	*url = os.Getenv("TURNSTILE_POSTGRES_URL") // not the flag's default: -help would print it
	schema := flag.String("schema", "", "schema for River's tables (default: a fresh one, dropped at the end)")
	jobs := flag.Int("jobs", 20000, "no-op jobs to run")
	queues := flag.Int("queues", 10, "queues")
	workers := flag.Int("workers", 10, "workers (MaxWorkers) per queue")
	submitters := flag.Int("submitters", 64, "goroutines inserting jobs one by one")
	cooldown := flag.Duration("fetch-cooldown", river.FetchCooldownDefault, "River's FetchCooldown (its minimum is 1ms)")
	poll := flag.Duration("fetch-poll", river.FetchPollIntervalDefault, "River's FetchPollInterval")
	flag.Parse()
	if err := run(*url, *schema, *jobs, *queues, *workers, *submitters, *cooldown, *poll); err != nil {
		fmt.Fprintln(os.Stderr, "riverbench:", err)
		os.Exit(1)
	}
}

func run(url, schema string, jobs, queues, workers, submitters int, cooldown, poll time.Duration) error {
	ctx := context.Background()
	if schema == "" {
		schema = fmt.Sprintf("riverbench_%d", time.Now().UnixNano())
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer func() {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
			_ = conn.Close(context.Background())
		}()
		if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
			return err
		}
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	cfg.MaxConns = int32(submitters + 16)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	ws := river.NewWorkers()
	river.AddWorker(ws, &noopWorker{})
	qs := map[string]river.QueueConfig{}
	for i := range queues {
		qs[fmt.Sprintf("q%d", i)] = river.QueueConfig{MaxWorkers: workers}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: qs, Workers: ws, Schema: schema, FetchCooldown: cooldown, FetchPollInterval: poll,
	})
	if err != nil {
		return err
	}
	completed, cancelSub := client.Subscribe(river.EventKindJobCompleted)
	defer cancelSub()
	if err := client.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = client.Stop(context.Background()) }()

	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, submitters)
	for range submitters {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(jobs) {
					return
				}
				if _, err := client.Insert(ctx, noopArgs{}, &river.InsertOpts{Queue: fmt.Sprintf("q%d", i%int64(queues))}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	insertedIn := make(chan time.Duration, 1)
	go func() { wg.Wait(); insertedIn <- time.Since(start) }()
	done := 0
	timeout := time.After(10 * time.Minute)
	for done < jobs {
		select {
		case ev := <-completed:
			if ev != nil && ev.Kind == river.EventKindJobCompleted {
				done++
			}
		case err := <-errs:
			return fmt.Errorf("insert: %w", err)
		case <-timeout:
			return fmt.Errorf("only %d of %d jobs completed in 10 minutes", done, jobs)
		}
	}
	elapsed := time.Since(start)
	inserted := <-insertedIn
	b, _ := json.Marshal(map[string]any{"jobs": jobs, "queues": queues, "workers_per_queue": workers, "submitters": submitters,
		"fetch_cooldown_ms": float64(cooldown.Microseconds()) / 1000, "fetch_poll_ms": float64(poll.Microseconds()) / 1000, "insert_seconds": inserted.Seconds(), "seconds": elapsed.Seconds(), "jobs_per_s": float64(jobs) / elapsed.Seconds()})
	fmt.Println(string(b))
	return nil
}
