package archive_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/memstore"
)

// awkward data and metadata: each must come back byte for byte.
var awkward = []string{
	`{"a":1}`,
	`{ "spaced" : [1, 2 ,3] }`,
	`{"html":"<b>&amp;</b>","lt":"\u003c"}`,
	"{\n  \"pretty\": true\n}",
	` {"leading":"space"}`,
	`{"trailing":"space"}  `,
	`"just a string"`,
	`null`,
	`12.50e3`,
	"not json at all",
	"\xff\xfe not utf-8",
	`{"unicode":"é ✓ \ud83d\ude00"}`,
	"",
}

// fill appends n events to a new memstore, streams s-0..s-(streams-1) in
// turn, with awkward data and metadata.
func fill(t testing.TB, n, streams int) *memstore.Store {
	t.Helper()
	clock := time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)
	st := memstore.New(memstore.Options{Clock: func() time.Time { clock = clock.Add(time.Millisecond + 7); return clock }})
	for i := 0; i < n; i++ {
		e := domain.Envelope{
			ID: uuid.New(), Type: "test.event", SchemaVersion: 1 + i%2, Owner: domain.OwnerExecutor,
			Data: []byte(awkward[i%len(awkward)]), Metadata: []byte(awkward[(i/3)%len(awkward)]),
		}
		if i%5 == 0 {
			e.CorrelationID, e.CausationID, e.Writer = "corr<&>", "cause\"q\"", "writer\\1"
		}
		if i%11 == 3 {
			e.CorrelationID = "not \xff utf-8" // kept as its bytes (correlation_id_base64)
		}
		if _, err := st.Append(context.Background(), fmt.Sprintf("s-%d", i%streams), eventstore.Any, e); err != nil {
			t.Fatal(err)
		}
	}
	return st
}

// same fails unless got is want (hash aside when want has none).
func same(t testing.TB, got, want domain.Envelope) {
	t.Helper()
	if !want.Hash.IsZero() && got.Hash != want.Hash {
		t.Fatalf("position %d: hash %s, want %s", want.Position, got.Hash, want.Hash)
	}
	got.Hash, want.Hash = domain.Hash{}, domain.Hash{}
	if !got.Time.Equal(want.Time) || got.Time.Location() != time.UTC {
		t.Fatalf("position %d: time %v, want %v", want.Position, got.Time, want.Time)
	}
	got.Time = want.Time
	if !bytes.Equal(got.Data, want.Data) || !bytes.Equal(got.Metadata, want.Metadata) {
		t.Fatalf("position %d: data %q metadata %q, want %q %q", want.Position, got.Data, got.Metadata, want.Data, want.Metadata)
	}
	got.Data, want.Data, got.Metadata, want.Metadata = nil, nil, nil, nil
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("position %d:\n got %+v\nwant %+v", want.Position, got, want)
	}
}

func TestWriteThenReadIsByteExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 10_000, 37)
	dir := t.TempDir()
	a := archivetest.Write(t, src, dir, 3000, 0, 10_000)
	segs := a.Segments()
	if len(segs) != 4 || segs[3].First != 9000 || segs[3].Last != 9999 || a.End() != 10_000 {
		t.Fatalf("segments %+v, end %d", segs, a.End())
	}
	b := archivetest.Open(t, dir) // a fresh reader sees the same
	if b.End() != 10_000 || b.EndHash() != a.EndHash() || b.EndHash().IsZero() {
		t.Fatalf("reopened: end %d hash %s, want 10000 %s", b.End(), b.EndHash(), a.EndHash())
	}
	want := archivetest.ReadAll(t, src, 0)
	got := archivetest.ReadAll(t, archive.History{Archive: b, Live: memstore.New(memstore.Options{})}, 0)
	if len(got) != len(want) {
		t.Fatalf("read %d events, want %d", len(got), len(want))
	}
	var prev domain.Hash
	for i := range want {
		same(t, got[i], want[i])
		if h := eventstore.NextHash(prev, &want[i]); got[i].Hash != h {
			t.Fatalf("position %d: hash %s, the chain gives %s", i, got[i].Hash, h)
		}
		prev = got[i].Hash
	}
	// Reads from any position, in pages that cross blocks and segments.
	for _, from := range []uint64{0, 1, 4095, 4096, 2999, 3000, 8191, 9999} {
		evs, err := b.Read(ctx, from, 5000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != min(5000, 10_000-int(from)) || evs[0].Position != from {
			t.Fatalf("Read(%d): %d events from %d", from, len(evs), evs[0].Position)
		}
	}
	if h, err := b.PrevHash(ctx, 4097); err != nil || h != want[4096].Hash && !want[4096].Hash.IsZero() || h != got[4096].Hash {
		t.Fatalf("PrevHash(4097) = %s, %v; want %s", h, err, got[4096].Hash)
	}
	if h, err := b.PrevHash(ctx, 3000); err != nil || h != got[2999].Hash {
		t.Fatalf("PrevHash(3000) = %s, %v; want %s", h, err, got[2999].Hash)
	}
}

