package projections

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// Checkpoints stores, per reader name, the log position it has processed up to
// (the next position to read).
type Checkpoints interface {
	Load(ctx context.Context, name string) (uint64, error) // 0 when none was saved
	Save(ctx context.Context, name string, next uint64) error
}

var checkpointName = regexp.MustCompile(`^[a-z0-9][a-z0-9_.\-]{0,99}$`)

// FileCheckpoints keeps checkpoints as small files in a directory, replaced
// atomically (write, fsync, rename).
type FileCheckpoints struct {
	Dir string
	mu  sync.Mutex
}

// Load returns the saved position of name, 0 if none.
func (f *FileCheckpoints) Load(_ context.Context, name string) (uint64, error) {
	if !checkpointName.MatchString(name) {
		return 0, fmt.Errorf("checkpoint name %q is invalid", name)
	}
	b, err := os.ReadFile(filepath.Join(f.Dir, name))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("load checkpoint %s: %w", name, err)
	}
	v, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("load checkpoint %s: %w", name, err)
	}
	return v, nil
}

// Save records that name has processed everything before next.
func (f *FileCheckpoints) Save(_ context.Context, name string, next uint64) error {
	if !checkpointName.MatchString(name) {
		return fmt.Errorf("checkpoint name %q is invalid", name)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := (diskfs.OS{}).MkdirAll(f.Dir); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", name, err)
	}
	tmp := filepath.Join(f.Dir, "."+name+".tmp")
	fh, err := (diskfs.OS{}).Create(tmp) // the owner's alone, as the log's files
	if err != nil {
		return fmt.Errorf("save checkpoint %s: %w", name, err)
	}
	_, werr := fmt.Fprintf(fh, "%d\n", next)
	serr := fh.Sync()
	cerr := fh.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", name, err)
	}
	if err := os.Rename(tmp, filepath.Join(f.Dir, name)); err != nil {
		return fmt.Errorf("save checkpoint %s: %w", name, err)
	}
	return nil
}

// MemCheckpoints keeps checkpoints in memory (tests, and readers that fold
// from the start anyway).
type MemCheckpoints struct {
	mu sync.Mutex
	m  map[string]uint64
}

// Load returns the saved position of name, 0 if none.
func (m *MemCheckpoints) Load(_ context.Context, name string) (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.m[name], nil
}

// Save records the position of name.
func (m *MemCheckpoints) Save(_ context.Context, name string, next uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string]uint64{}
	}
	m.m[name] = next
	return nil
}
