// Package embedded is turnstile's default event store: a pure-Go, single-process
// log kept in a data directory. It implements eventstore.Store.
//
// # Guarantees
//
//   - Durable: Append and AppendMulti return once their events are on disk
//     (fdatasync), unless Options.NoSync is set (tests only).
//   - Group commit: concurrent appends are queued to one committer goroutine,
//     which checks and encodes them as they arrive and writes the whole group
//     with one write and one fsync, then answers all of them. Under load it
//     holds a group open briefly (Options.GroupCommitWait) for the writers it
//     has just answered, so each fsync carries about as many appends as there
//     are writers. A group over Options.MaxBatch events is written in chunks.
//   - Positions are dense: the n-th event ever committed has position n-1, and
//     Head is the number of events. Versions are 0-based per stream. Time is
//     read from Options.Clock once per write, when the committer starts
//     staging it, and stored in UTC truncated to the microsecond, so it reads
//     back equal.
//   - Reads and subscriptions see only committed (synced) events. Subscribe
//     reads from the file at its own pace, so catch-up and live delivery are
//     one loop, and a slow subscriber never holds up appends.
//   - One open Store per directory, in any process (flock on LOCK).
//   - Crash safety: every record carries a CRC-32C. On Open, a torn last write
//     is cut off; damage that a later write proves was not a torn write (and,
//     unless Options.TrustIndex, any damage to the part of the log the index
//     covers) makes Open fail with
//     an error wrapping eventstore.ErrCorrupt that names the file and offset,
//     and changes nothing.
//
// # Files
//
// The data directory holds:
//
//	log        the append-only log: a 16-byte header, then records
//	index      a checkpoint of the in-memory indexes (optional, rebuilt if bad)
//	LOCK       flock'ed while a Store has the directory open; holds its pid
//	*.tmp      a log or index being written (replaced atomically by rename)
//
// The log is a single file; it is not segmented. Its size is bounded only by
// the file system, but the in-memory indexes cost about 45 to 60 bytes per
// event (offset, stream number, id, a slot of the id table, the position in
// its stream's list) plus about 150 bytes per stream (its record and name),
// so a store is meant for up to some tens of millions of events.
//
// A directory that holds other files but no log, or a log without the header,
// is refused with eventstore.ErrNotOurs. A missing or empty directory is
// created and initialised (header written to log.tmp, synced, renamed).
//
// # Log format
//
// All integers are little-endian. The header is
//
//	0   8  magic "TRNSTILE"
//	8   4  kind "LOG\x00"
//	12  4  format version (1)
//
// Each record is one event:
//
//	0   4  body length L (bytes after this 8-byte prefix)
//	4   4  CRC-32C (Castagnoli) of the 4 length bytes and the L body bytes
//	body:
//	0   8  global position
//	8   8  version within the stream
//	16  8  commit time, microseconds since the Unix epoch (signed)
//	24 16  event id
//	40  8  schema version (signed)
//	48  4  in-write index: records before this one in the same write
//	52  4  data length
//	56  4  metadata length
//	60  1  flags: 1 last record of its Append/AppendMulti (commit),
//	          2 data is nil, 4 metadata is nil
//	61  1  owner: 1 api, 2 executor, 3 worker
//	62  1  stream length (1..200)
//	63  1  type length (1..100)
//	64  1  correlation id length (0..200)
//	65  1  causation id length (0..200)
//	66  1  writer length (0..200)
//	67  1  reserved, 0
//	68  …  stream, type, correlation id, causation id, writer, data, metadata
//
// A record is at most 8+68+200+100+600+1 MiB bytes (eventstore's limits). Past
// the last record the file may hold zeros: the committer keeps up to
// Options.Preallocate bytes written ahead (a record length of 0 is never
// valid), so that its writes overwrite allocated blocks and fsync has no file
// metadata to update. Close trims them.
//
// # Recovery
//
// Open reads the index if it is intact and agrees with the log, then (unless
// Options.TrustIndex) reads every record it covers and checks its checksum
// and that it is what the index lists, then scans the rest of the log record
// by record. A record continues the log if its checksum matches, its fields
// add up, its position is the next one, its version the next of its stream
// and its id new; a sound record that breaks one of these rules is
// corruption. An Append or AppendMulti counts only if its last record (the
// one with the commit flag) is present: records after the last commit are
// dropped whole, which keeps AppendMulti atomic across a crash.
//
// When the scan meets a bad record (short, zero or out-of-range length, bad
// checksum), it looks for intact records further on. Writes are synced one at
// a time, so only the last write can be torn, and the disk may have persisted
// any subset of its pages. An intact record whose write started after the bad
// record (its position minus its in-write index) proves that the bad record
// was synced, so Open fails with ErrCorrupt naming the bad record's offset. If
// there is none, everything from the end of the last complete commit on is
// cut off the file (zeros alone are left in place) and the log carries on
// from there. The price of this rule: damage that happens to hit the last
// write after it was synced cannot be told from a torn write and is cut (the
// cut is logged as a warning with the offset).
//
// A failed write or fsync stops the store taking appends (they all fail with
// that error); what reached the disk is decided by recovery at the next Open,
// so an append that failed this way may or may not be in the log, and
// re-appending the same event ids is the safe retry.
//
// # Index file
//
// The index lets Open skip decoding the log: it lists, for every event, what
// the in-memory indexes need. It is written to index.tmp, synced and renamed
// over index, on Close and in the background every Options.CheckpointEvery
// events (or a quarter of the log, if more). It covers only synced events:
//
//	0   8  magic "TRNSTIDX"
//	8   4  format version (1)
//	12  4  reserved
//	16  8  bytes of the log covered (the offset just past the last record)
//	24  8  number of events N
//	32  8  number of streams M
//	40  …  M stream names, in first-event order: 1 length byte, then the name
//	    …  N record sizes (4 bytes each)
//	    …  N stream numbers (4 bytes each, indexes into the names)
//	    …  N event ids (16 bytes each)
//	    4  CRC-32C of everything before
//
// An index that fails its checksum, does not add up, covers more than the log
// holds, or whose last event is not in the log where it says, is ignored (and
// logged): Open then scans the whole log, which gives the same result, only
// slower.
package embedded
