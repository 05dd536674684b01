package storetest

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// expectedVersionTests: every kind of expected version on a new and on an
// existing stream. A success appends after the stream's last version; a failure
// is a *WrongVersionError (errors.Is ErrWrongExpectedVersion) naming the stream,
// the expectation and the stream's real state, and it changes nothing: not the
// log, not Head, and the rejected ids stay free to be appended later.
func (s suite) expectedVersionTests() []subtest {
	type tc struct {
		name     string
		existing int // events in the stream before the append
		expected eventstore.ExpectedVersion
		ok       bool
	}
	cases := []tc{
		{"NewStream/Any", 0, eventstore.Any, true},
		{"NewStream/NoStream", 0, eventstore.NoStream, true},
		{"NewStream/StreamExists", 0, eventstore.StreamExists, false},
		{"NewStream/Exact0", 0, eventstore.Exact(0), false},
		{"NewStream/Exact1", 0, eventstore.Exact(1), false},
		{"Existing/Any", 2, eventstore.Any, true},
		{"Existing/NoStream", 2, eventstore.NoStream, false},
		{"Existing/StreamExists", 2, eventstore.StreamExists, true},
		{"Existing/ExactCurrent", 2, eventstore.Exact(1), true},
		{"Existing/ExactStale", 2, eventstore.Exact(0), false},
		{"Existing/ExactAhead", 2, eventstore.Exact(2), false},
		{"Existing/ExactFarAhead", 2, eventstore.Exact(1 << 40), false},
	}
	var tests []subtest
	for _, c := range cases {
		tests = append(tests, subtest{name: c.name, run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-target"
			// Another stream first, so that stream versions and global
			// positions differ and a backend that mixes them up fails.
			mustAppend(t, ctx, st, "execution-other", eventstore.NoStream, NewEvents("test.other", 3)...)
			pre := NewEvents("test.pre", c.existing)
			if c.existing > 0 {
				mustAppend(t, ctx, st, stream, eventstore.NoStream, pre...)
			}
			before := snapshot(t, ctx, st)
			evs := NewEvents("test.appended", 2)
			res, err := st.Append(ctx, stream, c.expected, evs...)
			if !c.ok {
				requireWrongVersion(t, err, stream, c.expected, c.existing > 0, uint64(c.existing)-1)
				s.requireUnchanged(t, ctx, st, before, "a failed append")
				if c.existing == 0 {
					requireStreamMissing(t, ctx, st, stream)
				}
				// The ids of a rejected append were not stored, so they append
				// fine afterwards and are not taken for a re-append.
				res = mustAppend(t, ctx, st, stream, eventstore.Any, evs...)
				got := readStreamAll(t, ctx, st, stream)
				requireWritten(t, "stream after retrying a rejected append with Any", append(pre, evs...), got)
				return
			}
			if err != nil {
				t.Fatalf("Append(%q, %s) to a stream with %d events: %v", stream, c.expected, c.existing, err)
			}
			got := readStreamAll(t, ctx, st, stream)
			requireWritten(t, "stream after append", append(pre, evs...), got)
			requireStreamShape(t, "stream after append", stream, 0, got)
			last := got[len(got)-1]
			if res.Version != last.Version || res.Position != last.Position {
				t.Fatalf("AppendResult = %+v, want version %d position %d (the last event written)", res, last.Version, last.Position)
			}
		}})
	}
	return tests
}

