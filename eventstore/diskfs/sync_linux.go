package diskfs

import (
	"errors"
	"os"
	"syscall"
)

// fdatasync flushes f's data, and the metadata needed to read it back, to the disk.
func fdatasync(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) {
		for {
			serr = syscall.Fdatasync(int(fd))
			if !errors.Is(serr, syscall.EINTR) {
				return
			}
		}
	}); err != nil {
		return err
	}
	return serr
}

// syncFileRangeWrite is SYNC_FILE_RANGE_WRITE: start write-back, do not wait.
const syncFileRangeWrite = 2

// startWriteback asks the kernel to start writing [off, off+n) of f to the
// disk without waiting. It is only a hint; errors are ignored.
func startWriteback(f *os.File, off, n int64) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SyncFileRange(int(fd), off, n, syncFileRangeWrite)
	})
}
