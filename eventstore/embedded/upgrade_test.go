package embedded

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// testdata/format1 is a log written by the format-1 store (before the
// chain): 300 events of writeMixed, its sealed file, and the events as that
// store read them back (events.jsonl).
const format1Dir = "testdata/format1"

func format1Events(t testing.TB) []domain.Envelope {
	t.Helper()
	f, err := os.Open(filepath.Join(format1Dir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	var out []domain.Envelope
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var e domain.Envelope
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	if len(out) != 300 {
		t.Fatalf("fixture: %d events, want 300", len(out))
	}
	return out
}

// requireUpgraded fails unless got holds the fixture's events, field for
// field, each with the chain hash computed here from the fixture alone.
func requireUpgraded(t testing.TB, want, got []domain.Envelope) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d events, want %d", len(got), len(want))
	}
	var prev domain.Hash
	for i := range want {
		w, g := want[i], got[i]
		prev = eventstore.NextHash(prev, &w)
		if g.Hash != prev {
			t.Fatalf("position %d: hash %s, the fixture's chain gives %s", i, g.Hash, prev)
		}
		if !bytes.Equal(g.Data, w.Data) || !bytes.Equal(g.Metadata, w.Metadata) {
			t.Fatalf("position %d: data or metadata changed:\n got %s %s\nwant %s %s", i, g.Data, g.Metadata, w.Data, w.Metadata)
		}
		g.Data, g.Metadata, g.Hash, w.Data, w.Metadata = nil, nil, domain.Hash{}, nil, nil
		if fmt.Sprint(g) != fmt.Sprint(w) {
			t.Fatalf("position %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

func logVersion(t testing.TB, dir string) uint32 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, logName))
	if err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[12:16])
}

// A format-1 log opens: it is rewritten in format 2 once, every event kept
// as it was and given its chain hash; appends continue the chain; the next
// Open finds format 2 and rewrites nothing.
func TestOpenUpgradesFormat1(t *testing.T) {
	t.Parallel()
	want := format1Events(t)
	dir := copyDir(t, format1Dir, "events.jsonl")
	if v := logVersion(t, dir); v != 1 {
		t.Fatalf("fixture log has format %d", v)
	}
	s := openT(t, dir, Options{NoSync: true})
	requireUpgraded(t, want, readAllT(t, s))
	if v := logVersion(t, dir); v != formatVersion {
		t.Fatalf("after Open the log has format %d", v)
	}
	mustAppend(t, s, "execution-1", eventstore.Any, richEvent(1))
	requireClose(t, s)
	upgraded := dirState(t, dir)[logName]
	s = openT(t, dir, Options{NoSync: true})
	all := readAllT(t, s)
	requireUpgraded(t, want, all[:300])
	requireChain(t, "after the upgrade and an append", all)
	requireClose(t, s)
	if dirState(t, dir)[logName] != upgraded {
		t.Fatal("the second Open rewrote the log")
	}
}

// A kill at any step of the upgrade leaves a directory that opens with the
// same events and hashes: before the temporary file is complete (a partial
// log.tmp beside the format-1 log), after the sealed file is removed but
// before the rename (a complete log.tmp), and after the rename.
func TestUpgradeCrashAtEveryStep(t *testing.T) {
	t.Parallel()
	want := format1Events(t)
	// The finished upgrade's log, for the states after the rename.
	done := copyDir(t, format1Dir, "events.jsonl")
	requireClose(t, openT(t, done, Options{NoSync: true}))
	newLog := dirState(t, done)[logName]
	oldLog := dirState(t, format1Dir)[logName]
	oldSealed := dirState(t, format1Dir)[sealedName]
	for name, files := range map[string]map[string]string{
		"temporary file half written":        {logName: oldLog, sealedName: oldSealed, logName + tmpSuffix: newLog[:len(newLog)/2]},
		"temporary file empty":               {logName: oldLog, sealedName: oldSealed, logName + tmpSuffix: ""},
		"sealed file removed, before rename": {logName: oldLog, logName + tmpSuffix: newLog},
		"after rename":                       {logName: newLog},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			for n, content := range files {
				if err := os.WriteFile(filepath.Join(dir, n), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s := openT(t, dir, Options{NoSync: true})
			requireUpgraded(t, want, readAllT(t, s))
			requireClose(t, s)
		})
	}
}

