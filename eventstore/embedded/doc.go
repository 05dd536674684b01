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
//   - Memory grows with the live log by about 2 bytes per event: the index
//     of the older, sealed part of the log is on disk, in level files (see
//     Memory below); only a hot part of at most Options.HotEvents events
//     (four times that during a burst of appends) is indexed in memory.
//   - The level files cover only committed, synced events, and each one is
//     written atomically (write, fsync, rename, fsync of the directory). They
//     hold nothing the log does not: a missing or damaged one costs Open a
//     scan of the part of the log it covers and all after it, never an
//     event.
//   - Tamper evidence: every record carries its event's chain hash
//     (eventstore.NextHash), computed by the committer as it encodes the
//     record and handed out as Envelope.Hash; KeepsChain is true.
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
//	sealed-<a>-<b>  a level of the index of the sealed part of the log:
//	           positions [a, b) (20 digits each; optional, rebuilt if bad)
//	sealed     the sealed file of earlier versions (format 1): not read (Open
//	           scans the log once instead) and removed
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
// part of the live log, positions [F, S) (F its start), that index lives in
// level files; memory holds, for each level, only a fence over its sorted
// ids (8 bytes of every 128th id) and over its sorted stream names (every
// 32nd name), and a blocked Bloom filter of 10 bits per id and 16 per stream
// name: about 1.5 to 2 bytes per sealed event in all (1.25 for the id
// filters, the rest for streams, at some 6 events per stream). A look-up
// asks the levels' filters, newest first, and reads one block of a level's
// file (after a binary search of its fence) only where a filter lets the
// key through: the new ids and streams of nearly every append are answered
// from memory.
//
// The hot part, positions S and up, is indexed in memory as a whole: record
// offset, stream, id, a slot of the id table and a place in its stream's
// list, about 50 to 60 bytes per event, plus about 150 bytes per stream with
// hot events. When it reaches Options.HotEvents events (default 1<<16), a
// background seal writes a new level file for it (its ids and streams
// sorted in memory), and the committer installs the level between two group
// commits: the hot structures then keep only what was committed since. So
// the store's memory is about 2 bytes per sealed event plus a fixed hot
// part of HotEvents events (4 to 5 MB with the default; plus what commits
// while a seal is written), whatever the size of the log.
//
// # Levels
//
// A seal never rewrites older levels. Levels are merged like the tiers of
// a log-structured merge tree: a level's tier is log4 of its size in
// units of HotEvents, and when the fanIn (4) newest levels are of one tier,
// a background merge writes one level of all their entries (a k-way merge
// that reads each input sequentially), the committer installs it, and the
// inputs are removed. So each sealed event is written once by its seal and
// once per tier it climbs: about 45 × (1 + log4(S / HotEvents)) bytes over
// the life of the log (some 270 bytes at 50 million events), where
// rewriting one sealed file at each seal cost up to 32 × 45, and the
// levels number at most 3 per tier (about 15 at 50 million events; past 32
// levels the newest 4 are merged whatever their sizes). A merge runs under
// the seal lock, so seals wait for it (the hot part grows meanwhile).
//
// In a burst of appends a seal waits until 2 s have passed since the last
// one, or until the hot part has grown to four times its target: seals
// every 65,536 events cost a share of the CPU of a burst of tens of
// thousands of appends a second, and the hot part's memory is the cheaper
// price (sealSpacing in seal.go). Readers that started before a seal, a
// merge or a trim keep the levels they began with; a replaced level's file
// is closed when no reader refers to it any more (by the os.File
// finaliser).
//
// What the sealed part costs: an append to a stream that has no hot events
// but does have sealed ones reads one block of each level that holds it
// (to learn its version; about 4 µs each from the page cache, on the
// committer), and so does the rare id a filter lets through (about 1 to 2
// % of new ids and streams, per level). A re-append of a sealed event reads
// the stream's positions lists. ReadStream reads a sealed event's record
// offset from its level (one small read per event); ReadAll and Subscribe
// read the offsets of up to 4096 sealed positions of one level with one
// read and take each event's stream name from its record (names repeat
// through a small shared cache, not one string per event). The level
// files are about 40 bytes per event plus 17 bytes and the name per stream
// and level.
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
//	12  4  format version (2)
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
//	68 32  chain hash: eventstore.NextHash over the hash of the record
//	       before (the zero hash before position 0) and this event
//	100 …  stream, type, correlation id, causation id, writer, data, metadata
//
// A record is at most 8+100+200+100+600+1 MiB bytes (eventstore's limits).
//
// Format 1 is format 2 without the chain hash (the variable fields start at
// 68). Open upgrades a format-1 log once: it rewrites it with the hashes to
// log.tmp, syncs it, removes the sealed file (whose offsets change), renames
// log.tmp over log and syncs the directory, so a crash at any point leaves
// either log, and both open (upgrade.go). The rewrite keeps format 1's
// recovery rules: it copies the complete commits and fails, changing
// nothing, on damage that a later write proves. Past
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
// its id new (neither hot nor sealed), and its chain hash is the one that
// follows the record before it; a sound record that breaks one of these
// rules is corruption, named by its position and offset (a record whose
// checksum matches is no torn write, so even the last one is never cut for
// a hash that does not chain). The records the sealed file covers are
// checked against the chain too, unless Options.TrustIndex. An Append or AppendMulti counts only if its last
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
// # Sealed file (a level)
//
// A level file indexes positions [F, N) of the log (the oldest level starts
// at the live log's start). It is written to sealed-<F>-<N>.tmp, synced and
// renamed to sealed-<F>-<N> (then the directory is synced), by background
// seals and merges, by trims and by Close, so a clean restart scans
// nothing. It covers only synced events. Open takes, from the live log's
// start, each time the level file that starts where the last one ended and
// reaches furthest (so after a merge cut short it prefers the merged file,
// and its inputs if the merged file is damaged), checks each one, and
// removes the level files it does not use. All integers are little-endian:
//
//	0   8  magic "TRNSTSLD"
//	8   4  format version (2)
//	12  4  reserved
//	16  …  N-F record offsets (8 bytes each, logical), by position
//	    …  N-F entries sorted by event id (bytewise): id (16), position (8)
//	    …  M entries sorted by stream name (bytewise): name length (1), name,
//	       its number of events (8), the index of its first entry in the
//	       positions lists (8), the stream's version of its first event in
//	       the level (8)
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
// A stream's count is its events in [F, N) and its entry says the version
// of the first of them, so the newest level that holds a stream says how
// many versions it has (a stream with no sealed event left after a trim
// takes its versions from the start file). A level whose F or first offset
// is not where the levels before it end (or the live log starts) is not
// used.
//
// The counts and offsets are in a footer, not a header, so that a seal can
// write the file in one sequential pass. A level file that fails its
// checksum, does not add up, covers more than the log holds, or whose last
// event is not in the log where it says, is ignored (and logged): Open then
// scans the log from there into the hot part, which gives the same result,
// only slower and with the memory of a hot part that size until the first
// seal. Open's check of a level (unless TrustIndex) compares the digests of
// what the records hold (id, position; stream, version, position) and of
// what the level lists, each level on its own.
package embedded
