package embedded

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// testLog is a closed log with known record and commit boundaries.
type testLog struct {
	dir     string
	events  []domain.Envelope
	offsets []int64 // of each record, plus the end of the log
	commits []int   // events in the log after each commit, in order
	log     []byte
}

// buildLog writes n mixed events, then a single append, an AppendMulti of
// three events over two streams and an append of two events, each in its own
// write, and closes the store.
func buildLog(t testing.TB, n int) *testLog {
	t.Helper()
	dir := t.TempDir()
	s := openT(t, dir, Options{NoSync: true, SegmentBytes: DefaultSegmentBytes}) // one file: the tests edit its bytes
	writeMixed(t, s, n)
	mustAppend(t, s, "execution-1", eventstore.Any, richEvent(100))
	mustMulti(t, s,
		eventstore.StreamAppend{Stream: "execution-9", Expected: eventstore.NoStream, Events: []domain.Envelope{richEvent(101), richEvent(102)}},
		eventstore.StreamAppend{Stream: "queue-demo.sleep", Expected: eventstore.StreamExists, Events: []domain.Envelope{richEvent(103)}},
	)
	mustAppend(t, s, "worker-w1", eventstore.Any, richEvent(104), richEvent(105))
	tl := &testLog{dir: dir, events: readAllT(t, s)}
	tl.offsets = recordOffsets(t, s)
	requireClose(t, s)
	// Commits, from the records themselves.
	b, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	tl.log = b
	for p := range tl.events {
		var r rec
		if _, st := parseRecord(b[tl.offsets[p]:tl.offsets[p+1]], &r); st != recOK {
			t.Fatalf("record %d: %v", p, st)
		}
		if r.flags&flagCommit != 0 {
			tl.commits = append(tl.commits, p+1)
		}
	}
	return tl
}

// survivors is how many events a log cut at byte c keeps: those of the
// commits that end at or before c.
func (tl *testLog) survivors(c int64) int {
	k := 0
	for _, n := range tl.commits {
		if tl.offsets[n] <= c {
			k = n
		}
	}
	return k
}

// dirWithLog makes a data directory holding only the given log bytes.
func dirWithLog(t testing.TB, log []byte) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, logName), log, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestTornTail cuts the log at every byte offset inside its last six records
// (three writes: one event, an AppendMulti of three, an append of two): Open
// must keep every complete commit before the cut, drop the rest whole, cut
// the file there, and carry on appending at the right place.
func TestTornTail(t *testing.T) {
	t.Parallel()
	tl := buildLog(t, 17)
	n := len(tl.events)
	from := tl.offsets[n-6]
	if testing.Short() {
		from = tl.offsets[n-2]
	}
	// Four interleaved shares of the offsets, in parallel.
	for share := range int64(4) {
		t.Run(fmt.Sprint(share), func(t *testing.T) {
			t.Parallel()
			for c := from + share; c <= int64(len(tl.log)); c += 4 {
				tornAt(t, tl, c)
			}
		})
	}
}

func tornAt(t *testing.T, tl *testLog, c int64) {
	n := len(tl.events)
	{
		dir := dirWithLog(t, tl.log[:c])
		k := tl.survivors(c)
		s, err := Open(dir, Options{NoSync: true, Preallocate: -1})
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", c, err)
		}
		got := readAllT(t, s)
		requireEvents(t, fmt.Sprintf("cut at %d", c), tl.events[:k], got)
		if fi, err := os.Stat(filepath.Join(dir, logName)); err != nil || fi.Size() != tl.offsets[k] {
			t.Fatalf("cut at %d: log file is %d bytes after Open, want %d (%v)", c, fi.Size(), tl.offsets[k], err)
		}
		last := tl.events[k-1]
		res := mustAppend(t, s, last.Stream, eventstore.Exact(last.Version), ev("test.after", int(c)))
		if res.Position != uint64(k) || res.Version != last.Version+1 {
			t.Fatalf("cut at %d: append after recovery landed at %+v, want position %d version %d", c, res, k, last.Version+1)
		}
		// The dropped events were never stored: their ids are free.
		if k < n {
			dropped := withoutStoreFields(tl.events[k])
			if _, err := s.Append(ctxT(t), "execution-retry", eventstore.NoStream, dropped); err != nil {
				t.Fatalf("cut at %d: re-append of a dropped event: %v", c, err)
			}
		}
		requireClose(t, s)
		s = openT(t, dir, Options{NoSync: true})
		if h, _ := s.Head(ctxT(t)); h != uint64(k+1+min(1, n-k)) {
			t.Fatalf("cut at %d: Head after reopen = %d, want %d", c, h, k+1+min(1, n-k))
		}
		requireClose(t, s)
		_ = os.RemoveAll(dir) // keep the disk use of 2,000 cuts low
	}
}

