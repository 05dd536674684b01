package embedded

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// TestLevelsMergeGeometrically seals every few events for a long while: the
// sealed part stays a handful of levels whose sizes grow geometrically, the
// bytes written to level files per sealed event grow with the logarithm of
// the log (not with the log, as rewriting one sealed file at each seal
// would), and every look-up still answers: ReadAll, ReadStream of streams
// spread over many levels, re-appends of old event ids, a reopen.
func TestLevelsMergeGeometrically(t *testing.T) {
	t.Parallel()
	const hot, n = 8, 6000
	dir := t.TempDir()
	opts := Options{HotEvents: hot, NoSync: true}
	s := openT(t, dir, opts)
	s.sealSpacing = 0
	var evs []domain.Envelope
	for i := range n {
		e := ev("test.level", i)
		evs = append(evs, e)
		mustAppend(t, s, fmt.Sprintf("execution-%d", i%37), eventstore.Any, e)
		if i%hot == hot-1 {
			sealNow(t, s)
		}
	}
	s.mu.RLock()
	x := s.sealed
	s.mu.RUnlock()
	sizes := make([]uint64, len(x.levels))
	for i, l := range x.levels {
		sizes[i] = l.events()
	}
	t.Logf("%d events sealed in %d levels %v; %d merges; %.0f bytes written to level files per event",
		x.events(), len(x.levels), sizes, s.merges.Load(), float64(s.sealBytes.Load())/float64(x.events()))
	// Levels of one tier merge fanIn at a time: at most fanIn-1 per tier.
	tiers := tier(n, hot) + 1
	if len(x.levels) > tiers*(fanIn-1) {
		t.Fatalf("%d levels for %d events (%d tiers): merges are not keeping up: %v", len(x.levels), n, tiers, sizes)
	}
	for i := 1; i < len(sizes); i++ {
		if tier(sizes[i], hot) > tier(sizes[i-1], hot) {
			t.Fatalf("level %d is of a higher tier than the older one before it: %v", i, sizes)
		}
	}
	// Each event is written once by its seal and about once per tier by
	// merges, where rewriting one sealed file at each seal (with the hot
	// part at 1/32 of the sealed part) writes it some 32 times.
	perEvent := float64(s.sealBytes.Load()) / float64(x.events())
	if rewrite := float64(x.levels[0].size) / float64(x.levels[0].events()); perEvent > float64(2*tiers+2)*rewrite {
		t.Fatalf("%.0f bytes written per sealed event, more than (2 × tiers + 2) × %.0f", perEvent, rewrite)
	}
	check := func(what string) {
		got := readAllT(t, s)
		if len(got) != n {
			t.Fatalf("%s: %d events, want %d", what, len(got), n)
		}
		for i := range got {
			if got[i].ID != evs[i].ID {
				t.Fatalf("%s: position %d holds %s, want %s", what, i, got[i].ID, evs[i].ID)
			}
		}
		for _, k := range []int{0, 5, 36} {
			name := fmt.Sprintf("execution-%d", k)
			var want []domain.Envelope
			for _, e := range got {
				if e.Stream == name {
					want = append(want, e)
				}
			}
			requireStream(t, s, what, name, want)
			part, err := s.ReadStream(ctxT(t), name, 50, 30)
			if err != nil || len(part) != 30 || part[0].Version != 50 {
				t.Fatalf("%s: ReadStream(%s, 50, 30) = %d events, %v", what, name, len(part), err)
			}
		}
		for _, i := range []int{0, 1, n / 2, n - 1} {
			res, err := s.Append(ctxT(t), got[i].Stream, eventstore.Any, withoutStoreFields(got[i]))
			if err != nil || res.Position != uint64(i) {
				t.Fatalf("%s: re-append of position %d = %+v, %v", what, i, res, err)
			}
		}
	}
	check("after the merges")
	requireClose(t, s)
	s = openT(t, dir, opts)
	if s.loadedSealed != n {
		t.Fatalf("Open used levels of %d events, want %d", s.loadedSealed, n)
	}
	check("after reopen")
}

