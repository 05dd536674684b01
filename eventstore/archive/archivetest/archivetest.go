// Package archivetest sets up archives for tests: a log's range written to
// a fresh archive, a live log moved to its archive and trimmed, a whole log
// read back, and a segment's lines read and written again to tamper with it.
package archivetest

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
)

// Open opens the archive in dir (creating the directory if need be); it
// closes when the test ends. The test fails if it does not open.
func Open(t testing.TB, dir string) *archive.Archive {
	t.Helper()
	a, err := archive.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

// Write opens the archive in dir as Open does and archives positions
// [from, to) of src into it, in segments of at most segmentEvents events
// (archive.DefaultSegmentEvents when 0). The test fails if the write does.
func Write(t testing.TB, src eventstore.Store, dir string, segmentEvents int, from, to uint64) *archive.Archive {
	t.Helper()
	a := Open(t, dir)
	if segmentEvents > 0 {
		a.SetSegmentEvents(segmentEvents)
	}
	if err := a.Write(context.Background(), src, from, to); err != nil {
		t.Fatal(err)
	}
	return a
}

// Trimmable is a live log that can be trimmed.
type Trimmable interface {
	eventstore.Store
	eventstore.Trimmer
}

// Move does what the archiver does behind a checkpoint: it archives live's
// positions from a's end up to before, then trims live there, keeping the
// streams in keep. The test fails if either step does.
func Move(t testing.TB, a *archive.Archive, live Trimmable, before uint64, keep []string) {
	t.Helper()
	ctx := context.Background()
	if err := a.Write(ctx, live, a.End(), before); err != nil {
		t.Fatal(err)
	}
	if err := live.Trim(ctx, before, keep); err != nil {
		t.Fatal(err)
	}
}

// ReadAll returns the events of s from position from to its head, in
// order. The test fails if a read does.
func ReadAll(t testing.TB, s eventstore.Store, from uint64) []domain.Envelope {
	t.Helper()
	var out []domain.Envelope
	for {
		evs, err := s.ReadAll(context.Background(), from, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return out
		}
		out = append(out, evs...)
		from = evs[len(evs)-1].Position + 1
	}
}

// SegmentLines returns the lines of the gzip file at path (a segment),
// each with its newline, so that joined they are the file's text again.
func SegmentLines(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return strings.SplitAfter(string(b), "\n")
}

// WriteSegment replaces the file at path with lines joined and compressed
// by gzip: a segment as someone who edits it would write it back.
func WriteSegment(t testing.TB, path string, lines []string) {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(strings.Join(lines, ""))); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}