// TestTornTailGarbage: what follows the last complete write is cut whatever
// it is (zeros are the preallocated tail and stay), with the index present
// or not.
func TestTornTailGarbage(t *testing.T) {
	t.Parallel()
	tl := buildLog(t, 10)
	n := len(tl.events)
	lastRec := tl.log[tl.offsets[n-1]:]
	rnd := make([]byte, 5000)
	for i := range rnd {
		rnd[i] = byte(rand.IntN(256))
	}
	for _, c := range []struct {
		name string
		tail []byte
		cut  bool
	}{
		{"zeros", make([]byte, 3<<20), false},
		{"random", rnd, true},
		{"half a record", lastRec[:len(lastRec)/2], true},
		{"record header only", lastRec[:prefixSize], true},
		{"ones", bytes.Repeat([]byte{0xff}, 1000), true},
	} {
		for _, withIndex := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/index=%v", c.name, withIndex), func(t *testing.T) {
				t.Parallel()
				dir := copyDir(t, tl.dir)
				if !withIndex {
					if err := os.Remove(filepath.Join(dir, sealedName)); err != nil {
						t.Fatal(err)
					}
				}
				f, err := os.OpenFile(filepath.Join(dir, logName), os.O_WRONLY|os.O_APPEND, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.Write(c.tail); err != nil {
					t.Fatal(err)
				}
				if err := f.Close(); err != nil {
					t.Fatal(err)
				}
				logs := &logRecorder{}
				s := openT(t, dir, Options{Logger: slog.New(logs), Preallocate: -1})
				requireEvents(t, "after recovery", tl.events, readAllT(t, s))
				fi, _ := os.Stat(filepath.Join(dir, logName))
				wantSize := int64(len(tl.log))
				if !c.cut {
					wantSize += int64(len(c.tail))
				}
				if fi.Size() != wantSize {
					t.Fatalf("log is %d bytes after Open, want %d", fi.Size(), wantSize)
				}
				warned := slices.ContainsFunc(logs.messages(), func(m string) bool { return strings.Contains(m, "torn") })
				if warned != c.cut {
					t.Fatalf("warned about a torn write: %v, want %v (%q)", warned, c.cut, logs.messages())
				}
				mustAppend(t, s, "execution-1", eventstore.Any, ev("test.after", 0))
				requireClose(t, s)
				if got := readBack(t, dir); len(got) != n+1 {
					t.Fatalf("after append and reopen: %d events, want %d", len(got), n+1)
				}
			})
		}
	}
}

// flip returns a copy of b with the byte at i inverted.
func flip(b []byte, i int64) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0xff
	return c
}

// TestCorruptMiddle damages one byte of a record in the middle of the log,
// in each of its parts. Open must fail with ErrCorrupt naming the record's
// offset and leave the files as they were, whether it scans the log (no
// index) or checks it against the index. With TrustIndex, Open succeeds and
// reading that record fails the same way.
func TestCorruptMiddle(t *testing.T) {
	t.Parallel()
	tl := buildLog(t, 20)
	p := 10
	off := tl.offsets[p]
	size := tl.offsets[p+1] - off
	parts := map[string]int64{
		"length low byte":  0,
		"length high byte": 3,
		"checksum":         5,
		"position":         prefixSize + offPosition,
		"version":          prefixSize + offVersion + 1,
		"id":               prefixSize + offID + 7,
		"in-write":         prefixSize + offInWrite,
		"flags":            prefixSize + offFlags,
		"stream":           prefixSize + fixedBody + 2,
		"last byte":        size - 1,
	}
	for part, at := range parts {
		for _, mode := range []string{"scan", "verify", "trust"} {
			t.Run(part+"/"+mode, func(t *testing.T) {
				t.Parallel()
				dir := copyDir(t, tl.dir)
				if mode == "scan" {
					if err := os.Remove(filepath.Join(dir, sealedName)); err != nil {
						t.Fatal(err)
					}
				}
				logPath := filepath.Join(dir, logName)
				damaged := flip(tl.log, off+at)
				if err := os.WriteFile(logPath, damaged, 0o644); err != nil {
					t.Fatal(err)
				}
				index, _ := os.ReadFile(filepath.Join(dir, sealedName))
				requireFiles := func(when string) {
					t.Helper()
					got, _ := os.ReadFile(logPath)
					gotIndex, _ := os.ReadFile(filepath.Join(dir, sealedName))
					if !bytes.Equal(got, damaged) || !bytes.Equal(gotIndex, index) {
						t.Fatalf("%s changed the files", when)
					}
				}
				wantOff := fmt.Sprintf("offset %d", off)
				s, err := Open(dir, Options{TrustIndex: mode == "trust"})
				if mode != "trust" {
					if err == nil {
						_ = s.Close()
					}
					if !errors.Is(err, eventstore.ErrCorrupt) || !strings.Contains(err.Error(), wantOff) {
						t.Fatalf("Open = %v, want ErrCorrupt naming %s", err, wantOff)
					}
					requireFiles("a failed Open")
					return
				}
				if err != nil {
					t.Fatalf("Open with TrustIndex: %v", err)
				}
				_, err = s.ReadAll(ctxT(t), 0, 100)
				if !errors.Is(err, eventstore.ErrCorrupt) || !strings.Contains(err.Error(), wantOff) {
					t.Fatalf("ReadAll over the damaged record = %v, want ErrCorrupt naming %s", err, wantOff)
				}
				after, err := s.ReadAll(ctxT(t), uint64(p+1), 100)
				if err != nil {
					t.Fatalf("ReadAll past the damaged record: %v", err)
				}
				requireEvents(t, "past the damaged record", tl.events[p+1:], after)
				requireClose(t, s)
				requireFiles("Open and Close with TrustIndex")
			})
		}
	}
}

