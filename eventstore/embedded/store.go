package embedded

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
)

// File names inside the data directory.
const (
	logName      = "log"
	sealedName   = "sealed"
	oldIndexName = "index" // the index file of earlier versions: ignored
	lockName     = "LOCK"
	tmpSuffix    = ".tmp"
)

var _ eventstore.Store = (*Store)(nil)

// Store is the embedded event store: one append-only log file in a data
// directory that one process owns. It implements eventstore.Store; every
// method is safe for concurrent use. An Append has reached the disk (fsync)
// when it returns, unless Options.NoSync is set.
type Store struct {
	dir  string
	opts Options
	log  *slog.Logger
	fs   diskfs.FS // the data directory's files (diskfs.OS but in power-loss tests)
	lock io.Closer
	f    *segLog // the log's segments, addressed by logical offset (segments.go)

	// mu guards the headers of the slices and maps below (not their
	// elements) and the fields of the streams. The committer appends to them
	// as it stages a write, then publishes: everything below head is
	// committed and never changes again, so a reader may use the elements
	// below head of a header it copied under mu without holding it.
	//
	// Positions below base are sealed: their index is in the sealed file
	// (see sealed). The slices index the hot positions, from base on.
	mu        sync.RWMutex
	start     *startState        // where the live log starts (a trim replaces it, on the committer)
	sealed    *index             // positions [start.first, base), in levels
	base      uint64             // first hot position; written by the committer only, under mu
	offsets   []int64            // position base+i → file offset of its record
	posStream []*stream          // position base+i → its stream
	posID     []uuid.UUID        // position base+i → event id
	streams   map[string]*stream // streams with hot events (staged included)
	end       int64              // file offset just past the last committed record
	head      atomic.Uint64

	// notify is closed and replaced each time events are committed.
	notify atomic.Pointer[chan struct{}]

	// tail holds the last tailSize committed events as subscriptions
	// receive them (position p at tail[p%tailSize]), so that a subscription
	// that keeps up takes them from memory instead of reading and checking
	// their records in the file: positions tailFrom up to head are there.
	// Guarded by mu; allocated at the first commit.
	tail      []domain.Envelope
	tailFrom  uint64
	tailBytes int // of the data and metadata of the events in tail

	// committer is the group commit's state: the queue of appends, and what
	// the committer goroutine (commitLoop) owns.
	committer

	closing   chan struct{} // closed when Close starts
	closeOnce sync.Once
	closeErr  error

	ckptMu       sync.Mutex            // serialises seals, merges and trims
	lastSeal     atomic.Int64          // when the committer last installed a seal (Unix ns; 0: none yet)
	sealSpacing  time.Duration         // sealSpacing (tests change it before the first append)
	sealUrgent   chan struct{}         // the hot part reached sealBurst times its target
	pending      atomic.Pointer[index] // written, for the committer to install
	sealDone     chan struct{}         // the committer installed a seal
	ckptWake     chan struct{}
	ckptStop     chan struct{}
	ckptDone     chan struct{}
	loadedSealed uint64      // events the sealed file covered at Open (for tests)
	startWritten *startState // the start the start file holds (under ckptMu)
	trimHook     func()      // tests: runs between a trim's look at the streams and its install

	streamNames [1024]atomic.Pointer[string] // interned stream names of sealed records

	types   atomic.Pointer[map[string]string] // interned event types, copy on write
	typesMu sync.Mutex

	// Counters for tests and benchmarks.
	writes    atomic.Uint64 // group commits written (each one write and one fsync)
	seals     atomic.Uint64 // seals installed
	merges    atomic.Uint64 // level merges installed
	sealBytes atomic.Uint64 // bytes written to level files (seals, merges, trims)
	rolls     atomic.Uint64 // segments started
	lookups   atomic.Uint64 // id and stream look-ups that read the sealed file
	syncTime  atomic.Int64  // nanoseconds spent in fsync
}

// stream is the hot state of a stream with hot events. name never changes;
// the other fields are guarded by Store.mu as described there.
type stream struct {
	name      string
	sealed    uint64   // versions in the sealed part
	positions []uint64 // version sealed+i → position, hot and staged included
	committed int      // hot versions below it are committed
	touched   uint64   // committer only: the group commit that last staged to it
}

// Open opens the store in dir, creating and initialising the directory if it
// is missing or empty. It recovers from a crash: a torn or incomplete last
// write is cut off; damage anywhere else fails with an error wrapping
// eventstore.ErrCorrupt that names the file offset, and changes nothing. A
// directory that holds other files but no turnstile log fails with
// eventstore.ErrNotOurs, and one that another Store (in this process or
// another) has open fails with eventstore.ErrLocked; both change nothing.
func Open(dir string, opts Options) (*Store, error) {
	return OpenFS(diskfs.OS{}, dir, opts)
}

