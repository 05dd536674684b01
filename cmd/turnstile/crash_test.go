package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/crashpoint"
)

// The crash matrix: `turnstile serve` runs as a child process on the
// embedded store and on PostgreSQL while clients submit executions (sleeps,
// failures, echoes, with_items fan-outs) on many actions with limits 1–8,
// and the process is killed with SIGKILL over and over: at random instants,
// and at each crash point (services/crashpoint), where it kills itself. After
// the last restart every execution must end, and the whole log is folded
// and checked (see checkCrashRun). Before the kill that precedes the start
// armed for the take-back crash point, a long sleep is made to run (see
// holdRunning), so that the restarted server must take it back on either
// store.
//
// Sizes: TURNSTILE_TORTURE=full (`make torture`) runs 10,000 executions on
// 50 actions with 200 random kills and every crash point three times, per
// store; `make test` runs 1,000 executions with 10 random kills and every
// crash point once; -short runs 150 with 2 random kills and every crash point once.
// TURNSTILE_TORTURE_EXECUTIONS and TURNSTILE_TORTURE_KILLS override the sizes.

// crashConfig sizes one run of the crash matrix.
type crashConfig struct {
	executions  int // requests submitted (at least: a crash point is fed more until reached); a with_items parent counts once
	actions     int
	randomKills int
	seamRounds  int // how many times each crash point fires
	timeout     time.Duration
}

func crashSizes(t *testing.T) crashConfig {
	c := crashConfig{executions: 1000, actions: 20, randomKills: 10, seamRounds: 1, timeout: 5 * time.Minute}
	switch {
	case os.Getenv("TURNSTILE_TORTURE") == "full":
		c = crashConfig{executions: 10_000, actions: 50, randomKills: 200, seamRounds: 3, timeout: 60 * time.Minute}
	case testing.Short():
		c = crashConfig{executions: 150, actions: 10, randomKills: 2, seamRounds: 1, timeout: 5 * time.Minute}
	}
	for env, dst := range map[string]*int{"TURNSTILE_TORTURE_EXECUTIONS": &c.executions, "TURNSTILE_TORTURE_KILLS": &c.randomKills} {
		if v := os.Getenv(env); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q is not a count", env, v)
			}
			*dst = n
		}
	}
	return c
}

// TestCrashMatrix kills `turnstile serve` with SIGKILL at random instants
// and at every crash point, on the embedded store and on PostgreSQL (when
// TURNSTILE_POSTGRES_URL is set), and checks that nothing was lost,
// duplicated or reordered.
func TestCrashMatrix(t *testing.T) {
	cfg := crashSizes(t)
	bin := turnstileBinary(t)
	t.Run("embedded", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		runCrashMatrix(t, bin, cfg, crashStore{
			args: []string{"--data", dir, "--snapshot-every", "300"},
			open: func(context.Context) (eventstore.Store, error) {
				return embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
			},
			cli: []string{"--data", dir},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		dbURL := os.Getenv("TURNSTILE_POSTGRES_URL")
		if dbURL == "" {
			t.Skip("TURNSTILE_POSTGRES_URL is not set (scripts/with-postgres.sh sets it)")
		}
		schema := "crash_" + strings.ReplaceAll(uuid.NewString()[:8], "-", "")
		t.Cleanup(func() { dropSchema(t, dbURL, schema) })
		runCrashMatrix(t, bin, cfg, crashStore{
			// A shared log's workers are only declared lost when their
			// lease lapses (nobody knows they died with the process): a
			// short lease makes the take-back crash point come within its
			// 15 s window. Snapshots go to a directory of their own.
			args: []string{"--store", dbURL, "--migrate", "--snapshot-every", "300", "--snapshots", t.TempDir(), "--worker-lease", "4s"},
			env:  []string{"TURNSTILE_PG_SCHEMA=" + schema},
			open: func(ctx context.Context) (eventstore.Store, error) {
				return postgres.OpenURL(ctx, dbURL, postgres.Options{Schema: schema})
			},
			cli: []string{"--store", dbURL},
		})
	})
}

// dropSchema removes a test's PostgreSQL schema.
func dropSchema(t *testing.T, dbURL, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Logf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Logf("drop schema %s: %v", schema, err)
	}
}

// crashStore is where a crash run keeps its log.
type crashStore struct {
	args []string // serve's store flags
	env  []string // serve's and the CLI's environment
	open func(context.Context) (eventstore.Store, error)
	cli  []string // the store flags of `turnstile audit`
}

