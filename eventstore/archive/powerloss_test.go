package archive_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

// TestArchiveAndTrimPowerLoss: the archiver's move (Write the log before a
// position to the archive, then Trim the live log there) on one simulated
// disk, the power cut at each of its file operations in turn (every fifth
// with -short), the unsynced
// tail of each file torn at random. After the reboot the live log and the
// archive open, every event is in one of them (History reads the whole log
// as it was, every segment verifying, and the live log continues the
// archive), and the move done again completes. A write not synced before
// its rename, or a rename whose directory is not synced before the trim,
// loses events here.
func TestArchiveAndTrimPowerLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const events, before = 400, 330
	keep := []string{"queue-q"}
	opts := embedded.Options{HotEvents: -1, Preallocate: -1, GroupCommitWait: -1}
	rng := rand.New(rand.NewPCG(3, 4))
	setUp := func() (*diskfs.Sim, *embedded.Store, *archive.Archive, []domain.Envelope) {
		disk := diskfs.NewSim()
		s, err := embedded.OpenFS(disk, "/data", opts)
		if err != nil {
			t.Fatal(err)
		}
		for i := range events {
			stream := fmt.Sprintf("execution-%d", i%37)
			if i%5 == 0 {
				stream = "queue-q"
			}
			e := domain.Envelope{ID: uuid.New(), Type: "test.event", Owner: domain.OwnerAPI, Data: fmt.Appendf(nil, `{"i":%d}`, i)}
			if _, err := s.Append(ctx, stream, eventstore.Any, e); err != nil {
				t.Fatal(err)
			}
		}
		a, err := archive.OpenFS(disk, "/archive")
		if err != nil {
			t.Fatal(err)
		}
		a.SetSegmentEvents(60)
		return disk, s, a, archivetest.ReadAll(t, s, 0)
	}
	move := func(a *archive.Archive, s *embedded.Store) error {
		if err := a.Write(ctx, s, a.End(), before); err != nil {
			return err
		}
		return s.Trim(ctx, before, keep)
	}
	step := 1
	if testing.Short() {
		step = 5 // a sample of the cuts
	}
	cuts := 0
	for k := 1; ; k += step {
		disk, s, a, all := setUp()
		disk.PlanCut(k, rng)
		err := move(a, s)
		if !disk.WasCut() {
			if err != nil {
				t.Fatalf("the move: %v", err)
			}
			_ = s.Close()
			if cuts*step < 40 {
				t.Fatalf("only %d file operations in the move", k-1)
			}
			t.Logf("cut the move at %d of its %d file operations", cuts, k-1)
			return
		}
		cuts++
		if err != nil && !errors.Is(err, diskfs.ErrPowerCut) && !errors.Is(err, eventstore.ErrClosed) {
			t.Fatalf("cut at operation %d: the move failed with %v, not the power cut", k, err)
		}
		img := disk.CutNow()
		_ = a.Close()
		_ = s.Close()

		disk = diskfs.FromImage(img)
		what := fmt.Sprintf("cut at operation %d (%s)", k, errString(err))
		s, err = embedded.OpenFS(disk, "/data", opts)
		if err != nil {
			t.Fatalf("%s: the live log does not open: %v", what, err)
		}
		a, err = archive.OpenFS(disk, "/archive")
		if err != nil {
			t.Fatalf("%s: the archive does not open: %v", what, err)
		}
		a.SetSegmentEvents(60)
		checkWhole(t, what, a, s, all)
		if err := move(a, s); err != nil {
			t.Fatalf("%s: the move again after the reboot: %v", what, err)
		}
		if first, _, _ := s.Start(ctx); first != before || a.End() != before {
			t.Fatalf("%s: after the move again the live log starts at %d and the archive ends at %d, want %d", what, first, a.End(), before)
		}
		checkWhole(t, what+", moved again", a, s, all)
		_ = a.Close()
		_ = s.Close()
	}
}

// checkWhole checks that archive + live log hold exactly all, that every
// segment verifies and that the live log continues the archive.
func checkWhole(t *testing.T, what string, a *archive.Archive, s *embedded.Store, all []domain.Envelope) {
	t.Helper()
	ctx := context.Background()
	h := archive.History{Archive: a, Live: s}
	if _, err := h.Continues(ctx); err != nil {
		t.Fatalf("%s: the live log does not continue the archive: %v", what, err)
	}
	if _, err := a.Verify(ctx, nil); err != nil {
		t.Fatalf("%s: the archive does not verify: %v", what, err)
	}
	var got []domain.Envelope
	for from := uint64(0); ; {
		evs, err := h.ReadAll(ctx, from, 1000)
		if err != nil {
			t.Fatalf("%s: reading archive + live log from %d: %v", what, from, err)
		}
		if len(evs) == 0 {
			break
		}
		got = append(got, evs...)
		from = evs[len(evs)-1].Position + 1
	}
	if len(got) != len(all) {
		t.Fatalf("%s: archive (%d segments, to %d) + live log hold %d events, want %d", what, len(a.Segments()), a.End(), len(got), len(all))
	}
	for i := range all {
		if got[i].Position != all[i].Position || got[i].ID != all[i].ID || got[i].Hash != all[i].Hash || string(got[i].Data) != string(all[i].Data) {
			t.Fatalf("%s: position %d is %+v, want %+v", what, all[i].Position, got[i], all[i])
		}
	}
}

func errString(err error) string {
	if err == nil {
		return "the move returned"
	}
	return err.Error()
}