// OpenFS is Open on the file system fsys (diskfs.OS for Open; a simulated
// disk in power-loss tests, the archive's included).
func OpenFS(fsys diskfs.FS, dir string, opts Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	if _, err := inspectDir(fsys, dir); err != nil {
		return nil, err
	}
	if err := fsys.MkdirAll(dir); err != nil {
		return nil, fmt.Errorf("embedded: creating data directory: %w", err)
	}
	lock, err := fsys.Lock(filepath.Join(dir, lockName))
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir:         dir,
		opts:        opts,
		log:         opts.Logger.With("store", "embedded", "dir", dir),
		fs:          fsys,
		lock:        lock,
		streams:     make(map[string]*stream),
		closing:     make(chan struct{}),
		ckptWake:    make(chan struct{}, 1),
		sealDone:    make(chan struct{}, 1),
		ckptStop:    make(chan struct{}),
		ckptDone:    make(chan struct{}),
		sealSpacing: sealSpacing,
		sealUrgent:  make(chan struct{}, 1),
	}
	s.initCommitter()
	if err := s.open(); err != nil {
		// Clean-up after a failed Open: its error is the one to report.
		if s.f != nil {
			_ = s.f.Close()
		}
		if s.sealed != nil {
			_ = s.sealed.closeFiles() // read-only
		}
		_ = unlockDir(lock)
		return nil, err
	}
	ch := make(chan struct{})
	s.notify.Store(&ch)
	types := map[string]string{}
	s.types.Store(&types)
	go s.commitLoop()
	go s.sealLoop()
	s.maybeSeal() // after a long tail scan
	return s, nil
}

// open loads the log (the directory is locked).
func (s *Store) open() error {
	hasLog, err := inspectDir(s.fs, s.dir)
	if err != nil {
		return err
	}
	if !hasLog {
		if err := s.initLog(); err != nil {
			return err
		}
	} else if v, err := logFormat(s.fs, s.dir); err != nil {
		return err
	} else if v == formatVersionV1 {
		if err := s.upgradeV1(); err != nil {
			return err
		}
	}
	if s.start, err = loadStart(s.fs, s.dir); err != nil {
		return err
	}
	s.startWritten = s.start
	if s.f, err = s.openSegments(s.start); err != nil {
		return err
	}
	if err := s.recover(); err != nil {
		return err
	}
	if err := s.removeStaleLevels(); err != nil {
		s.log.Warn("removing level files the sealed part does not use", "err", err)
	}
	return nil
}

// Close stops accepting appends, finishes the ones already queued, ends every
// subscription with eventstore.ErrClosed, seals every committed event (so
// the next Open scans nothing) and releases the directory. Later calls return what the first returned.
func (s *Store) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.close() })
	return s.closeErr
}

func (s *Store) close() error {
	close(s.closing)
	s.stop()
	close(s.ckptStop)
	<-s.ckptDone
	s.ckptMu.Lock() // a Trim under way finishes first
	defer s.ckptMu.Unlock()

	s.installSeal() // one the committer did not get to
	var errs []error
	if s.failed == nil {
		if _, err := s.writeSeal(false); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.sealed.closeFiles(); err != nil {
		errs = append(errs, fmt.Errorf("embedded: close: %w", err))
	}
	// Give back the preallocated zeros (and any failed write past the end).
	if size, err := s.f.Size(); err == nil && size > s.end {
		if err := s.f.Truncate(s.end); err != nil {
			errs = append(errs, fmt.Errorf("embedded: close: trimming the log: %w", err))
		} else if err := s.syncAll(); err != nil {
			errs = append(errs, fmt.Errorf("embedded: close: %w", err))
		}
	}
	if err := s.f.Close(); err != nil {
		errs = append(errs, fmt.Errorf("embedded: close: %w", err))
	}
	if err := unlockDir(s.lock); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unlockDir releases the lock taken by the file system's Lock (closing the
// only descriptor of the lock file releases its flock). The lock file stays.
func unlockDir(l io.Closer) error {
	if err := l.Close(); err != nil {
		return fmt.Errorf("embedded: releasing lock: %w", err)
	}
	return nil
}

func (s *Store) isClosed() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// Head returns the position the next committed event will have; every event
// below it is readable. With this store positions are dense, so Head is also
// the number of events in the log.
func (s *Store) Head(ctx context.Context) (uint64, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if s.isClosed() {
		return 0, eventstore.ErrClosed
	}
	return s.head.Load(), nil
}

// sync makes the log's written bytes durable (fdatasync), unless NoSync.
func (s *Store) sync() error {
	if s.opts.NoSync {
		return nil
	}
	return s.f.Datasync()
}

// syncAll makes the log durable with its metadata (fsync), unless NoSync:
// after a truncate, which fdatasync need not cover everywhere.
func (s *Store) syncAll() error {
	if s.opts.NoSync {
		return nil
	}
	return s.f.Sync()
}

// syncDir makes a directory's entries durable, unless NoSync.
func (s *Store) syncDir() error {
	if s.opts.NoSync {
		return nil
	}
	return s.fs.SyncDir(s.dir)
}