// crashStep is one crash of the plan: a random SIGKILL, or a crash point.
type crashStep struct {
	point string // "" for a random kill
	pass  int    // the pass at which the crash point fires
}

// crashPlan interleaves the random kills and the crash points at random.
// Every take-back step comes right after a random kill (one is added if
// none is free): the test kills that unarmed server while an execution
// runs, so the server armed for the take-back must take it back.
func crashPlan(cfg crashConfig, rng *rand.Rand) []crashStep {
	var plan, takeBacks []crashStep
	for range cfg.randomKills {
		plan = append(plan, crashStep{})
	}
	for range cfg.seamRounds {
		for _, p := range crashpoint.Names() {
			s := crashStep{point: p, pass: crashPass(p, rng)}
			if p == crashpoint.ExecutorTakenBack {
				takeBacks = append(takeBacks, s)
			} else {
				plan = append(plan, s)
			}
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	// The first server starts unarmed (the actions are defined on it): the
	// plan starts with a random kill, and each step arms the next start.
	if i := slices.IndexFunc(plan, func(s crashStep) bool { return s.point == "" }); i >= 0 {
		plan[0], plan[i] = plan[i], plan[0]
	} else {
		plan = append([]crashStep{{}}, plan...)
	}
	for _, s := range takeBacks {
		var free []int // random kills not followed by a take-back step yet
		for i := range plan {
			if plan[i].point == "" && (i+1 == len(plan) || plan[i+1].point != crashpoint.ExecutorTakenBack) {
				free = append(free, i)
			}
		}
		if len(free) == 0 {
			plan = append(plan, crashStep{}, s)
			continue
		}
		plan = slices.Insert(plan, free[rng.IntN(len(free))]+1, s)
	}
	return plan
}

// holdAction is the action of the long sleeps that holdRunning submits.
const holdAction = "crash.hold"

// holdRunning submits the n-th long sleep on holdAction and waits until the
// read model shows it running (its execution.running is in the log), so
// that a server started after this one is killed has an execution of a
// dead incarnation to take back.
func holdRunning(ctx context.Context, t *testing.T, base string, n int) string {
	t.Helper()
	body := map[string]any{"action": holdAction, "input": map[string]any{"seconds": 8}}
	var acc struct{ ID string }
	if _, err := call(ctx, "POST", base+"/api/v1/executions", body, map[string]string{"Idempotency-Key": fmt.Sprintf("crash-hold-%d", n)}, &acc); err != nil {
		t.Fatalf("submit a long sleep to take back: %v", err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		var v projections.ExecutionView
		if _, err := call(ctx, "GET", base+"/api/v1/executions/"+acc.ID, nil, nil, &v); err != nil {
			t.Fatalf("long sleep %s: %v", acc.ID, err)
		}
		switch {
		case v.Status == domain.StatusRunning:
			return acc.ID
		case v.Status.Terminal():
			t.Fatalf("long sleep %s ended (%s) before it was seen running", acc.ID, v.Status)
		case time.Now().After(deadline):
			t.Fatalf("long sleep %s still %q after 30s", acc.ID, v.Status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// crashPass picks the pass at which a crash point fires: soon, so that the
// point is reached while the process has work.
func crashPass(point string, rng *rand.Rand) int {
	switch point {
	case crashpoint.ForwarderBeforeCheckpoint, crashpoint.ExecutorTakenBack:
		return 1 // passed only now and then
	default:
		return 1 + rng.IntN(6)
	}
}

// crashAction is action i of a crash run: its ref, runner and limit.
func crashAction(i int) (ref, runner string, limit int) {
	runner = "core.sleep"
	switch i % 10 {
	case 3:
		runner = "core.echo"
	case 7:
		runner = "core.fail"
	}
	return fmt.Sprintf("crash.a%02d", i), runner, 1 + i%8
}

// crashRequest is the k-th request of a crash run (every 40th a with_items
// parent of 2–5 items, two at a time).
func crashRequest(k, actions int) (ref string, body map[string]any) {
	ref, runner, _ := crashAction(k % actions)
	var input map[string]any
	switch runner {
	case "core.sleep":
		input = map[string]any{"seconds": 0.002 + float64(k%7)*0.004}
	case "core.fail":
		input = map[string]any{"message": fmt.Sprintf("planned failure %d", k)}
	default:
		input = map[string]any{"k": k}
	}
	body = map[string]any{"action": ref, "input": input}
	if k%40 == 13 {
		items := make([]any, 2+k%4)
		for i := range items {
			items[i] = map[string]any{"item": i}
		}
		body["with_items"], body["concurrency"] = items, 2
	}
	return ref, body
}

// runCrashMatrix runs one store's crash run: it submits cfg.executions
// requests in as many slices as the plan has crashes, one slice after each
// restart, crashes the server as the plan says, then restarts it cleanly,
// waits for every execution to end and checks the log.
func runCrashMatrix(t *testing.T, bin string, cfg crashConfig, st crashStore) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	started := time.Now()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 8))
	plan := crashPlan(cfg, rng)
	t.Logf("seed %d: %d executions on %d actions, %d crashes (%d random kills, every crash point %d times)",
		seed, cfg.executions, cfg.actions, len(plan), cfg.randomKills, cfg.seamRounds)

	start := func(step crashStep) *serveProc {
		env := append([]string(nil), st.env...)
		if step.point != "" {
			env = append(env, fmt.Sprintf("%s=%s:%d", crashpoint.Env, step.point, step.pass))
		}
		return startServeWith(t, bin, serveOpts{args: st.args, env: env, mayDie: step.point != ""})
	}
	var cur atomic.Pointer[serveProc]
	cur.Store(start(crashStep{}))
	base := func() string { return cur.Load().url }

	actions := map[string]string{} // ref → runner
	for i := range cfg.actions {
		ref, runner, limit := crashAction(i)
		actions[ref] = runner
		p := domain.Policy{Ref: ref, Runner: runner, MaxConcurrent: limit, MaxAttempts: 10}
		if _, err := call(ctx, "POST", base()+"/api/v1/actions", p, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	actions[holdAction] = "core.sleep"
	hold := domain.Policy{Ref: holdAction, Runner: "core.sleep", MaxConcurrent: 4, MaxAttempts: 10}
	if _, err := call(ctx, "POST", base()+"/api/v1/actions", hold, nil, nil); err != nil {
		t.Fatal(err)
	}

	// Submitters send request k once the plan has opened its slice; each
	// request has an idempotency key, so one that failed because the server
	// died is simply sent again.
	var (
		mu      sync.Mutex
		ids     = map[string]string{} // id → action
		holds   int                   // of them, long sleeps held for a take-back (holdRunning)
		allowed atomic.Int64
		sent    atomic.Int64
	)
	keys := make(chan int)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				ref, body := crashRequest(k, cfg.actions)
				for {
					var acc struct{ ID string }
					_, err := call(ctx, "POST", base()+"/api/v1/executions", body, map[string]string{"Idempotency-Key": fmt.Sprintf("crash-%d", k)}, &acc)
					if err == nil {
						mu.Lock()
						ids[acc.ID] = ref
						mu.Unlock()
						sent.Add(1)
						break
					}
					if ctx.Err() != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	var final atomic.Bool // allowed will not grow any more
	go func() {
		defer close(keys)
		for k := 0; ; k++ {
			for int64(k) >= allowed.Load() {
				if final.Load() {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			select {
			case keys <- k:
			case <-ctx.Done():
				return
			}
		}
	}()

	// The plan: after each (re)start, open the next slice of requests, then
	// crash. A crash point must kill the process by itself; if it is not
	// reached in time, the process is killed and the miss reported.
	reached, missed := map[string]int{}, map[string]int{}
	fromSnapshot := 0 // restarts that resumed a fold from a snapshot (serve runs with --snapshot-every 300)
	for j := 0; j < len(plan); j++ {
		step := plan[j]
		allowed.Store(max(allowed.Load(), int64((j+1)*cfg.executions/(len(plan)+1))))
		p := cur.Load()
		if step.point == "" {
			// Kill while this slice is in the works: once most of it was
			// accepted (or after 10s), at a random instant.
			for wait := time.Now().Add(10 * time.Second); sent.Load() < allowed.Load()-8 && time.Now().Before(wait); {
				time.Sleep(5 * time.Millisecond)
			}
			time.Sleep(time.Duration(50+rng.IntN(650)) * time.Millisecond)
			if j+1 < len(plan) && plan[j+1].point == crashpoint.ExecutorTakenBack {
				id := holdRunning(ctx, t, p.url, holds)
				mu.Lock()
				ids[id] = holdAction
				holds++
				mu.Unlock()
			}
			p.kill()
		} else {
			// Feed it more requests until the point is reached: some points
			// are passed only while executions flow, and the slice may be done.
			deadline := time.After(15 * time.Second)
		wait:
			for {
				select {
				case <-p.done:
					break wait
				case <-time.After(300 * time.Millisecond):
					allowed.Add(3) // a few more than planned
				case <-deadline:
					p.kill()
					break wait
				case <-ctx.Done():
					t.Fatalf("timed out at crash %d of %d", j+1, len(plan))
				}
			}
			if !p.killedBySIGKILL() {
				t.Fatalf("crash point %s: the server ended without SIGKILL (%v):\n%s", step.point, p.state, p.logs.String())
			}
			if strings.Contains(p.logs.String(), "crash point "+step.point+" reached") {
				reached[step.point]++
			} else {
				// Some points need a situation that may not have come (say,
				// a take-back): try again later in the plan, a few times.
				t.Logf("crash point %s:%d was not reached within 15s; killed it instead", step.point, step.pass)
				if missed[step.point]++; missed[step.point] <= 3 {
					if step.point == crashpoint.ExecutorTakenBack {
						plan = append(plan, crashStep{}) // a kill with an execution running first
					}
					plan = append(plan, step)
				}
			}
		}
		next := crashStep{}
		if j+1 < len(plan) {
			next = plan[j+1]
		}
		cur.Store(start(next))
		if logs := cur.Load().logs.String(); strings.Contains(logs, "read model resumed from a snapshot") || strings.Contains(logs, `msg="resumed from a snapshot"`) {
			fromSnapshot++
		}
		if (j+1)%20 == 0 || j+1 == len(plan) {
			t.Logf("crash %d/%d done (%d requests accepted, %s)", j+1, len(plan), sent.Load(), time.Since(started).Round(time.Second))
		}
	}
	allowed.Store(max(allowed.Load(), int64(cfg.executions)))
	final.Store(true)
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("submitting timed out")
	}
	if want := int(allowed.Load()) + holds; len(ids) != want {
		t.Fatalf("%d executions accepted, want %d (%d of them long sleeps held for a take-back)", len(ids), want, holds)
	}
	for _, p := range crashpoint.Names() {
		if reached[p] == 0 {
			t.Errorf("crash point %s was never reached", p)
		}
	}
	checkCrashRun(ctx, t, bin, st, cur.Load(), ids, actions)
	t.Logf("crash run took %s; crash points reached: %v; %d of %d restarts resumed from a snapshot",
		time.Since(started).Round(time.Second), reached, fromSnapshot, len(plan))
}

// waitAllEnded waits until the server at url lists no execution as
// requested, scheduling, scheduled or running; the test fails at ctx's
// deadline, naming one that is still open.
func waitAllEnded(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	for _, status := range []string{"requested", "scheduling", "scheduled", "running"} {
		for {
			var page struct {
				Executions []projections.ExecutionView `json:"executions"`
			}
			if _, err := call(ctx, "GET", url+"/api/v1/executions?limit=5&status="+status, nil, nil, &page); err != nil {
				t.Fatal(err)
			}
			if len(page.Executions) == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("executions still %s at the deadline, e.g. %+v", status, page.Executions[0])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// checkCrashRun waits until every execution has ended, then checks: the
// live read model equals one rebuilt from position 0 (`turnstile rebuild`);
// queue_stats totals equal counts taken from the log; after a clean stop,
// `turnstile audit` passes (the handoff rule, owners, FIFO grants and the
// limits at every position, one end per execution); every request is in the
// log and ended exactly once, as its runner says it must; no two attempts of
// an execution overlap.
func checkCrashRun(ctx context.Context, t *testing.T, bin string, st crashStore, srv *serveProc, ids, actions map[string]string) {
	t.Helper()
	waitAllEnded(ctx, t, srv.url)
	code, out, errOut := runCLI(ctx, t, bin, st.env, "rebuild", "--server", srv.url)
	if code != 0 {
		t.Errorf("turnstile rebuild --server: exit %d\n%s%s", code, out, errOut)
	}
	var stats struct {
		QueueStats []projections.QueueStats `json:"queue_stats"`
	}
	if _, err := call(ctx, "GET", srv.url+"/api/v1/queue-stats", nil, nil, &stats); err != nil {
		t.Fatal(err)
	}
	srv.stop(t)

	code, out, errOut = runCLI(ctx, t, bin, st.env, append([]string{"audit"}, st.cli...)...)
	if code != 0 {
		t.Errorf("turnstile audit: exit %d\n%s%s", code, clipLines(out, 40), errOut)
	}
	store, err := st.open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rep := auditLog(ctx, t, store)
	sum := checkLifecycles(ctx, t, store, ids, actions)
	checkStatsMatchLog(ctx, t, store, stats.QueueStats)
	if rep.Executions != len(ids)+sum.children {
		t.Errorf("the log holds %d executions, want %d requested and %d with_items children", rep.Executions, len(ids), sum.children)
	}
	t.Logf("%d events; %d executions (%d requested, %d children) by status %v; %d handed over again after a crash, %d given up after max_attempts",
		rep.Events, rep.Executions, len(ids), sum.children, rep.ByStatus, sum.retried, sum.gaveUp)
}

// runCLI runs the turnstile binary with the given arguments and extra environment.
func runCLI(ctx context.Context, t *testing.T, bin string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("turnstile %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

func clipLines(s string, n int) string {
	lines := strings.SplitAfter(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "") + fmt.Sprintf("… (%d more lines)\n", len(lines)-n)
}

type lifecycleSummary struct {
	children, retried, gaveUp int
}

// takeBackCodes are the failures that say the executor gave an execution up
// after its handoffs were taken back max_attempts times: a legitimate end
// under crashes, not a lost execution.
var takeBackCodes = map[string]bool{domain.FailWorkerLost: true, domain.FailScheduledTimeout: true}

// checkLifecycles reads every execution's stream (each request and each
// with_items child) and checks, event by event: exactly one terminal event,
// and it is the last; attempts never overlap (attempt a+1 is handed over only
// after attempt a was taken back, nothing is written under attempt a after
// that, and every attempt runs at most once); and the outcome is the one the
// runner gives (core.fail fails, the others complete), unless the executor
// gave the execution up after max_attempts take-backs (with actions nil, the
// outcome is not checked).
func checkLifecycles(ctx context.Context, t *testing.T, store eventstore.Store, ids, actions map[string]string) lifecycleSummary {
	t.Helper()
	var sum lifecycleSummary
	failedParents, gaveUp, children := map[string]string{}, map[string]bool{}, map[string][]string{}
	todo := make([]string, 0, len(ids))
	for id := range ids {
		todo = append(todo, id)
	}
	for len(todo) > 0 {
		id := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		evs, err := store.ReadStream(ctx, domain.ExecutionStream(id), 0, 10_000)
		if err != nil {
			t.Fatalf("execution %s: %v", id, err)
		}
		var (
			attempt, ran, ends int
			takenBack          = true // no attempt is out yet
			runner             string
			parent             bool
			final              domain.Event
		)
		for i := range evs {
			env := &evs[i]
			ev, err := codec.Events.Decode(env)
			if err != nil {
				t.Fatal(err)
			}
			if ends > 0 {
				t.Errorf("execution %s: %s after its terminal event", id, env.Type)
			}
			switch e := ev.(type) {
			case domain.ExecutionRequested:
				runner = actions[e.Action]
				parent = len(e.WithItems) > 0 || e.Items > 0
			case domain.ExecutionChildrenRequested:
				for k := e.First; k < e.First+e.Count; k++ {
					todo = append(todo, domain.ChildID(id, k))
					children[id] = append(children[id], domain.ChildID(id, k))
					sum.children++
				}
			case domain.ExecutionScheduled:
				if !takenBack {
					t.Errorf("execution %s: attempt %d handed over while attempt %d was still out", id, e.Attempt, attempt)
				}
				if e.Attempt != attempt+1 {
					t.Errorf("execution %s: attempt %d follows attempt %d", id, e.Attempt, attempt)
				}
				attempt, takenBack = e.Attempt, false
			case domain.ExecutionRunning:
				if parent {
					break // a with_items parent runs in the executor's hands, with no handoff
				}
				if e.Attempt != attempt || takenBack {
					t.Errorf("execution %s: running under attempt %d while attempt %d is current (taken back: %v)", id, e.Attempt, attempt, takenBack)
				}
				ran++
			case domain.ExecutionHandoffExpired:
				if e.Attempt != attempt {
					t.Errorf("execution %s: attempt %d expired while attempt %d is current", id, e.Attempt, attempt)
				}
				takenBack = true
			case domain.ExecutionAbandoned:
				if e.Attempt != attempt {
					t.Errorf("execution %s: attempt %d abandoned while attempt %d is current", id, e.Attempt, attempt)
				}
				takenBack = true
			}
			if env.Owner == domain.OwnerWorker && takenBack {
				t.Errorf("execution %s: worker %s wrote %s after its attempt was taken back", id, env.Writer, env.Type)
			}
			if terminalType(env.Type) {
				ends++
				final = ev
			}
		}
		if ends != 1 {
			t.Errorf("execution %s has %d terminal events", id, ends)
			continue
		}
		if ran > attempt {
			t.Errorf("execution %s ran %d times with %d handoffs", id, ran, attempt)
		}
		if attempt > 1 {
			sum.retried++
		}
		if actions == nil {
			continue // no outcome expected (checkAttempts)
		}
		switch e := final.(type) {
		case domain.ExecutionCompleted:
			if runner == "core.fail" {
				t.Errorf("execution %s of a core.fail action completed", id)
			}
		case domain.ExecutionFailed:
			switch {
			case takeBackCodes[e.Code]:
				sum.gaveUp++
				gaveUp[id] = true
			case runner == "core.fail":
			case parent && e.Code == domain.FailItems:
				failedParents[id] = runner // fine only if a child was given up: checked below
			default:
				t.Errorf("execution %s of a %s action failed: %s %s", id, runner, e.Code, e.Error)
			}
		default:
			t.Errorf("execution %s ended with %T", id, final)
		}
	}
	for id, runner := range failedParents {
		if !slices.ContainsFunc(children[id], func(c string) bool { return gaveUp[c] }) {
			t.Errorf("with_items parent %s of a %s action failed with no child given up", id, runner)
		}
	}
	return sum
}

// checkAttempts is checkLifecycles without expectations on the outcomes:
// one end per execution and no overlapping attempts. It returns how many
// executions were handed over more than once.
func checkAttempts(ctx context.Context, t *testing.T, store eventstore.Store, ids map[string]string) (retried int) {
	t.Helper()
	return checkLifecycles(ctx, t, store, ids, nil).retried
}

func terminalType(typ string) bool {
	switch typ {
	case domain.TypeExecutionCompleted, domain.TypeExecutionFailed, domain.TypeExecutionTimedOut,
		domain.TypeExecutionCancelled, domain.TypeExecutionRejected:
		return true
	}
	return false
}

// checkStatsMatchLog compares queue_stats totals with counts taken straight
// from the log.
func checkStatsMatchLog(ctx context.Context, t *testing.T, store eventstore.Store, stats []projections.QueueStats) {
	t.Helper()
	action := map[string]string{}
	counts := map[string]map[string]uint64{}
	count := func(ref, what string) {
		if counts[ref] == nil {
			counts[ref] = map[string]uint64{}
		}
		counts[ref][what]++
	}
	parents := map[string]bool{}
	err := eachEvent(ctx, store, 0, func(env *domain.Envelope) error {
		cat, id := domain.SplitStream(env.Stream)
		if cat != domain.StreamExecution {
			return nil
		}
		if env.Type == domain.TypeExecutionRequested {
			ev, err := codec.Events.Decode(env)
			if err != nil {
				return err
			}
			req := ev.(domain.ExecutionRequested)
			action[id] = req.Action
			parents[id] = len(req.WithItems) > 0 || req.Items > 0
			return nil
		}
		if !parents[id] { // a with_items parent never queues: the stats count its children
			count(action[id], env.Type)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		c := counts[s.Action]
		got := []uint64{s.TotalGranted, s.TotalCompleted, s.TotalFailed, s.TotalTimedOut, s.TotalCancelled, s.TotalRejected}
		want := []uint64{c[domain.TypeExecutionScheduling], c[domain.TypeExecutionCompleted], c[domain.TypeExecutionFailed],
			c[domain.TypeExecutionTimedOut], c[domain.TypeExecutionCancelled], c[domain.TypeExecutionRejected]}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("queue_stats of %s (granted, completed, failed, timed out, cancelled, rejected) = %v, the log says %v", s.Action, got, want)
		}
		if ended := s.TotalCompleted + s.TotalFailed + s.TotalTimedOut + s.TotalCancelled + s.TotalRejected; ended != s.TotalEnqueued+s.TotalRejected {
			t.Errorf("queue_stats of %s: %d ended, %d enqueued and %d rejected", s.Action, ended, s.TotalEnqueued, s.TotalRejected)
		}
	}
}
