//go:build unix

package diskfs

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/turnstile/turnstile/eventstore"
)

// lockDir creates (if needed) and locks the lock file at path with flock, so
// that one open Store at a time, in any process, owns the directory. Locks
// belong to the open file, so a second Open in the same process fails too.
func lockDir(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, FileMode)
	if err != nil {
		return nil, fmt.Errorf("embedded: opening lock file: %w", err)
	}
	if err := f.Chmod(FileMode); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("embedded: opening lock file: %w", err)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("embedded: locking: %w", err)
	}
	var lerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			lerr = syscall.Flock(int(fd), syscall.LOCK_EX|syscall.LOCK_NB)
			if !errors.Is(lerr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		lerr = err
	}
	if lerr != nil {
		_ = f.Close()
		if errors.Is(lerr, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("embedded: %s: %w", path, eventstore.ErrLocked)
		}
		return nil, fmt.Errorf("embedded: locking %s: %w", path, lerr)
	}
	// Who holds it, for people looking at the directory; not relied upon.
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}