func TestSegmentsReadWithGzipAndJq(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("jq"); err != nil {
		t.Skip("jq is not installed")
	}
	src := fill(t, 200, 3)
	dir := t.TempDir()
	a := archivetest.Write(t, src, dir, 0, 0, 200)
	name := filepath.Join(dir, a.Segments()[0].Name)
	out, err := exec.Command("sh", "-c", "gzip -dc "+name+" | jq -c '[.position, .stream, .data]'").CombinedOutput()
	if err != nil {
		t.Fatalf("gzip -dc | jq: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 200 || lines[1] != `[1,"s-1",{"spaced":[1,2,3]}]` || lines[2] != `[2,"s-2",{"html":"<b>&amp;</b>","lt":"<"}]` {
		t.Fatalf("jq read %d lines: %q", len(lines), lines[:3])
	}
	// Data that is not JSON is there for jq too, as its exact bytes.
	out, err = exec.Command("sh", "-c", "gzip -dc "+name+" | jq -r 'select(.position==9) | .data_base64 | @base64d'").CombinedOutput()
	if err != nil || string(out) != "not json at all\n" {
		t.Fatalf("jq @base64d: %v %q", err, out)
	}
}

func TestWriteIsIdempotentAndRefusesPartialOverlap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 1000, 5)
	dir := t.TempDir()
	a := archivetest.Write(t, src, dir, 300, 0, 600)
	before := listDir(t, dir)
	for _, r := range [][2]uint64{{0, 600}, {0, 300}, {300, 600}} {
		if err := a.Write(ctx, src, r[0], r[1]); err != nil {
			t.Fatalf("Write(%d, %d) again: %v", r[0], r[1], err)
		}
	}
	if after := listDir(t, dir); after != before {
		t.Fatalf("rewriting archived ranges changed the directory:\n%s\n%s", before, after)
	}
	for _, r := range [][2]uint64{{100, 700}, {0, 450}, {601, 700}} {
		if err := a.Write(ctx, src, r[0], r[1]); err == nil {
			t.Fatalf("Write(%d, %d) cuts a segment or leaves a gap, and succeeded", r[0], r[1])
		}
	}
	// An archived range goes on with the rest in one call.
	if err := a.Write(ctx, src, 300, 1000); err != nil || a.End() != 1000 {
		t.Fatalf("Write(300, 1000): %v, end %d", err, a.End())
	}
	// A log that differs from the archive is refused.
	other := fill(t, 1000, 5)
	if err := a.Write(ctx, other, 0, 300); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("Write from a different log: %v, want ErrArchive", err)
	}
	if _, err := a.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
}

func listDir(t testing.TB, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range entries {
		info, _ := e.Info()
		fmt.Fprintf(&b, "%s %d %v\n", e.Name(), info.Size(), info.ModTime())
	}
	return b.String()
}

func TestASegmentWithoutItsIndexIsWrittenAgain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 500, 5)
	dir := t.TempDir()
	a := archivetest.Write(t, src, dir, 200, 0, 500)
	last := a.Segments()[2]
	idx := filepath.Join(dir, strings.TrimSuffix(last.Name, ".jsonl.gz")+".index.json.gz")
	// A crash after the segment's rename and before its index's: the
	// segment is there (here, half of it), its index is not.
	if err := os.Remove(idx); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(filepath.Join(dir, last.Name), last.Bytes/2); err != nil {
		t.Fatal(err)
	}
	// … and a temporary file of the index's write.
	tmp := filepath.Join(dir, "."+strings.TrimSuffix(last.Name, ".jsonl.gz")+".index.json.gz.123.tmp")
	if err := os.WriteFile(tmp, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := archivetest.Open(t, dir)
	if b.End() != 400 {
		t.Fatalf("end %d with the last index missing, want 400", b.End())
	}
	b.SetSegmentEvents(200)
	if err := b.Write(ctx, src, 0, 500); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(tmp); !os.IsNotExist(err) {
		t.Fatalf("the temporary file is still there: %v", err)
	}
	c := archivetest.Open(t, dir)
	if v, err := c.Verify(ctx, nil); err != nil || v.End != 500 || v.Events != 500 || v.Segments != 3 {
		t.Fatalf("verify after the rewrite: %+v %v", v, err)
	}
	// A missing index in the middle is no interrupted write: Open refuses.
	mid := c.Segments()[1]
	if err := os.Remove(filepath.Join(dir, strings.TrimSuffix(mid.Name, ".jsonl.gz")+".index.json.gz")); err != nil {
		t.Fatal(err)
	}
	if _, err := archive.Open(dir); !errors.Is(err, archive.ErrArchive) {
		t.Fatalf("Open with a middle index missing: %v, want ErrArchive", err)
	}
}

func TestReadStreamUsesTheIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 9000, 50)
	// One stream only in the last segment, one in none.
	if _, err := src.Append(ctx, "late", eventstore.NoStream, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	a := archivetest.Write(t, src, t.TempDir(), 2500, 0, 9001)
	for _, stream := range []string{"s-0", "s-17", "s-49", "late"} {
		want, err := src.ReadStream(ctx, stream, 0, 100_000)
		if err != nil {
			t.Fatal(err)
		}
		got, err := a.ReadStream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Fatalf("%s: %d events, want %d", stream, len(got), len(want))
		}
		for i := range want {
			same(t, got[i], want[i])
		}
		if e, ok, err := a.FirstEvent(ctx, stream, time.Time{}); !ok || err != nil || e.Version != 0 || e.Position != want[0].Position {
			t.Fatalf("FirstEvent(%s) = %v, %v", stream, ok, err)
		}
	}
	if got, err := a.ReadStream(ctx, "s-50"); err != nil || len(got) != 0 {
		t.Fatalf("ReadStream of an unknown stream: %d events, %v", len(got), err)
	}
	if _, ok, err := a.FirstEvent(ctx, "nope", time.Time{}); ok || err != nil {
		t.Fatalf("FirstEvent(nope) = %v, %v", ok, err)
	}
}

func TestVerifyNamesTheFirstBadPosition(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 6000, 7)
	tamper := []struct {
		name string
		do   func(t *testing.T, seg string) // seg: the second segment's path (positions 2000..3999)
		want uint64
	}{
		{"nothing", func(*testing.T, string) {}, 0},
		{"flip a byte of the compressed file", func(t *testing.T, seg string) {
			b, _ := os.ReadFile(seg)
			b[len(b)/2] ^= 0x40
			os.WriteFile(seg, b, 0o644)
		}, 0 /* checked below: within the segment */},
		{"flip a byte of an event's data", func(t *testing.T, seg string) {
			l := archivetest.SegmentLines(t, seg)
			if !strings.Contains(l[2], `"data":{"a":1}`) {
				t.Fatalf("line 2 is %s", l[2])
			}
			l[2] = strings.Replace(l[2], `"data":{"a":1}`, `"data":{"a":2}`, 1)
			archivetest.WriteSegment(t, seg, l)
		}, 2002},
		{"white space outside the data is no change", func(t *testing.T, seg string) {
			l := archivetest.SegmentLines(t, seg)
			l[2] = strings.Replace(l[2], `"data":{"a":1}`, `"data": {"a":1}`, 1)
			archivetest.WriteSegment(t, seg, l)
		}, 2000 /* the file differs from its index's SHA-256 */},
		{"drop an event", func(t *testing.T, seg string) {
			l := archivetest.SegmentLines(t, seg)
			archivetest.WriteSegment(t, seg, append(l[:700:700], l[701:]...))
		}, 2700},
		{"reorder two events", func(t *testing.T, seg string) {
			l := archivetest.SegmentLines(t, seg)
			l[1200], l[1201] = l[1201], l[1200]
			archivetest.WriteSegment(t, seg, l)
		}, 3200},
		{"truncate the segment", func(t *testing.T, seg string) {
			l := archivetest.SegmentLines(t, seg)
			archivetest.WriteSegment(t, seg, l[:1500])
		}, 3500},
		{"truncate the file", func(t *testing.T, seg string) {
			info, _ := os.Stat(seg)
			os.Truncate(seg, info.Size()*3/4)
		}, 0},
		{"change an event's type", func(t *testing.T, seg string) {
			l := archivetest.SegmentLines(t, seg)
			l[10] = strings.Replace(l[10], `"type":"test.event"`, `"type":"test.evenX"`, 1)
			archivetest.WriteSegment(t, seg, l)
		}, 2010},
	}
	for _, tc := range tamper {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a := archivetest.Write(t, src, dir, 2000, 0, 6000)
			seg := filepath.Join(dir, a.Segments()[1].Name)
			tc.do(t, seg)
			b := archivetest.Open(t, dir)
			v, err := b.Verify(ctx, nil)
			var m *archive.Mismatch
			if tc.name == "nothing" {
				if err != nil || v.Events != 6000 || v.End != 6000 || v.EndHash != b.EndHash() {
					t.Fatalf("untouched archive: %+v %v", v, err)
				}
				return
			}
			if !errors.As(err, &m) || !errors.Is(err, archive.ErrMismatch) {
				t.Fatalf("verify after %s: %v, want a Mismatch", tc.name, err)
			}
			if m.Segment != a.Segments()[1].Name {
				t.Fatalf("mismatch in %s, want the second segment: %v", m.Segment, err)
			}
			if tc.want != 0 && m.Position != tc.want || m.Position < 2000 || m.Position > 3999 {
				t.Fatalf("verify names position %d, want %d: %v", m.Position, tc.want, err)
			}
			t.Log(err)
		})
	}
}

