package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
)

// openHistory opens the log (--store or --data) and, with --archive DIR,
// the archive in DIR: the store it returns reads archive + live log as one
// history (archive.History), after checking that the live log continues the
// archive. closeAll closes what it opened.
func openHistory(ctx context.Context, storeURL, dataDir, archiveDir string) (store eventstore.Store, closeAll func(), err error) {
	live, _, err := openStore(storeURL, dataDir)
	if err != nil {
		return nil, nil, err
	}
	if archiveDir == "" {
		return live, func() { live.Close() }, nil
	}
	a, err := openArchive(archiveDir)
	if err != nil {
		live.Close()
		return nil, nil, err
	}
	closeAll = func() { a.Close(); live.Close() }
	h := archive.History{Archive: a, Live: live}
	if _, err := h.Continues(ctx); err != nil {
		closeAll()
		return nil, nil, fmt.Errorf("--archive %s: the live log does not continue the archive: %w", archiveDir, err)
	}
	return h, closeAll, nil
}

// openArchive opens an existing archive directory (a mistyped one is a
// usage error, not a new empty archive).
func openArchive(dir string) (*archive.Archive, error) {
	info, err := os.Stat(dir)
	if err != nil || !info.IsDir() {
		return nil, usageError{fmt.Errorf("--archive %s: not a directory", dir)}
	}
	a, err := archive.Open(dir)
	if errors.Is(err, archive.ErrArchive) {
		return nil, fmt.Errorf("--archive %s: %w", dir, err)
	}
	return a, err
}