// TestDamagedWrite: a write whose records are not all intact is a torn write
// if it is the last one (the disk may persist its pages in any order before
// the fsync returns), and is cut whole; the same damage to an earlier write
// is corruption, because a later write proves that one was synced.
func TestDamagedWrite(t *testing.T) {
	t.Parallel()
	tl := buildLog(t, 10)
	n := len(tl.events)
	// The last three writes are: 1 event, 3 events (AppendMulti), 2 events.
	lastWrite := n - 2
	multiWrite := n - 5
	zero := func(b []byte, from, to int64) []byte {
		c := bytes.Clone(b)
		clear(c[from:to])
		return c
	}
	for _, c := range []struct {
		name    string
		log     []byte
		keep    int // events kept; -1: ErrCorrupt
		corrupt int64
	}{
		{"last write: first record zeroed", zero(tl.log, tl.offsets[lastWrite], tl.offsets[lastWrite+1]), lastWrite, 0},
		{"last write: last record flipped", flip(tl.log, tl.offsets[n-1]+prefixSize+fixedBody), lastWrite, 0},
		{"last write: all zeroed", zero(tl.log, tl.offsets[lastWrite], tl.offsets[n]), lastWrite, 0},
		{"earlier write: middle record zeroed", zero(tl.log, tl.offsets[multiWrite+1], tl.offsets[multiWrite+2]), -1, tl.offsets[multiWrite+1]},
		{"earlier write: partly zeroed", zero(tl.log, tl.offsets[multiWrite+1]+20, tl.offsets[multiWrite+2]+10), -1, tl.offsets[multiWrite+1]},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := dirWithLog(t, c.log)
			s, err := Open(dir, Options{})
			if c.keep < 0 {
				if err == nil {
					_ = s.Close()
				}
				if want := fmt.Sprintf("offset %d", c.corrupt); !errors.Is(err, eventstore.ErrCorrupt) || !strings.Contains(err.Error(), want) {
					t.Fatalf("Open = %v, want ErrCorrupt naming %s", err, want)
				}
				if got, _ := os.ReadFile(filepath.Join(dir, logName)); !bytes.Equal(got, c.log) {
					t.Fatal("a failed Open changed the log")
				}
				return
			}
			if err != nil {
				t.Fatalf("Open: %v", err)
			}
			defer requireClose(t, s)
			requireEvents(t, "after recovery", tl.events[:c.keep], readAllT(t, s))
		})
	}
}

