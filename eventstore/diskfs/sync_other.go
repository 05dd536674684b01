//go:build !linux

package diskfs

import "os"

// fdatasync flushes f to the disk (fsync: this platform has no fdatasync in
// package syscall).
func fdatasync(f *os.File) error { return f.Sync() }

// startWriteback is a no-op where sync_file_range does not exist.
func startWriteback(*os.File, int64, int64) {}
