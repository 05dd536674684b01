package archive_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

// childEnv, when set to LOG:ARCHIVE, makes the test binary a writer that
// archives the whole embedded log LOG into ARCHIVE and exits.
const childEnv = "TURNSTILE_ARCHIVE_KILL_CHILD"

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		logDir, dir, _ := strings.Cut(spec, ":")
		os.Exit(archiveChild(logDir, dir))
	}
	os.Exit(m.Run())
}

func archiveChild(logDir, dir string) int {
	ctx := context.Background()
	store, err := embedded.Open(logDir, embedded.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer store.Close()
	head, _ := store.Head(ctx)
	a, err := archive.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	a.SetSegmentEvents(700)
	// From the archive's end, as the archiver does after its trims (the
	// test checks the whole range once at the end).
	if err := a.Write(ctx, store, a.End(), head); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestKillDuringWrite kills a process writing the archive (SIGKILL) at
// random moments, up to 30 times, restarting it each time: every time the
// archive opens and never shrinks, and in the end it holds the log exactly
// once, verifies, and Write over the whole range finds every segment equal
// to the log.
func TestKillDuringWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("kills processes")
	}
	ctx := context.Background()
	logDir, dir := filepath.Join(t.TempDir(), "log"), t.TempDir()
	store, err := embedded.Open(logDir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var batch []domain.Envelope
	for i := 0; i < 20_000; i++ {
		batch = append(batch, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(fmt.Sprintf(`{"i": %d, "pad": "%0100d"}`, i, i))})
		if len(batch) == 500 {
			if _, err := store.Append(ctx, fmt.Sprintf("s-%d", i%7), eventstore.Any, batch...); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	head, _ := store.Head(ctx)
	store.Close()

	rng := rand.New(rand.NewPCG(20, 26))
	last, kills := uint64(0), 0
	// Up to 30 writers killed at a random moment, then one left to finish
	// (on a loaded machine a writer may not get far between kills).
	for round := 0; round <= 30 && last < head; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+logDir+":"+dir)
		out := &strings.Builder{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		kill := time.After(time.Duration(20+rng.IntN(300)) * time.Millisecond)
		if round == 30 {
			kill = nil
		}
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: the writer failed: %v\n%s", round, err, out)
			}
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			kills++
		}
		a, err := archive.Open(dir)
		if err != nil {
			t.Fatalf("round %d: after a kill the archive does not open: %v", round, err)
		}
		end := a.End()
		a.Close()
		if end < last {
			t.Fatalf("round %d: the archive shrank from %d to %d", round, last, end)
		}
		last = end
	}
	if kills == 0 || last != head {
		t.Fatalf("%d kills, archive end %d of %d", kills, last, head)
	}
	a := archivetest.Open(t, dir)
	v, err := a.Verify(ctx, nil)
	if err != nil || v.Events != head || v.Segments != int((head+699)/700) {
		t.Fatalf("after %d kills: %+v %v", kills, v, err)
	}
	store, err = embedded.Open(logDir, embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	if err := a.Write(ctx, store, 0, head); err != nil { // checks every segment against the log
		t.Fatal(err)
	}
	temps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	t.Logf("%d kills; %d segments; %d temporary files left by the last kill", kills, v.Segments, len(temps))
}
