package node

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
)

// TestDataFilesAreTheOwnersAlone: with umask 0 (so that only the code can
// narrow the modes), everything serve writes into a new data directory (the
// embedded log's segments, sealed and level files, start file and lock; the
// forwarder's checkpoints; the read model's snapshot) and into a new
// archive (segments, indexes) is 0600, every directory 0700. Then a data
// directory and an archive opened up by hand (0755, a file 0644) open with
// a warning naming each path and its mode, and keep their modes.
func TestDataFilesAreTheOwnersAlone(t *testing.T) {
	old := syscall.Umask(0) // (not parallel: the umask is the process's)
	defer syscall.Umask(old)
	ctx := context.Background()
	root := t.TempDir()
	data, archDir := filepath.Join(root, "data"), filepath.Join(root, "archive")

	store, err := embedded.Open(filepath.Join(data, "log"), embedded.Options{SegmentBytes: embedded.MinSegmentBytes, HotEvents: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		e := domain.Envelope{ID: uuid.New(), Type: "test.event", Owner: domain.OwnerAPI, Data: fmt.Appendf(nil, `{"i":%d,"pad":%q}`, i, strings.Repeat("x", 200))}
		if _, err := store.Append(ctx, fmt.Sprintf("execution-%d", i%7), eventstore.Any, e); err != nil {
			t.Fatal(err)
		}
	}
	arch, err := archive.Open(archDir)
	if err != nil {
		t.Fatal(err)
	}
	arch.SetSegmentEvents(100)
	if err := arch.Write(ctx, store, 0, 250); err != nil {
		t.Fatal(err)
	}
	if err := store.Trim(ctx, 250, nil); err != nil { // the start file
		t.Fatal(err)
	}
	arch.Close()
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	cps := &projections.FileCheckpoints{Dir: CheckpointDir("embedded", data)}
	if err := cps.Save(ctx, "forwarder", 300); err != nil {
		t.Fatal(err)
	}
	if err := (projections.SnapshotFiles{Dir: CheckpointDir("embedded", data)}).Save("views", 300, "id", map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}

	var files []string
	for _, dir := range []string{data, archDir} {
		err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			want := fs.FileMode(0o600)
			if d.IsDir() {
				want = 0o700
			} else {
				files = append(files, strings.TrimPrefix(path, root+"/"))
			}
			if got := info.Mode().Perm(); got != want {
				t.Errorf("%s: mode %#o, want %#o", path, got, want)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	joined := strings.Join(files, " ")
	for _, want := range []string{"data/log/LOCK", "data/log/start", "data/log/sealed", "data/checkpoints/forwarder", "data/checkpoints/views.snapshot", ".jsonl.gz", ".index.json.gz"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no file %s among %s: the test checks less than it says", want, joined)
		}
	}

	// Opened up by hand: warned of, not changed.
	seg := filepath.Join(archDir, arch.Segments()[0].Name)
	for path, mode := range map[string]os.FileMode{data: 0o755, filepath.Join(data, "log"): 0o750, filepath.Join(data, "checkpoints", "forwarder"): 0o644, archDir: 0o755, seg: 0o640} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	s, _, err := OpenStoreLogged("", data, log)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	a, err := openArchive(archDir, 0, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.(*archive.Archive).Close()
	for path, mode := range map[string]string{data: "0755", filepath.Join(data, "log"): "0750", filepath.Join(data, "checkpoints", "forwarder"): "0644", archDir: "0755", seg: "0640"} {
		if !strings.Contains(logged.String(), fmt.Sprintf("path=%s mode=%s", path, mode)) {
			t.Errorf("no warning naming %s and its mode %s:\n%s", path, mode, logged.String())
		}
	}
	if n := strings.Count(logged.String(), "level=WARN"); n != 5 {
		t.Errorf("%d warnings, want the 5 loose entries:\n%s", n, logged.String())
	}
	if info, err := os.Stat(data); err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("the data directory's mode was changed: %v %v", info.Mode(), err)
	}
}
