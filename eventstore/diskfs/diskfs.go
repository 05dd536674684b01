// Package diskfs is the file layer of the stores that keep files (the
// embedded store, the archive): every byte they put into their
// directories, every sync, rename and truncate, goes through FS and File.
// Production uses the operating system's files (OS); the power-loss tests
// put a simulated disk (Sim) under them that, on a power cut, keeps only
// what was synced.
//
// OS creates directories 0700 and files 0600, whatever the umask: a data
// directory holds every execution's input and result (docs/security.md).
package diskfs

import (
	"errors"
	"io"
	"io/fs"
	"os"
)

// FS is what a store does with its directory.
type FS interface {
	// ReadDir returns the names in dir; an error matching fs.ErrNotExist
	// if dir does not exist.
	ReadDir(dir string) ([]string, error)
	// MkdirAll creates dir and its parents if missing.
	MkdirAll(dir string) error
	// Open opens path for reading; an error matching fs.ErrNotExist if it
	// does not exist.
	Open(path string) (File, error)
	// OpenRW opens an existing path for reading and writing.
	OpenRW(path string) (File, error)
	// Create creates path, or truncates it, for writing.
	Create(path string) (File, error)
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

// File is an open file of the directory. Written bytes are durable only
// after Sync or Datasync returns.
type File interface {
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

// DirMode and FileMode are the modes OS creates directories and files
// with: the owner's alone.
const (
	DirMode  os.FileMode = 0o700
	FileMode os.FileMode = 0o600
)

// OS is the operating system's file system.
type OS struct{}

func (OS) ReadDir(dir string) ([]string, error) {
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

// MkdirAll creates dir and its missing parents with DirMode (dir is
// chmodded after its creation, so that it is DirMode whatever the umask);
// an existing directory keeps its mode.
func (OS) MkdirAll(dir string) error {
	if info, err := os.Stat(dir); err == nil && info.IsDir() {
		return nil
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return err
	}
	return os.Chmod(dir, DirMode)
}

func (OS) Open(path string) (File, error) { return wrapOS(os.Open(path)) }

func (OS) OpenRW(path string) (File, error) { return wrapOS(os.OpenFile(path, os.O_RDWR, 0)) }

// Create creates path with FileMode, or truncates it and sets FileMode.
func (OS) Create(path string) (File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, FileMode)
	if err != nil {
		return nil, err
	}
	if err := f.Chmod(FileMode); err != nil { // an existing file, or a umask that took bits away
		f.Close()
		return nil, err
	}
	return osFile{f}, nil
}

func (OS) Rename(from, to string) error { return os.Rename(from, to) }

func (OS) Remove(path string) error { return os.Remove(path) }

func (OS) SyncDir(dir string) error {
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

func (OS) Lock(path string) (io.Closer, error) {
	f, err := lockDir(path)
	if err != nil {
		return nil, err // not a nil *os.File in a non-nil interface
	}
	return f, nil
}

func wrapOS(f *os.File, err error) (File, error) {
	if err != nil {
		return nil, err
	}
	return osFile{f}, nil
}

// OSFile returns f as a File.
func OSFile(f *os.File) File { return osFile{f} }

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

// IsNotExist reports whether err says a file or directory is missing.
func IsNotExist(err error) bool { return errors.Is(err, fs.ErrNotExist) }
