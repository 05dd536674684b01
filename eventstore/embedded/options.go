package embedded

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// Defaults for the zero fields of Options.
const (
	DefaultMaxBatch        = 8192
	DefaultHotEvents       = 1 << 16
	DefaultPreallocate     = 8 << 20
	DefaultGroupCommitWait = 200 * time.Microsecond
	DefaultSegmentBytes    = 256 << 20
	// MinSegmentBytes is the smallest Options.SegmentBytes (tests use it
	// to make every test cross segment boundaries).
	MinSegmentBytes = 1 << 10
)

// defaultHotEvents is DefaultHotEvents; tests lower it to make every test
// cross the boundary between the sealed and the hot part.
var defaultHotEvents = DefaultHotEvents

// defaultSegmentBytes is DefaultSegmentBytes; tests lower it to make every
// test cross segment boundaries.
var defaultSegmentBytes int64 = DefaultSegmentBytes

// Options configure a Store. The zero value is a durable store with the
// defaults below; Open fills zero fields with them and refuses invalid values.
type Options struct {
	// Clock gives the commit time of each write (one reading per write, when
	// the committer starts staging it). The store keeps it in UTC, truncated
	// to the microsecond. Default: time.Now.
	Clock func() time.Time

	// MaxBatch is the most events one group commit writes with a single
	// write and a single fsync. An Append or AppendMulti larger than this is
	// still written whole, in a group commit of its own. Default
	// DefaultMaxBatch; at most 1,000,000.
	MaxBatch int

	// GroupCommitWait is how long the committer may hold a group commit open
	// for the writers it has just answered to come back with their next
	// appends. It waits only while fewer appends are queued than the last
	// group held, never longer than the last fsync took, and stops trying for
	// a while when the writers do not come back in time. With writers that
	// append back to back this fills each fsync with about twice as many
	// appends; a lone writer never waits. Negative disables it. Default
	// DefaultGroupCommitWait.
	GroupCommitWait time.Duration

	// NoSync skips every fsync. It is for tests only: with it, events that
	// Append acknowledged can be lost in a crash of the machine (not of the
	// process).
	NoSync bool

	// HotEvents is how many committed events the store indexes in memory
	// (the hot part) before it seals them: writes their index into the
	// sealed file in the background and keeps only about 2 bytes per
	// sealed event in memory. The threshold grows to 1/32 of the sealed
	// part, so sealing (which rewrites the sealed file) costs O(1) per
	// event; in a burst of appends a seal within 2 s of the last one waits
	// until the hot part is four times the threshold. The sealed file also
	// bounds how much of the log Open must scan after a crash. Close always
	// seals everything. Negative: only Close seals (the in-memory index then
	// grows with the log until Close).
	// Default DefaultHotEvents; at most 1<<30.
	HotEvents int

	// CheckpointEvery is the former name of HotEvents: used when HotEvents
	// is 0.
	//
	// Deprecated: use HotEvents.
	CheckpointEvery int

	// TrustIndex lets Open skip checking the checksums of the part of the log
	// that a valid sealed file covers: Open then costs the sealed file and
	// the log tail only, and corruption in the covered part surfaces as
	// ErrCorrupt when that record is read instead of at Open. Default false:
	// Open reads the whole log once, checks that the sealed file lists
	// exactly its events, and fails on any corrupt record.
	TrustIndex bool

	// Preallocate is how many zero-filled bytes the store keeps written ahead
	// of the end of the log, so that a commit overwrites existing blocks and
	// its fsync need not update file metadata. Negative disables it. Default
	// DefaultPreallocate; at most 1 GiB.
	Preallocate int

	// SegmentBytes is the size at which the log starts a new segment file:
	// the first write after the current one reaches it goes to a new file
	// (a write is never split, so a segment can be larger by one group
	// commit). A trim (Trim) reclaims disk space a segment at a time.
	// Default DefaultSegmentBytes; MinSegmentBytes to 1<<40.
	SegmentBytes int64

	// Logger receives what recovery did (a torn tail cut, a sealed file
	// ignored) and background seal failures. Default: discard.
	Logger *slog.Logger
}

// Validate reports the first invalid field of o. Zero fields are valid: they
// mean the default.
func (o Options) Validate() error {
	var errs []error
	if o.MaxBatch < 0 || o.MaxBatch > 1_000_000 {
		errs = append(errs, fmt.Errorf("option MaxBatch %d: must be 0 (default) or 1..1000000", o.MaxBatch))
	}
	if o.GroupCommitWait > 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("option GroupCommitWait %v: must be at most 100ms (negative disables)", o.GroupCommitWait))
	}
	if o.HotEvents > 1<<30 || o.CheckpointEvery > 1<<30 {
		errs = append(errs, fmt.Errorf("option HotEvents %d: must be at most 1<<30 (negative: only Close seals)", max(o.HotEvents, o.CheckpointEvery)))
	}
	if o.Preallocate > 1<<30 {
		errs = append(errs, fmt.Errorf("option Preallocate %d: must be at most 1 GiB (negative disables)", o.Preallocate))
	}
	if o.SegmentBytes != 0 && (o.SegmentBytes < MinSegmentBytes || o.SegmentBytes > 1<<40) {
		errs = append(errs, fmt.Errorf("option SegmentBytes %d: must be 0 (default) or %d..1<<40", o.SegmentBytes, MinSegmentBytes))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("embedded: invalid options: %w", err)
	}
	return nil
}

func (o Options) withDefaults() Options {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxBatch == 0 {
		o.MaxBatch = DefaultMaxBatch
	}
	if o.GroupCommitWait == 0 {
		o.GroupCommitWait = DefaultGroupCommitWait
	}
	if o.HotEvents == 0 {
		o.HotEvents = o.CheckpointEvery
	}
	if o.HotEvents == 0 {
		o.HotEvents = defaultHotEvents
	}
	if o.Preallocate == 0 {
		o.Preallocate = DefaultPreallocate
	}
	if o.Preallocate < 0 {
		o.Preallocate = 0
	}
	if o.SegmentBytes == 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}