// Many streams: the index lists them in several blocks, each lookup reads
// one, and the index reads with gzip and jq too.
func TestReadStreamAmongManyStreams(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 7000, 5000)
	dir := t.TempDir()
	a := archivetest.Write(t, src, dir, 0, 0, 7000)
	for _, stream := range []string{"s-0", "s-1", "s-2047", "s-2048", "s-3999", "s-4999", "s-999"} {
		want, _ := src.ReadStream(ctx, stream, 0, 100)
		got, err := a.ReadStream(ctx, stream)
		if err != nil || len(got) != len(want) || len(got) == 0 {
			t.Fatalf("%s: %d events, %v; want %d", stream, len(got), err, len(want))
		}
		for i := range want {
			same(t, got[i], want[i])
		}
	}
	if _, ok, _ := a.FirstEvent(ctx, "s-5000", time.Time{}); ok {
		t.Fatal("found s-5000")
	}
	if _, err := a.Verify(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("jq"); err == nil {
		idx := filepath.Join(dir, strings.TrimSuffix(a.Segments()[0].Name, ".jsonl.gz")+".index.json.gz")
		out, err := exec.Command("sh", "-c", "gzip -dc "+idx+" | jq -c '[.header.count, (.header.stream_blocks|length), (.streams|length), (.streams[]|select(.stream==\"s-4999\")|.positions)]'").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "[7000,3,5000,[4999]]" {
			t.Fatalf("jq over the index: %v %s", err, out)
		}
	}
}

// TestRefreshReadsOnlyNewHeaders: a refresh reads the index headers of the
// segments written since the last one and no others (a history that
// refreshes on every trim of the live log would otherwise read the whole
// archive's headers each time), and sees the new segments.
func TestRefreshReadsOnlyNewHeaders(t *testing.T) {
	ctx := context.Background()
	src := fill(t, 500, 5)
	dir := t.TempDir()
	archivetest.Write(t, src, dir, 100, 0, 300)
	before := archive.HeaderReads()
	reader := archivetest.Open(t, dir)
	if got := archive.HeaderReads() - before; got != 3 {
		t.Fatalf("Open read %d headers, want 3", got)
	}
	writer := archivetest.Open(t, dir) // another process appends two segments
	writer.SetSegmentEvents(100)
	if err := writer.Write(ctx, src, 300, 500); err != nil {
		t.Fatal(err)
	}
	before = archive.HeaderReads()
	if err := reader.Refresh(); err != nil {
		t.Fatal(err)
	}
	if got := archive.HeaderReads() - before; got != 2 {
		t.Errorf("Refresh read %d headers, want the 2 new ones", got)
	}
	if n, end := len(reader.Segments()), reader.End(); n != 5 || end != 500 {
		t.Errorf("after Refresh: %d segments ending at %d, want 5 ending at 500", n, end)
	}
	if err := reader.Refresh(); err != nil || archive.HeaderReads()-before != 2 {
		t.Errorf("a second Refresh with nothing new: err %v, %d headers read in all, want 2", err, archive.HeaderReads()-before)
	}
}