// TestLevelMergeCrash: a merge writes its level file, renames it into
// place, and only then (once the committer uses it) removes the levels it
// replaces. Open after a crash at either point uses the levels that reach
// furthest and removes the others; a merged file that is torn is ignored
// for the inputs.
func TestLevelMergeCrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{HotEvents: -1, NoSync: true, SegmentBytes: DefaultSegmentBytes}) // one log file: the test copies it
	for round := range fanIn {
		for i := range 10 {
			mustAppend(t, s, fmt.Sprintf("execution-%d", i%3), eventstore.Any, richEvent(10*round+i))
		}
		if round < fanIn-1 {
			sealNow(t, s)
		}
	}
	before := dirState(t, dir) // fanIn-1 levels, and the log of all the events
	written := readAllT(t, s)
	sealNow(t, s) // the fanIn-th level: fanIn levels of one tier, which merge
	if s.merges.Load() != 1 {
		t.Fatalf("%d merges, want 1", s.merges.Load())
	}
	crash(s)
	after := dirState(t, dir)
	merged := after[levelName(0, 40)]
	if merged == "" || len(levelFiles(t, dir)) != 1 {
		t.Fatalf("after the merge: %v", levelFiles(t, dir))
	}
	// The last input as its seal wrote it: Close writes the same level.
	last := levelName(30, 40)
	var lastLevel []byte
	{
		d := copyDirFiles(t, before)
		o := openT(t, d, Options{HotEvents: -1, NoSync: true})
		if o.loadedSealed != 30 {
			t.Fatalf("the levels before the merge cover %d events", o.loadedSealed)
		}
		requireClose(t, o)
		var err error
		if lastLevel, err = os.ReadFile(filepath.Join(d, last)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name   string
		merged string // "": none
	}{
		{"merged, inputs not removed yet", merged},
		{"merged file torn", merged[:len(merged)/2]},
		{"merged file missing", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			files := map[string]string{logName: after[logName], last: string(lastLevel)}
			for name, b := range before {
				if _, _, ok := parseLevelName(name); ok {
					files[name] = b
				}
			}
			if c.merged != "" {
				files[levelName(0, 40)] = c.merged
			}
			d := copyDirFiles(t, files)
			s := openT(t, d, Options{HotEvents: -1, NoSync: true})
			if s.loadedSealed != 40 {
				t.Fatalf("Open used levels of %d events, want 40", s.loadedSealed)
			}
			requireEvents(t, "after Open", written, readAllT(t, s))
			for i := range 3 {
				requireStream(t, s, "after Open", fmt.Sprintf("execution-%d", i), written)
			}
			requireClose(t, s)
			// What is left holds a chain of levels over [0, 40) (a merge
			// that Close cut short may leave its inputs too: the next Open
			// removes them), and the next Open uses it.
			reach := map[uint64]bool{0: true}
			for range 4 {
				for _, name := range levelFiles(t, d) {
					if a, b, ok := parseLevelName(name); ok && reach[a] {
						reach[b] = true
					}
				}
			}
			if !reach[40] {
				t.Fatalf("level files after Open and Close: %v", levelFiles(t, d))
			}
			s = openT(t, d, Options{HotEvents: -1, NoSync: true})
			if s.loadedSealed != 40 {
				t.Fatalf("the next Open used levels of %d events, want 40", s.loadedSealed)
			}
			requireClose(t, s)
		})
	}
}

// copyDirFiles makes a directory holding files (name → contents).
func copyDirFiles(t testing.TB, files map[string]string) string {
	t.Helper()
	d := t.TempDir()
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(d, name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// TestLevelLeftovers: Open removes a level file half written when a crash
// cut its seal short, and a directory with level files but no log is
// corrupt, not a fresh store.
func TestLevelLeftovers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{HotEvents: -1, NoSync: true})
	for i := range 10 {
		mustAppend(t, s, "execution-1", eventstore.Any, ev("test.l", i))
	}
	requireClose(t, s)
	tmp := filepath.Join(dir, levelName(10, 20)+tmpSuffix)
	if err := os.WriteFile(tmp, []byte("half a level"), 0o644); err != nil {
		t.Fatal(err)
	}
	s = openT(t, dir, Options{HotEvents: -1, NoSync: true})
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("%s is still there after Open: %v", tmp, err)
	}
	requireClose(t, s)
	only := t.TempDir()
	if err := os.WriteFile(filepath.Join(only, levelName(0, 10)), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(only, Options{}); !errors.Is(err, eventstore.ErrCorrupt) {
		t.Fatalf("Open of a directory with a level file and no log = %v, want ErrCorrupt", err)
	}
}
