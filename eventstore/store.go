// Package eventstore defines turnstile's append-only log: the Store interface that
// every backend implements, expected versions, typed errors and input limits.
// Backends live in subpackages (embedded, postgres, kurrentdb); storetest holds the
// conformance suite every backend passes.
package eventstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/turnstile/turnstile/domain"
)

// Store is the log. Every method is safe for concurrent use.
type Store interface {
	// Append atomically appends events to one stream if the stream's current
	// version satisfies expected. On success the returned result names the
	// version and position of the last event written. Re-appending events whose
	// ids are already stored in the stream, in the same order, is a no-op that
	// returns the original result.
	Append(ctx context.Context, stream string, expected ExpectedVersion, events ...domain.Envelope) (AppendResult, error)

	// AppendMulti atomically appends to several streams: either every append's
	// expected version holds and all events are written, contiguously and in
	// the order given, or nothing is written. A StreamAppend without events is
	// a condition: its stream must be at its expected version (not Any), and
	// nothing is written to it; at least one stream must get events. The
	// idempotency rule of Append applies to the whole batch (a replay is
	// recognised by its events' ids, whatever its conditions say now, since
	// they held when it was written). A backend that cannot write several
	// streams atomically says so (AtomicMultiStream) and fails such a call
	// with an error matching ErrMultiStream, writing nothing; one stream
	// always works.
	AppendMulti(ctx context.Context, appends ...StreamAppend) (AppendResult, error)

	// ReadStream returns up to limit events of one stream, from version from
	// (inclusive), in version order. A stream that does not exist gives ErrStreamNotFound.
	ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error)

	// ReadAll returns up to limit events of the whole log from global position
	// from (inclusive), in position order.
	ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error)

	// Subscribe delivers every event at position >= from that passes filter to
	// handle, in position order, first the stored ones (catch-up) and then new
	// ones as they commit (live): never a gap, never a duplicate, never out of
	// order. Events arrive in batches of at least one; a batch is the
	// handler's to keep (the store does not touch it after handle returns),
	// but not to modify: the events' Data and Metadata may be shared. It
	// returns when ctx ends (with ctx.Err()) or when handle returns an error
	// (with that error).
	Subscribe(ctx context.Context, from uint64, filter Filter, handle func([]domain.Envelope) error) error

	// Head returns the position the next committed event will have at least
	// (0 for an empty log): every event below it is readable now.
	Head(ctx context.Context) (uint64, error)

	// Close releases the store. Subscriptions end with ErrClosed.
	Close() error
}

// MultiStreamReporter is implemented by a Store that can say whether its
// AppendMulti writes several streams atomically. A Store that does not
// implement it is taken not to: a wrapper around a store (faulty, a test's
// decorator) must forward the method, or writers take the single-stream
// path, which is slower but right on every store, where the other way round
// a multi-stream append on a store without it would fail.
type MultiStreamReporter interface {
	// AtomicMultiStream reports whether AppendMulti of several streams is
	// all-or-nothing. When false it fails with ErrMultiStream and writers that
	// need several streams append one stream at a time (see services/executor).
	AtomicMultiStream() bool
}

// AtomicMultiStream reports whether s's AppendMulti writes several streams
// atomically: true only if s implements MultiStreamReporter and says so.
func AtomicMultiStream(s Store) bool {
	r, ok := s.(MultiStreamReporter)
	return ok && r.AtomicMultiStream()
}

// StreamAppend is one stream's part of an AppendMulti. Without Events it
// is a condition: the stream must be at Expected, and nothing is written to
// it (a fence on a stream the append does not otherwise change).
type StreamAppend struct {
	Stream   string
	Expected ExpectedVersion
	Events   []domain.Envelope
}

// AppendResult says where the last appended event landed.
type AppendResult struct {
	Version  uint64 // version of the last event in its stream (for AppendMulti, of the last stream)
	Position uint64 // global position of the last event
}

// Filter selects events for a subscription. A zero Filter passes everything;
// otherwise an event passes when its stream starts with one of StreamPrefixes
// (if any are given) and its type is one of Types (if any are given).
type Filter struct {
	StreamPrefixes []string
	Types          []string
}

