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
//   - Memory grows with the log by about 2 bytes per event: the index of
//     the older, sealed part of the log is on disk (see Memory below); only
//     a hot part of at most max(Options.HotEvents, 1/32 of the log)
//     events (four times that during a burst of appends) is indexed in
//     memory.
//   - The sealed file covers only committed, synced events, and it is
//     replaced atomically (write, fsync, rename, fsync of the directory). It
//     holds nothing the log does not: a missing or damaged one costs Open a
//     scan of the whole log, never an event.
//   - Crash safety: every record carries a CRC-32C. On Open, a torn last write
//     is cut off; damage that a later write proves was not a torn write (and,
//     unless Options.TrustIndex, any damage to the part of the log the sealed
//     file covers) makes Open fail with
//     an error wrapping eventstore.ErrCorrupt that names the file and offset,
//     and changes nothing.
//
// # Files
//
// The data directory holds:
//
//	log        the first segment of the append-only log (position 0 on):
//	           a 16-byte header, then records
//	log-<p>    the segment whose first record is position p (20 digits)
//	start      where the live log starts, once it has been trimmed (see Trim)
//	sealed     the index of the sealed part of the log (optional, rebuilt if bad)
//	LOCK       flock'ed while a Store has the directory open; holds its pid
//	*.tmp      a segment, start or sealed file being written (replaced
//	           atomically by rename; removed or overwritten at the next Open)
//	index      the index file of earlier versions, if any: ignored, and
//	           removed by the first seal
//
// # Segments
//
// The log is a series of segment files. The committer starts a new one
// when the last one has reached Options.SegmentBytes (default 256 MiB),
// between two group commits: it cuts the full segment to its last record
// (giving back the preallocated zeros) and fsyncs it, then creates the next
// file with its header (temporary file, fsync, rename, fsync of the
// directory). So every segment but the last is complete and synced, and
// only the last can end in a torn write. A write is never split across two
// files.
//
// The store addresses records by a logical offset: the records of every
// segment back to back, headers left out. In the first segment ("log",
// the single file of earlier versions, which keeps working as it is) a
// logical offset is the file offset; the next segment's records continue
// where the last record of the one before ended. The sealed file's record
// offsets, the hot part's and recovery's scan all use logical offsets; only
// the file layer (segments.go) maps one to a file and a file offset. Open
// lays the segments out from the one that holds the live log's start (the
// start file says where it is and its logical base), checks every header,
// and checks during its scan that each segment's first record holds the
// position its name says.
//
// # Trim
//
// Trim(before, keep) (eventstore.Trimmer) removes positions below before
// from the live log; see trim.go for the steps. It seals the log up to
// before, writes a sealed file that indexes positions [before, …) only, has
// the committer install it between two group commits together with the new
// start, writes the start file atomically (temporary file, fsync, rename,
// fsync of the directory: the trim's commit point), and then deletes the
// segment files that start below the segment holding before. A crash at
// any point leaves the old start or the new one, every event from there on
// intact; segments below the start that a crash left are deleted by Open
// or by a repeated Trim. The segment that holds before stays whole (its
// trimmed records are unreadable), so the disk holds at most one segment
// more than the live log needs.
//
// A stream continues across the start (its versions go on, ReadStream
// returns its live events) when it is in keep or has events at or after
// before; the start file lists each such stream with its number of
// versions below the start, which Open, appends and reads add to what the
// sealed file and the hot part count. Every other stream with events below
// before is forgotten, and so are the ids of the removed events. The start
// file also keeps the chain hash of the event before the start (Start).
// ReadAll and Subscribe from below the start fail with an
// *eventstore.TrimmedError; a reader that was reading a segment when a trim
// deleted it gets one too.
//
// # Memory: the sealed and the hot part
//
// The store finds events by position, by id and by stream. For the older
// part of the log, positions [0, S), that index lives in the sealed file;
// memory holds only a fence over its sorted ids (8 bytes of every 128th id)
// and over its sorted stream names (every 32nd name), and a blocked Bloom
// filter of 10 bits per id and per stream name: about 1.5 to 2 bytes per
// sealed event (1.25 for the id filter, the rest for streams, at some 6
// events per stream). A look-up is a binary search of a fence and one read of a block
// of the file, and only when the filter lets the key through: the new ids
// and streams of nearly every append are answered from memory.
//
// The hot part, positions S and up, is indexed in memory as a whole: record
// offset, stream, id, a slot of the id table and a place in its stream's
// list, about 50 to 60 bytes per event, plus about 150 bytes per stream with
// hot events. When it reaches Options.HotEvents events (default 1<<16) or
// 1/32 of S if more, a background seal writes a new sealed file covering
// the whole committed log (the old file streamed and merged with the hot
// part, sorted in memory), and the committer installs it between two group
// commits: the hot structures then keep only what was committed since. So
// the store's memory is about 2 bytes per sealed event plus a hot part of
// at most max(HotEvents, S/32) events (plus what commits while a seal is
// written): with the default, a fixed 4 to 5 MB up to a log of about two
// million events; past that the 1/32 grows with the log (about 2 bytes per
// event). That is the price of rewriting the whole sealed file at each
// seal: at most about 32 × 45 bytes, some 1.5 KB of sequential writes, per
// event appended (next to the 200 to 300 bytes of its record). A log of tens
// of millions of events would want sealed files in levels that are merged
// less often; that is not built. In a burst of appends a seal waits until
// 2 s have passed since the last one, or until the hot part has grown to
// four times its target: seals every 65,536 events cost a tenth of the CPU
// of a burst of tens of thousands of appends a second, and the hot part's
// memory is the cheaper price (sealSpacing in seal.go). Readers that started before a
// seal keep the sealed file they began with; a replaced file is closed when
// no reader refers to it any more (by the os.File finaliser).
//
// What the sealed part costs: an append to a stream that has no hot events
// but does have sealed ones reads one block of the sealed file (to learn its
// version; about 4 µs from the page cache, on the committer), and so does
// the rare id the filter lets through (about 1 to 2 % of new ids and
// streams). A re-append of a sealed event reads the stream's positions list.
// ReadStream reads a sealed event's record offset from the file (one small
// read per event); ReadAll and Subscribe read the offsets of up to 4096
// sealed positions with one read and take each event's stream name from its
// record (names repeat through a small shared cache, not one string per
// event). The sealed file is about 40 bytes per event plus 17 bytes and the
// name per stream, and each seal rewrites it whole.
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
// Open loads the sealed file if it is intact (checksum, sections that add up,
// sorted ids and names, no more than the log holds) and the log holds its
// last event where it says, then (unless Options.TrustIndex) reads every
// record it covers, checks its checksum and place, and checks that the file
// lists exactly the log's ids, streams and versions (by comparing two
// order-independent 64-bit digests, one taken from the records and one from
// the file). Then it scans the rest of the log record by record into the hot
// part. A record continues the log if its checksum matches, its fields add
// up, its position is the next one, its version the next of its stream and
// its id new (neither hot nor sealed); a sound record that breaks one of these
// rules is corruption. An Append or AppendMulti counts only if its last
// record (the one with the commit flag) is present: records after the last
// commit are dropped whole, which keeps AppendMulti atomic across a crash.
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
// # Sealed file
//
// The sealed file indexes positions [F, N) of the log, F the live log's
// start. It is written to
// sealed.tmp, synced and renamed over sealed (then the directory is synced),
// by background seals and by Close, so a clean restart scans nothing. It
// covers only synced events. All integers are little-endian:
//
//	0   8  magic "TRNSTSLD"
//	8   4  format version (2)
//	12  4  reserved
//	16  …  N-F record offsets (8 bytes each, logical), by position
//	    …  N-F entries sorted by event id (bytewise): id (16), position (8)
//	    …  M entries sorted by stream name (bytewise): name length (1), name,
//	       its number of events (8), the index of its first entry in the
//	       positions lists (8)
//	    …  the positions lists: each stream's positions by version (8 bytes
//	       each), the streams in the order above, N-F entries in all
//	    footer:
//	0   8  F
//	8   8  the logical offset of the record of position F
//	16  8  N
//	24  8  bytes of the log covered (the logical offset just past record N-1)
//	32  8  M
//	40  8  file offset of the sorted ids
//	48  8  file offset of the streams
//	56  8  file offset of the positions lists
//	64  8  magic "TRNSTSLD"
//	    4  CRC-32C of everything before
//
// A stream's count is its events in [F, N); a stream that continues across
// the start counts its versions below F in the start file. A sealed file of
// format 1 (earlier versions: F = 0 and the footer without its first two
// fields) is read as it is. A sealed file whose F or first offset is not
// the live log's start is ignored (a trim was cut short between the two
// files).
//
// The counts and offsets are in a footer, not a header, so that a seal can
// write the file in one sequential pass. A sealed file that fails its
// checksum, does not add up, covers more than the log holds, or whose last
// event is not in the log where it says, is ignored (and logged): Open then
// scans the whole log into the hot part, which gives the same result, only
// slower and with the memory of a hot part that size until the first seal.
package embedded