// TestFirstEventReadsOnlyTheWindow: FirstEvent finds a stream's first event
// by reading the segments whose log times reach since, newest first; a
// stream seen there is followed back to its start however old; a stream
// only in older segments is not found, and those segments' indexes are not
// read.
func TestFirstEventReadsOnlyTheWindow(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC)
	at := t0
	src := memstore.New(memstore.Options{Clock: func() time.Time { return at }})
	for i := range 10_000 { // one event a second, segments of 1,000
		at = t0.Add(time.Duration(i) * time.Second)
		stream := fmt.Sprintf("filler-%d", i%40)
		switch i {
		case 0, 8500:
			stream = "old" // requested long ago, an event in the window
		case 10, 20:
			stream = "gone"
		case 8200, 8300:
			stream = "recent"
		}
		if _, err := src.Append(ctx, stream, eventstore.Any, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	archivetest.Write(t, src, dir, 1000, 0, 10_000)
	a := archivetest.Open(t, dir) // its look-up cache empty
	since := t0.Add(7000 * time.Second)

	before := archive.LookupReads()
	if e, found, err := a.FirstEvent(ctx, "nowhere", since); err != nil || found || e != nil {
		t.Fatalf("an unknown stream: %v %v", found, err)
	}
	if n := archive.LookupReads() - before; n != 3 {
		t.Fatalf("an unknown stream read %d segments' indexes, want the 3 of the window", n)
	}
	for _, c := range []struct {
		stream string
		pos    uint64
	}{{"recent", 8200}, {"old", 0}} {
		e, found, err := a.FirstEvent(ctx, c.stream, since)
		if err != nil || !found || e.Stream != c.stream || e.Version != 0 || e.Position != c.pos {
			t.Fatalf("%s: found %v, %+v, %v; want version 0 at %d", c.stream, found, e, err, c.pos)
		}
	}
	if _, found, err := a.FirstEvent(ctx, "gone", since); err != nil || found {
		t.Fatalf("a stream that ended before the window: found %v, %v", found, err)
	}
	if e, found, err := a.FirstEvent(ctx, "gone", time.Time{}); err != nil || !found || e.Position != 10 {
		t.Fatalf("the same with no window: found %v, %+v, %v", found, e, err)
	}
}

// TestReadsServeNothingOfASegmentThatDoesNotVerify: after one event's data
// changed in the second segment, reads of that segment (Read, ReadStream,
// FirstEvent, History) fail with a *Mismatch naming it, every time, and
// the other segments still read; History's Unverified view reads it (for
// the audit, which checks the chain itself).
func TestReadsServeNothingOfASegmentThatDoesNotVerify(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := fill(t, 6000, 7)
	dir := t.TempDir()
	a := archivetest.Write(t, src, dir, 2000, 0, 6000)
	seg := filepath.Join(dir, a.Segments()[1].Name)
	l := archivetest.SegmentLines(t, seg)
	l[2] = strings.Replace(l[2], `"data":{"a":1}`, `"data":{"a":2}`, 1)
	archivetest.WriteSegment(t, seg, l)
	if evs, err := a.Read(ctx, 2002, 1); err != nil || len(evs) != 1 {
		t.Fatalf("the writer's own segments count as verified: %v", err) // (it wrote them from a log it checked)
	}
	b := archivetest.Open(t, dir)
	stream := l[2][strings.Index(l[2], `"stream":"`)+10:]
	stream = stream[:strings.IndexByte(stream, '"')]
	for range 2 { // the second time from the remembered verdict
		for name, read := range map[string]func() error{
			"Read":       func() error { _, err := b.Read(ctx, 3999, 1); return err },
			"ReadStream": func() error { _, err := b.ReadStream(ctx, stream); return err },
			"FirstEvent": func() error { _, _, err := b.FirstEvent(ctx, stream, time.Time{}); return err },
			"History": func() error {
				_, err := archive.History{Archive: b, Live: src}.ReadAll(ctx, 2500, 10)
				return err
			},
		} {
			err := read()
			var m *archive.Mismatch
			if !errors.As(err, &m) || !errors.Is(err, eventstore.ErrCorrupt) || m.Position != 2002 || m.Segment != a.Segments()[1].Name {
				t.Fatalf("%s of the tampered segment: %v, want a Mismatch at 2002", name, err)
			}
		}
	}
	if evs, err := b.Read(ctx, 0, 2000); err != nil || len(evs) != 2000 {
		t.Fatalf("the first segment: %d events, %v", len(evs), err)
	}
	if evs, err := b.Read(ctx, 4000, 10); err != nil || len(evs) != 10 {
		t.Fatalf("the third segment: %d events, %v", len(evs), err)
	}
	raw := archive.History{Archive: b, Live: src}.Unverified()
	evs, err := raw.ReadAll(ctx, 2002, 1)
	if err != nil || len(evs) != 1 || string(evs[0].Data) != `{"a":2}` {
		t.Fatalf("the unverified view: %+v %v", evs, err)
	}
}