// appendTests: versions are 0-based and contiguous per stream; positions
// strictly increase in commit order across streams; the store sets Stream,
// Version, Position and Time (non-zero, UTC) whatever the writer put there;
// every field the writer fills round-trips exactly, JSON byte for byte, through
// ReadStream, ReadAll and Subscribe; the store keeps no reference to the
// caller's buffers and hands out none of its own.
func (s suite) appendTests() []subtest {
	return []subtest{
		{name: "VersionsContiguous", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-v"
			var all []domain.Envelope
			var last eventstore.AppendResult
			for i, n := range []int{3, 1, 2, 5} {
				evs := NewEvents("test.v", n)
				expected := eventstore.NoStream
				if i > 0 {
					expected = eventstore.Exact(last.Version)
				}
				res := mustAppend(t, ctx, st, stream, expected, evs...)
				all = append(all, evs...)
				if want := uint64(len(all) - 1); res.Version != want {
					t.Fatalf("append %d: AppendResult.Version = %d, want %d", i, res.Version, want)
				}
				if i > 0 && res.Position <= last.Position {
					t.Fatalf("append %d: AppendResult.Position = %d, not after %d", i, res.Position, last.Position)
				}
				last = res
			}
			got := readStreamAll(t, ctx, st, stream)
			requireWritten(t, "ReadStream", all, got)
			requireStreamShape(t, "ReadStream", stream, 0, got)
			if got[len(got)-1].Position != last.Position {
				t.Fatalf("last event has Position %d, AppendResult said %d", got[len(got)-1].Position, last.Position)
			}
		}},
		{name: "PositionsInCommitOrder", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			streams := []string{"execution-a", "queue-b", "worker-c"}
			var written []domain.Envelope
			var prev eventstore.AppendResult
			for i := range 12 {
				evs := NewEvents("test.order", 1+i%3)
				res := mustAppend(t, ctx, st, streams[i%len(streams)], eventstore.Any, evs...)
				if i > 0 && res.Position <= prev.Position {
					t.Fatalf("append %d landed at position %d, not after the previous append's %d", i, res.Position, prev.Position)
				}
				prev = res
				written = append(written, evs...)
			}
			got := readAll(t, ctx, st)
			requireWritten(t, "ReadAll after sequential appends", written, got)
			s.requireLogShape(t, "ReadAll", got)
			if s.caps.DensePositions && got[0].Position != 0 {
				t.Fatalf("first event of the log has Position %d, want 0 (dense positions)", got[0].Position)
			}
		}},
		{name: "RoundTrip", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-roundtrip"
			bogus := time.Date(2001, 2, 3, 4, 5, 6, 7, time.FixedZone("X", 3600))
			full := NewEvent("execution.scheduled", nil)
			full.SchemaVersion = 7
			full.Owner = domain.OwnerWorker
			full.CorrelationID = "corr-Ünïcødé-1"
			full.CausationID = "cause-2"
			full.Writer = "worker-42"
			// Not canonical JSON on purpose: key order, spaces, escapes and
			// big numbers must survive; a backend must store the bytes.
			full.Data = json.RawMessage(`{"z": 1,  "a":[1, 2.50, 1e3], "s":"\u00e9\n\"q\"", "big": 12345678901234567890}`)
			full.Metadata = json.RawMessage(`{ "trace" : "t-1" }`)
			// Fields the store owns: whatever the writer puts there is ignored.
			full.Stream = "something-else"
			full.Version = 99
			full.Position = 12345
			full.Time = bogus
			minimal := NewEvent("execution.started", json.RawMessage(`{}`))
			minimal.Owner = domain.OwnerAPI
			minimal.SchemaVersion = 0
			written := []domain.Envelope{full, minimal}
			res := mustAppend(t, ctx, st, stream, eventstore.NoStream, written...)

			fromStream := readStreamAll(t, ctx, st, stream)
			requireWritten(t, "ReadStream", written, fromStream)
			requireStreamShape(t, "ReadStream", stream, 0, fromStream)
			for i, e := range fromStream {
				if e.Time.IsZero() {
					t.Fatalf("event %d: Time is zero; the store must set it at commit", i)
				}
				if e.Time.Location() != time.UTC {
					t.Fatalf("event %d: Time %v is in %v, want UTC", i, e.Time, e.Time.Location())
				}
				if e.Time.Equal(bogus) {
					t.Fatalf("event %d: Time is the writer's %v; the store must set its own", i, bogus)
				}
			}
			if last := fromStream[len(fromStream)-1]; res.Position != last.Position || res.Version != last.Version {
				t.Fatalf("AppendResult = %+v, want version %d position %d", res, last.Version, last.Position)
			}
			fromAll := readAll(t, ctx, st)
			requireSameEvents(t, "ReadAll against ReadStream", fromStream, fromAll)
			fromSub := collect(t, ctx, st, 0, eventstore.Filter{}, len(written))
			requireSameEvents(t, "Subscribe against ReadStream", fromStream, fromSub)
		}},
		{name: "NoSharedBuffers", run: func(t *testing.T, st eventstore.Store) {
			ctx := testContext(t)
			const stream = "execution-buffers"
			e := NewEvent("test.buf", json.RawMessage(`{"k":"original"}`))
			e.Metadata = json.RawMessage(`{"m":"original"}`)
			want := e
			want.Data = bytes.Clone(e.Data)
			want.Metadata = bytes.Clone(e.Metadata)
			mustAppend(t, ctx, st, stream, eventstore.NoStream, e)
			// The caller reuses its buffers after Append returns.
			copy(e.Data, `{"k":"CHANGED!"}`)
			copy(e.Metadata, `{"m":"CHANGED!"}`)
			got := readStreamAll(t, ctx, st, stream)
			requireWritten(t, "after the caller changed its buffers", []domain.Envelope{want}, got)
			// A reader scribbles over what it was given.
			copy(got[0].Data, `{"k":"SCRIBBLE"}`)
			copy(got[0].Metadata, `{"m":"SCRIBBLE"}`)
			requireWritten(t, "ReadStream after a reader changed its copy", []domain.Envelope{want}, readStreamAll(t, ctx, st, stream))
			all := readAll(t, ctx, st)
			copy(all[0].Data, `{"k":"SCRIBBLE"}`)
			requireWritten(t, "ReadAll after a reader changed its copy", []domain.Envelope{want}, readAll(t, ctx, st))
		}},
	}
}