// The upgrade keeps format 1's recovery rules: a torn last write is cut (the
// events before it stay); a bad record followed by a later write fails Open
// with ErrCorrupt, leaving the format-1 log as it was and no temporary file.
func TestUpgradeKeepsTheRecoveryRules(t *testing.T) {
	t.Parallel()
	want := format1Events(t)
	old := []byte(dirState(t, format1Dir)[logName])
	// The offsets of the format-1 records, from their length fields.
	var offs []int64
	for off := int64(headerSize); off < int64(len(old)); {
		offs = append(offs, off)
		off += prefixSize + int64(binary.LittleEndian.Uint32(old[off:]))
	}
	t.Run("torn last write", func(t *testing.T) {
		t.Parallel()
		dir := copyDir(t, format1Dir, "events.jsonl", sealedName)
		// Half of a copy of the last record, as position 300.
		last := bytes.Clone(old[offs[len(offs)-1]:])
		binary.LittleEndian.PutUint64(last[prefixSize+offPosition:], 300)
		torn := append(bytes.Clone(old), last[:len(last)/2]...)
		if err := os.WriteFile(filepath.Join(dir, logName), torn, 0o644); err != nil {
			t.Fatal(err)
		}
		s := openT(t, dir, Options{NoSync: true})
		requireUpgraded(t, want, readAllT(t, s))
		requireClose(t, s)
	})
	t.Run("damage before a later write", func(t *testing.T) {
		t.Parallel()
		dir := copyDir(t, format1Dir, "events.jsonl")
		bad := flip(old, offs[100]+prefixSize+fixedBodyV1+1)
		if err := os.WriteFile(filepath.Join(dir, logName), bad, 0o644); err != nil {
			t.Fatal(err)
		}
		before := dirState(t, dir)
		s, err := Open(dir, Options{NoSync: true})
		if err == nil {
			_ = s.Close()
		}
		if !errors.Is(err, eventstore.ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte(fmt.Sprintf("offset %d", offs[100]))) {
			t.Fatalf("Open = %v, want ErrCorrupt naming offset %d", err, offs[100])
		}
		after := dirState(t, dir)
		delete(after, lockName) // Open takes the lock before it looks at the log
		delete(before, lockName)
		if fmt.Sprint(after) != fmt.Sprint(before) {
			t.Fatal("a failed upgrade changed the directory")
		}
	})
}

// FuzzParseRecordV1: any bytes either fail to parse as a format-1 record or
// parse to one whose format-2 encoding (with a zero hash) parses back to the
// same fields; nothing panics.
func FuzzParseRecordV1(f *testing.F) {
	old := []byte(dirState(f, format1Dir)[logName])
	first := int64(headerSize)
	n := prefixSize + int64(binary.LittleEndian.Uint32(old[first:]))
	f.Add(old[first : first+n])
	f.Add([]byte{})
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rec
		var scratch []byte
		if _, st := parseRecordV1(b, &r, &scratch); st != recOK {
			return
		}
		if !r.hash.IsZero() {
			t.Fatal("a format-1 record parsed with a hash")
		}
		e := envelopeView(&r)
		v2 := appendRecord(nil, string(r.stream), &e, r.position, r.version, r.micros, r.inWrite, r.flags&flagCommit != 0, &r.hash)
		var back rec
		if _, st := parseRecord(v2, &back); st != recOK {
			t.Fatalf("the format-2 encoding does not parse: %v", st)
		}
		if back.position != r.position || back.version != r.version || string(back.stream) != string(r.stream) ||
			string(back.payload) != string(r.payload) || back.flags != r.flags {
			t.Fatalf("fields changed: %+v → %+v", r, back)
		}
	})
}
