package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/services/crashpoint"
)

// TestArchiveCrash kills `turnstile serve --archive` (embedded store,
// checkpoints every 300 ms of log time, archived once 1.5 s old, segments of
// 300 events) with SIGKILL at each step of archiving, each crash point of
// crashpoint.ArchiveNames twice (a checkpoint's parts written and not its
// marker; the segments written and the live log not trimmed; the live log
// trimmed) and at random instants, while clients submit executions. After a
// clean restart every execution ends; then, with the server stopped, the
// archive + live log is one history that audits clean, in which every
// request ended exactly once; the live log starts after position 0 and
// continues the archive.
func TestArchiveCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("kills real processes for a minute or so")
	}
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bin := turnstileBinary(t)
	dir, archDir := t.TempDir(), t.TempDir()
	args := []string{"--data", dir, "--snapshot-every", "300", "--checkpoint-every", "300ms",
		"--archive", archDir, "--archive-after", "1500ms", "--archive-segment-events", "300"}
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 20))
	var plan []crashStep
	for range 2 {
		for _, p := range crashpoint.ArchiveNames() {
			plan = append(plan, crashStep{point: p, pass: 1 + rng.IntN(2)}, crashStep{})
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	// The first server starts unarmed (the action is defined on it): the
	// plan starts with a random kill, and each step arms the next start.
	i := slices.IndexFunc(plan, func(s crashStep) bool { return s.point == "" })
	plan[0], plan[i] = plan[i], plan[0]
	t.Logf("seed %d: %d crashes", seed, len(plan))

	start := func(step crashStep) *serveProc {
		var env []string
		if step.point != "" {
			env = append(env, fmt.Sprintf("%s=%s:%d", crashpoint.Env, step.point, step.pass))
		}
		return startServeWith(t, bin, serveOpts{args: args, env: env, mayDie: step.point != ""})
	}
	var cur atomic.Pointer[serveProc]
	cur.Store(start(crashStep{}))
	const ref = "arc.a"
	p := domain.Policy{Ref: ref, Runner: "core.sleep", MaxConcurrent: 4, MaxAttempts: 10}
	if _, err := call(ctx, "POST", cur.Load().url+"/api/v1/actions", p, nil, nil); err != nil {
		t.Fatal(err)
	}

	// Submitters: request k until it is accepted (its idempotency key makes
	// a retry after a crash the same request).
	var (
		mu   sync.Mutex
		ids  = map[string]string{}
		next atomic.Int64
		stop atomic.Bool
		wg   sync.WaitGroup
	)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() && ctx.Err() == nil {
				k := next.Add(1)
				body := map[string]any{"action": ref, "input": map[string]any{"seconds": 0.002 + float64(k%5)*0.003}}
				for ctx.Err() == nil {
					var acc struct{ ID string }
					if _, err := call(ctx, "POST", cur.Load().url+"/api/v1/executions", body, map[string]string{"Idempotency-Key": fmt.Sprintf("arc-%d", k)}, &acc); err == nil {
						mu.Lock()
						ids[acc.ID] = ref
						mu.Unlock()
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	reached := map[string]int{}
	for j, step := range plan {
		p := cur.Load()
		if step.point == "" {
			time.Sleep(time.Duration(500+rng.IntN(1500)) * time.Millisecond)
			p.kill()
		} else {
			select {
			case <-p.done:
			case <-time.After(30 * time.Second):
				p.kill()
			}
			if !p.killedBySIGKILL() {
				t.Fatalf("crash point %s: the server ended without SIGKILL (%v):\n%s", step.point, p.state, p.logs.String())
			}
			if strings.Contains(p.logs.String(), "crash point "+step.point+" reached") {
				reached[step.point]++
			} else {
				t.Errorf("crash point %s:%d was not reached within 30s:\n%s", step.point, step.pass, p.logs.String())
			}
		}
		nextStep := crashStep{}
		if j+1 < len(plan) {
			nextStep = plan[j+1]
		}
		cur.Store(start(nextStep))
	}
	time.Sleep(time.Second) // some archiving on the last, unarmed server
	stop.Store(true)
	wg.Wait()
	srv := cur.Load()
	waitAllEnded(ctx, t, srv.url)
	srv.stop(t)
	for _, pt := range crashpoint.ArchiveNames() {
		if reached[pt] == 0 {
			t.Errorf("crash point %s was never reached", pt)
		}
	}

	live, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	arch := archivetest.Open(t, archDir)
	h := archive.History{Archive: arch, Live: live}
	first, _, err := live.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if eventstore.KeepsChain(live) { // (the chain's check of the boundary)
		if _, err := h.Continues(ctx); err != nil {
			t.Fatalf("the live log does not continue the archive: %v", err)
		}
	} else if end := arch.End(); end < first {
		t.Fatalf("the archive ends at %d, the live log starts at %d", end, first)
	}
	if first == 0 {
		t.Fatal("the live log was never trimmed")
	}
	rep := auditLog(ctx, t, h)
	sum := checkLifecycles(ctx, t, h, ids, map[string]string{ref: "core.sleep"})
	if rep.Executions != len(ids) || rep.Ended != len(ids) {
		t.Errorf("archive + live log: %d executions, %d ended; %d requested", rep.Executions, rep.Ended, len(ids))
	}
	segs, _ := filepath.Glob(filepath.Join(archDir, "segment-*.jsonl.gz"))
	t.Logf("%d events (live log from %d), %d archive segments; %d executions, %d handed over again after a crash; crash points reached %v",
		rep.Events, first, len(segs), len(ids), sum.retried, reached)
}