// Match reports whether e passes the filter.
func (f Filter) Match(e *domain.Envelope) bool {
	if len(f.StreamPrefixes) > 0 {
		ok := false
		for _, p := range f.StreamPrefixes {
			if strings.HasPrefix(e.Stream, p) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if len(f.Types) > 0 {
		for _, t := range f.Types {
			if e.Type == t {
				return true
			}
		}
		return false
	}
	return true
}

type expectKind uint8

const (
	expectAny expectKind = iota
	expectNoStream
	expectExists
	expectExact
)

// ExpectedVersion is the optimistic-concurrency condition of an append.
type ExpectedVersion struct {
	kind    expectKind
	version uint64
}

var (
	// Any appends whatever the stream's state.
	Any = ExpectedVersion{kind: expectAny}
	// NoStream appends only if the stream does not exist yet.
	NoStream = ExpectedVersion{kind: expectNoStream}
	// StreamExists appends only if the stream has at least one event.
	StreamExists = ExpectedVersion{kind: expectExists}
)

// Exact appends only if the stream's last event has version v.
func Exact(v uint64) ExpectedVersion { return ExpectedVersion{kind: expectExact, version: v} }

// IsAny, IsNoStream, IsStreamExists report the kind; Exact reports the version
// and whether the expectation is an exact one.
func (e ExpectedVersion) IsAny() bool          { return e.kind == expectAny }
func (e ExpectedVersion) IsNoStream() bool     { return e.kind == expectNoStream }
func (e ExpectedVersion) IsStreamExists() bool { return e.kind == expectExists }
func (e ExpectedVersion) Exact() (uint64, bool) {
	return e.version, e.kind == expectExact
}

// Satisfied reports whether a stream in the given state meets the expectation.
// exists says whether the stream has any event; last is its last version.
func (e ExpectedVersion) Satisfied(exists bool, last uint64) bool {
	switch e.kind {
	case expectNoStream:
		return !exists
	case expectExists:
		return exists
	case expectExact:
		return exists && last == e.version
	default:
		return true
	}
}

func (e ExpectedVersion) String() string {
	switch e.kind {
	case expectNoStream:
		return "no stream"
	case expectExists:
		return "stream exists"
	case expectExact:
		return fmt.Sprintf("version %d", e.version)
	default:
		return "any"
	}
}

// Sentinel errors that callers branch on with errors.Is.
var (
	ErrWrongExpectedVersion = errors.New("wrong expected version")
	ErrStreamNotFound       = errors.New("stream not found")
	ErrInvalidEvent         = errors.New("invalid event")
	ErrInvalidStream        = errors.New("invalid stream name")
	ErrEventTooLarge        = errors.New("event too large")
	ErrIdempotencyConflict  = errors.New("event id already stored with different content or place")
	ErrClosed               = errors.New("store closed")
	// ErrUnavailable marks a failure to reach the store's server or disk
	// (a connection refused or lost, a server shutting down): the same call
	// may succeed later. Unlike ErrClosed, the store is still usable.
	ErrUnavailable = errors.New("store unavailable")
	ErrCorrupt     = errors.New("log corrupt")
	ErrLocked      = errors.New("data directory in use by another process")
	ErrNotOurs     = errors.New("directory is not a turnstile data directory")
	// ErrMultiStream is returned by AppendMulti of several streams on a
	// backend that cannot append to them atomically; nothing was written. It
	// matches errors.ErrUnsupported too.
	ErrMultiStream = fmt.Errorf("atomic append to several streams not supported by this store: %w", errors.ErrUnsupported)
)

// WrongVersionError is returned (wrapped around ErrWrongExpectedVersion) when an
// append's expected version does not hold.
type WrongVersionError struct {
	Stream   string
	Expected ExpectedVersion
	Actual   uint64 // last version of the stream; meaningless when !Exists
	Exists   bool
}

func (e *WrongVersionError) Error() string {
	actual := "no stream"
	if e.Exists {
		actual = fmt.Sprintf("version %d", e.Actual)
	}
	return fmt.Sprintf("append to %q: expected %s, stream is at %s: %v", e.Stream, e.Expected, actual, ErrWrongExpectedVersion)
}

// Unwrap lets errors.Is(err, ErrWrongExpectedVersion) match.
func (e *WrongVersionError) Unwrap() error { return ErrWrongExpectedVersion }

// Limits on what the log accepts. They are part of the contract: every backend
// refuses more with ErrInvalidStream, ErrInvalidEvent or ErrEventTooLarge.
const (
	MaxStreamLen      = 200      // bytes in a stream name
	MaxTypeLen        = 100      // bytes in an event type
	MaxEventSize      = 1 << 20  // bytes of Data + Metadata in one event
	MaxAppendEvents   = 10_000   // events in one Append or AppendMulti
	MaxAppendBytes    = 16 << 20 // bytes of Data + Metadata in one Append or AppendMulti
	MaxCorrelationLen = 200      // bytes in CorrelationID, CausationID, Writer
)

// ValidateStream checks a stream name: 1..MaxStreamLen bytes of printable ASCII
// with no spaces, like "execution-6f1c…" or "queue-demo.sleep".
func ValidateStream(stream string) error {
	if stream == "" || len(stream) > MaxStreamLen {
		return fmt.Errorf("%w: %q must be 1..%d bytes", ErrInvalidStream, truncate(stream), MaxStreamLen)
	}
	for i := 0; i < len(stream); i++ {
		c := stream[i]
		if c <= ' ' || c > '~' {
			return fmt.Errorf("%w: %q has byte 0x%02x at %d (printable ASCII without spaces only)", ErrInvalidStream, truncate(stream), c, i)
		}
	}
	return nil
}

// ValidateEvent checks what a writer must fill in an event before appending.
func ValidateEvent(e *domain.Envelope) error {
	if e.Type == "" {
		return fmt.Errorf("%w: event %s has no type", ErrInvalidEvent, e.ID)
	}
	if len(e.Type) > MaxTypeLen {
		return fmt.Errorf("%w: event type longer than %d bytes", ErrInvalidEvent, MaxTypeLen)
	}
	if e.ID == [16]byte{} {
		return fmt.Errorf("%w: event of type %q has no id", ErrInvalidEvent, e.Type)
	}
	if !e.Owner.Valid() {
		return fmt.Errorf("%w: event %s has unknown owner %q", ErrInvalidEvent, e.ID, e.Owner)
	}
	if len(e.CorrelationID) > MaxCorrelationLen || len(e.CausationID) > MaxCorrelationLen || len(e.Writer) > MaxCorrelationLen {
		return fmt.Errorf("%w: event %s: correlation, causation or writer longer than %d bytes", ErrInvalidEvent, e.ID, MaxCorrelationLen)
	}
	if n := len(e.Data) + len(e.Metadata); n > MaxEventSize {
		return fmt.Errorf("%w: event %s is %d bytes, the limit is %d", ErrEventTooLarge, e.ID, n, MaxEventSize)
	}
	return nil
}

// ValidateAppends checks a whole append before a backend touches storage.
func ValidateAppends(appends []StreamAppend) error {
	if len(appends) == 0 {
		return fmt.Errorf("%w: nothing to append", ErrInvalidEvent)
	}
	total, bytes, written := 0, 0, 0
	var seen map[string]struct{} // for many streams; a few are compared directly
	if len(appends) > 8 {
		seen = make(map[string]struct{}, len(appends))
	}
	for i := range appends {
		a := &appends[i]
		if err := ValidateStream(a.Stream); err != nil {
			return err
		}
		dup := false
		if seen != nil {
			_, dup = seen[a.Stream]
			seen[a.Stream] = struct{}{}
		} else {
			for k := range i {
				dup = dup || appends[k].Stream == a.Stream
			}
		}
		if dup {
			return fmt.Errorf("%w: stream %q named twice in one append", ErrInvalidEvent, a.Stream)
		}
		if len(a.Events) == 0 && a.Expected.IsAny() {
			return fmt.Errorf("%w: no events for stream %q, and a condition (a stream without events) must expect a version, not Any", ErrInvalidEvent, a.Stream)
		}
		if len(a.Events) > 0 {
			written++
		}
		for j := range a.Events {
			if err := ValidateEvent(&a.Events[j]); err != nil {
				return err
			}
			bytes += len(a.Events[j].Data) + len(a.Events[j].Metadata)
		}
		total += len(a.Events)
	}
	if written == 0 {
		return fmt.Errorf("%w: no events to append (only conditions)", ErrInvalidEvent)
	}
	if total > MaxAppendEvents {
		return fmt.Errorf("%w: %d events in one append, the limit is %d", ErrInvalidEvent, total, MaxAppendEvents)
	}
	if bytes > MaxAppendBytes {
		return fmt.Errorf("%w: %d bytes in one append, the limit is %d", ErrEventTooLarge, bytes, MaxAppendBytes)
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
