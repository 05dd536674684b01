package embedded

// The file layer: every byte the store puts into its data directory, every
// sync, rename and truncate, goes through fileSystem and file. Production
// uses the operating system's files (osFS); the power-loss tests put a
// simulated disk under the store that, on a power cut, keeps only what was
// synced.

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// fileSystem is what the store does with its data directory.
type fileSystem interface {
	// ReadDir returns the names in dir; an error matching fs.ErrNotExist
	// if dir does not exist.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates dir and its parents if missing.
	MkdirAll(dir string) error
	// Open opens path for reading; an error matching fs.ErrNotExist if it
	// does not exist.
	Open(path string) (file, error)
	// OpenRW opens an existing path for reading and writing.
	OpenRW(path string) (file, error)
	// Create creates path, or truncates it, for writing.
	Create(path string) (file, error)
	// Rename replaces to with from. The new name is durable only after
	// SyncDir of its directory.
	Rename(from, to string) error
	// Remove removes path.
	Remove(path string) error
	// SyncDir makes dir's entries durable.
	SyncDir(dir string) error
	// Lock takes the lock on path (creating it) that makes one store at a
	// time own the directory; it fails with eventstore.ErrLocked when taken.
	Lock(path string) (io.Closer, error)
}

// file is an open file of the data directory. Written bytes are durable
// only after Sync or Datasync returns.
type file interface {
	io.ReaderAt
	io.WriterAt
	io.Writer
	io.Closer
	// Size returns the file's size.
	Size() (int64, error)
	// Truncate changes the file's size.
	Truncate(size int64) error
	// Sync makes the file's data and metadata durable (fsync).
	Sync() error
	// Datasync makes the file's data, and the metadata needed to read it
	// back, durable (fdatasync).
	Datasync() error
	// Writeback hints that [off, off+n) may start going to the disk now.
	Writeback(off, n int64)
}

// osFS is the operating system's file system.
type osFS struct{}

func (osFS) ReadDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(entries))
	for i, e := range entries {
		names[i] = e.Name()
	}
	return names, nil
}

func (osFS) MkdirAll(dir string) error { return os.MkdirAll(dir, 0o755) }

func (osFS) Open(path string) (file, error) { return wrapOS(os.Open(path)) }

func (osFS) OpenRW(path string) (file, error) { return wrapOS(os.OpenFile(path, os.O_RDWR, 0)) }

func (osFS) Create(path string) (file, error) {
	return wrapOS(os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644))
}

func (osFS) Rename(from, to string) error { return os.Rename(from, to) }

func (osFS) Remove(path string) error { return os.Remove(path) }

func (osFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

func (osFS) Lock(path string) (io.Closer, error) {
	f, err := lockDir(path)
	if err != nil {
		return nil, err // not a nil *os.File in a non-nil interface
	}
	return f, nil
}

func wrapOS(f *os.File, err error) (file, error) {
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// osFile is an operating system file.
type osFile struct{ *os.File }

func (f osFile) Size() (int64, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

func (f osFile) Datasync() error { return fdatasync(f.File) }

func (f osFile) Writeback(off, n int64) { startWriteback(f.File, off, n) }

// isNotExist reports whether err says a file or directory is missing.
func isNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
