package sqlviews_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/eventstore/postgres"
	"github.com/turnstile/turnstile/internal/pgtest"
	"github.com/turnstile/turnstile/projections/sqlviews"
)

// childEnv makes the test binary a projector process (see childMain):
// "URL|log schema|views schema".
const childEnv = "TURNSTILE_SQLVIEWS_CHILD"

// childMain runs a projector over the given log into the given tables,
// printing "commit <next>" from inside each transaction after its rows are
// written, then pausing, so that the parent can kill it there.
func childMain() int {
	parts := strings.Split(os.Getenv(childEnv), "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "child: bad", childEnv)
		return 2
	}
	ctx := context.Background()
	store, err := postgres.OpenURL(ctx, parts[0], postgres.Options{Schema: parts[1]})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer store.Close()
	pool, _, err := sqlviews.Connect(ctx, parts[0], "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer pool.Close()
	p, err := sqlviews.New(ctx, pool, store, sqlviews.Options{Schema: parts[2], MaxBatch: 16})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	sqlviews.SetBeforeCommit(p, func(_ context.Context, next uint64) error {
		fmt.Printf("commit %d\n", next)
		time.Sleep(30 * time.Millisecond)
		return nil
	})
	if err := p.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

// TestKillProjectorProcessMidBatch runs the projector as a real process and
// kills it with SIGKILL while a transaction has written its rows and not
// committed, several times. After each kill the checkpoint is before that
// transaction and the tables equal a rebuild at the checkpoint; each
// restart resumes from it; at the end the tables equal a rebuild of the
// whole log.
func TestKillProjectorProcessMidBatch(t *testing.T) {
	store, logSchema := lifecycleLog(t)
	schema := viewsSchema(t)
	ctx, pool := pgtest.Context(t), sharedPool.Get(t)
	opts := sqlviews.Options{Schema: schema}
	h := head(t, store)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kills := 4
	if testing.Short() {
		kills = 2
	}
	var last uint64
	for round := range kills {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+pgtest.URL(t)+"|"+logSchema+"|"+schema)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(out)
		at := 1 + rng.IntN(6) // kill inside the at-th transaction
		var inFlight uint64
		for i := 0; i < at; i++ {
			if !sc.Scan() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("round %d: the child stopped before transaction %d", round, at)
			}
			f := strings.Fields(sc.Text())
			if len(f) != 2 || f[0] != "commit" {
				t.Fatalf("child said %q", sc.Text())
			}
			inFlight, _ = strconv.ParseUint(f[1], 10, 64)
		}
		if err := cmd.Process.Kill(); err != nil { // SIGKILL, inside the transaction
			t.Fatal(err)
		}
		_ = cmd.Wait()
		cp, err := sqlviews.Checkpoint(ctx, pool, opts)
		if err != nil {
			t.Fatal(err)
		}
		if cp >= inFlight || cp < last {
			t.Fatalf("round %d: checkpoint %d after a kill inside the transaction to %d (previous checkpoint %d)", round, cp, inFlight, last)
		}
		if at > 1 && cp <= last {
			t.Fatalf("round %d: %d transactions committed but the checkpoint stayed at %d", round, at-1, cp)
		}
		last = cp
		mustEqualRebuild(t, store, schema) // compares at the committed checkpoint
	}
	if last == 0 || last >= h {
		t.Fatalf("the kills happened at checkpoint %d of %d: not mid-log", last, h)
	}
	if err := newProjector(t, store, opts).CatchUpTo(ctx, h); err != nil {
		t.Fatal(err)
	}
	if rep := mustEqualRebuild(t, store, schema); rep.Position != h {
		t.Fatalf("at %d after the last restart, want %d", rep.Position, h)
	}
}