// TestIndexFallback: an index that is damaged, or does not belong to the log,
// is ignored (the log is scanned instead); a stale one is used for what it
// covers.
func TestIndexFallback(t *testing.T) {
	t.Parallel()
	tl := buildLog(t, 30)
	index, err := os.ReadFile(filepath.Join(tl.dir, sealedName))
	if err != nil {
		t.Fatal(err)
	}
	other := buildLog(t, 40)
	otherIndex, _ := os.ReadFile(filepath.Join(other.dir, sealedName))
	// A stale index: of the same log when it was shorter.
	staleDir := dirWithLog(t, tl.log[:tl.offsets[20]])
	s := openT(t, staleDir, Options{})
	requireClose(t, s)
	staleIndex, _ := os.ReadFile(filepath.Join(staleDir, sealedName))
	for _, c := range []struct {
		name   string
		index  []byte
		usable bool
	}{
		{"flipped byte", flip(index, int64(len(index)/2)), false},
		{"flipped header", flip(index, 20), false},
		{"truncated", index[:len(index)-9], false},
		{"empty", nil, false},
		{"another log's", otherIndex, false},
		{"a stream name twice, checksum right", repeatStreamName(t, index), false},
		{"stale", staleIndex, true},
		{"intact", index, true},
	} {
		for _, trust := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/trust=%v", c.name, trust), func(t *testing.T) {
				t.Parallel()
				dir := dirWithLog(t, tl.log)
				if err := os.WriteFile(filepath.Join(dir, sealedName), c.index, 0o644); err != nil {
					t.Fatal(err)
				}
				logs := &logRecorder{}
				s := openT(t, dir, Options{TrustIndex: trust, Logger: slog.New(logs)})
				requireEvents(t, "after Open", tl.events, readAllT(t, s))
				ignored := slices.ContainsFunc(logs.messages(), func(m string) bool { return strings.Contains(m, "ignoring the sealed index") })
				if ignored == c.usable {
					t.Fatalf("index ignored: %v, want %v (%q)", ignored, !c.usable, logs.messages())
				}
				if used := s.loadedSealed > 0; used != c.usable {
					t.Fatalf("index used: %v, want %v", used, c.usable)
				}
				last := tl.events[len(tl.events)-1]
				mustAppend(t, s, last.Stream, eventstore.Exact(last.Version), ev("test.after", 0))
				requireClose(t, s)
				if got := readBack(t, dir); len(got) != len(tl.events)+1 {
					t.Fatalf("after append and reopen: %d events", len(got))
				}
			})
		}
	}
}

// repeatStreamName returns the sealed file with the name of a stream entry
// overwritten by that of an earlier entry of the same length, and its
// checksum fixed: a file that no writer makes, which Open must refuse.
func repeatStreamName(t *testing.T, file []byte) []byte {
	t.Helper()
	out := slices.Clone(file)
	footer := out[len(out)-sealedTrailer-sealedFooterSize:]
	m := int(binary.LittleEndian.Uint64(footer[32:]))
	off := int(binary.LittleEndian.Uint64(footer[48:]))
	firstOfLen := map[int]int{} // name length → offset of its first entry
	for range m {
		l := int(out[off])
		if at, ok := firstOfLen[l]; ok {
			copy(out[off+1:off+1+l], out[at+1:at+1+l])
			body := out[:len(out)-sealedTrailer]
			binary.LittleEndian.PutUint32(out[len(body):], crc32.Checksum(body, castagnoli))
			return out
		}
		firstOfLen[l] = off
		off += streamFixed + l
	}
	t.Fatal("the test log has no two stream names of one length")
	return nil
}

// TestPeriodicCheckpoint: the index is written in the background as the log
// grows, and a crash then costs only the scan of the tail.
func TestPeriodicCheckpoint(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{CheckpointEvery: 10, NoSync: true})
	for i := range 50 {
		mustAppend(t, s, fmt.Sprintf("execution-%d", i%7), eventstore.Any, richEvent(i))
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.sealedEvents() < 40 {
		if time.Now().After(deadline) {
			t.Fatalf("no seal of at least 40 events after 50 appends (last covers %d)", s.sealedEvents())
		}
		time.Sleep(time.Millisecond)
	}
	written := readAllT(t, s)
	crash(s)
	s = openT(t, dir, Options{NoSync: true})
	if c := s.loadedSealed; c < 40 {
		t.Fatalf("reopen used a sealed file of %d events, want the last seal", c)
	}
	requireEvents(t, "after crash", written, readAllT(t, s))
}

// TestConditionLastSurvivesACrash: an AppendMulti whose last part is a
// condition (no events) marks its last written record as the commit, so the
// scan after a crash keeps it (it would drop a write without a commit
// record as torn).
func TestConditionLastSurvivesACrash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := openT(t, dir, Options{NoSync: true, CheckpointEvery: -1})
	mustAppend(t, s, "worker-w", eventstore.NoStream, ev("test.reg", 0))
	written := []domain.Envelope{ev("test.a", 1), ev("test.a", 2)}
	mustMulti(t, s,
		eventstore.StreamAppend{Stream: "execution-x", Expected: eventstore.NoStream, Events: written},
		eventstore.StreamAppend{Stream: "worker-w", Expected: eventstore.Exact(0)})
	crash(s)
	s = openT(t, dir, Options{NoSync: true})
	got := readAllT(t, s)
	if len(got) != 3 {
		t.Fatalf("after the crash the log has %d events, want 3", len(got))
	}
	for i, e := range got[1:] {
		if e.ID != written[i].ID || e.Stream != "execution-x" || e.Version != uint64(i) {
			t.Fatalf("event %d after the crash: %s in %s at version %d, want %s in execution-x at %d", i+1, e.ID, e.Stream, e.Version, written[i].ID, i)
		}
	}
}
