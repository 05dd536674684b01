package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// The embedded log's layout (eventstore/embedded/doc.go, format 2), as much
// as these tests need to damage it the way an editor of the file would.
const (
	logHeaderSize = 16
	recPrefix     = 8
	recPosition   = 0
	recFixedBody  = 100
	recDataLenOff = 52
	recMetaLenOff = 56
)

// logRecords returns the offset of each record of the log file b, and the
// end of the last.
func logRecords(t *testing.T, b []byte) []int {
	t.Helper()
	var offs []int
	off := logHeaderSize
	for off+4 <= len(b) {
		n := int(binary.LittleEndian.Uint32(b[off:]))
		if n == 0 {
			break
		}
		offs = append(offs, off)
		off += recPrefix + n
	}
	return append(offs, off)
}

// fixRecordCRC makes the checksum of the record at off match its bytes.
func fixRecordCRC(b []byte, off int) {
	n := int(binary.LittleEndian.Uint32(b[off:]))
	tab := crc32.MakeTable(crc32.Castagnoli)
	sum := crc32.Update(crc32.Update(0, tab, b[off:off+4]), tab, b[off+recPrefix:off+recPrefix+n])
	binary.LittleEndian.PutUint32(b[off+4:], sum)
}

func runVerify(t *testing.T, args ...string) (int, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(context.Background(), append([]string{"verify"}, args...), &out, &errb)
	return code, out.String() + errb.String()
}

// verifyJSON runs verify --json and decodes its report.
func verifyJSON(t *testing.T, args ...string) (int, verifyReport, string) {
	t.Helper()
	code, out := runVerify(t, append(args, "--json")...)
	var rep verifyReport
	if i := strings.Index(out, "{"); i >= 0 {
		_ = json.NewDecoder(strings.NewReader(out[i:])).Decode(&rep)
	}
	return code, rep, out
}

// copyData copies a data directory (the embedded store's log/ within it).
func copyData(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dst, "log"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join(src, "log"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, "log", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, "log", e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// appendMore appends n events to the embedded store in dir.
func appendMore(t *testing.T, dir string, n int) {
	t.Helper()
	s, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if _, err := s.Append(context.Background(), "test-later", eventstore.Any, storetest.NewEvent("test.later", map[string]int{"i": i})); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCatchesEveryDamage: verify over a real embedded log passes and
// prints the digest; a byte flipped in an event's data (its checksum made
// to match, so only the chain can tell), an event dropped, two events
// reordered (positions rewritten too, so only the chain can tell) or left
// with their positions, and a log truncated, are each caught with exit 1
// and the first position that does not match. A digest taken earlier, a
// prefix of today's log, passes; a wrong one fails at its position.
func TestVerifyCatchesEveryDamage(t *testing.T) {
	t.Parallel()
	base := t.TempDir()
	writeLog(t, base, 5)
	code, rep, out := verifyJSON(t, "--data", base)
	if code != 0 || !rep.OK || rep.Digest == nil || rep.Events < 20 || !rep.KeepsChain {
		t.Fatalf("verify of an intact log: exit %d, %s", code, out)
	}
	earlier := *rep.Digest
	code, text := runVerify(t, "--data", base)
	if code != 0 || !strings.Contains(text, "digest:   "+earlier.String()) || !strings.Contains(text, "result:   OK") {
		t.Fatalf("verify (text): exit %d, %s", code, text)
	}

	// Later: more events. The earlier digest is a prefix of today's log.
	appendMore(t, base, 7)
	code, rep, out = verifyJSON(t, "--data", base, "--digest", earlier.String())
	if code != 0 || rep.Checked != 1 || rep.Digest.Position <= earlier.Position {
		t.Fatalf("an earlier digest of the same log: exit %d, %s", code, out)
	}
	today := *rep.Digest
	wrong := earlier
	wrong.Hash[0] ^= 1
	code, rep, out = verifyJSON(t, "--data", base, "--digest", wrong.String())
	if code != 1 || rep.Mismatch == nil || rep.Mismatch.Position != earlier.Position || rep.Mismatch.Kind != "digest mismatch" {
		t.Fatalf("a wrong digest: exit %d, %s", code, out)
	}

	logFile := func(dir string) string { return filepath.Join(dir, "log", "log") }
	orig, err := os.ReadFile(logFile(base))
	if err != nil {
		t.Fatal(err)
	}
	offs := logRecords(t, orig)
	const p = 10 // the position damaged
	rec := func(b []byte, i int) []byte { return b[offs[i]:offs[i+1]] }
	cases := []struct {
		name   string
		damage func() []byte
		want   string // in the output
		digest string // --digest to give
	}{
		{"a byte of data, checksum fixed", func() []byte {
			b := bytes.Clone(orig)
			r := offs[p]
			n := int(binary.LittleEndian.Uint32(b[r:]))
			b[r+recPrefix+n-2] ^= 0x01 // in the data or metadata, the record's last bytes
			fixRecordCRC(b, r)
			return b
		}, fmt.Sprintf("position %d carries chain hash", p), ""},
		{"an event dropped", func() []byte {
			return append(bytes.Clone(orig[:offs[p]]), orig[offs[p+1]:]...)
		}, fmt.Sprintf("position %d: the record there holds position %d", p, p+1), ""},
		{"two events reordered", func() []byte {
			b := append(bytes.Clone(orig[:offs[p]]), rec(orig, p+1)...)
			b = append(b, rec(orig, p)...)
			return append(b, orig[offs[p+2]:]...)
		}, fmt.Sprintf("position %d: the record there holds position %d", p, p+1), ""},
		{"two events reordered, positions rewritten", func() []byte {
			b := append(bytes.Clone(orig[:offs[p]]), rec(orig, p+1)...)
			b = append(b, rec(orig, p)...)
			b = append(b, orig[offs[p+2]:]...)
			second := offs[p] + len(rec(orig, p+1))
			binary.LittleEndian.PutUint64(b[offs[p]+recPrefix+recPosition:], p)
			binary.LittleEndian.PutUint64(b[second+recPrefix+recPosition:], p+1)
			fixRecordCRC(b, offs[p])
			fixRecordCRC(b, second)
			return b
		}, fmt.Sprintf("position %d carries chain hash", p), ""},
		{"truncated at a record", func() []byte { return bytes.Clone(orig[:offs[len(offs)-4]]) },
			fmt.Sprintf("MISMATCH at position %d: log ends before the digest", today.Position), today.String()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := copyData(t, base)
			if err := os.Remove(filepath.Join(dir, "log", "sealed")); err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			if err := os.WriteFile(logFile(dir), c.damage(), 0o644); err != nil {
				t.Fatal(err)
			}
			args := []string{"--data", dir}
			if c.digest != "" {
				args = append(args, "--digest", c.digest)
			}
			code, out := runVerify(t, args...)
			if code != 1 || !strings.Contains(out, c.want) {
				t.Fatalf("exit %d, want 1 and %q in:\n%s", code, c.want, out)
			}
		})
	}
	t.Run("the sealed file kept", func(t *testing.T) {
		t.Parallel()
		// Recovery checks what the sealed file covers as well.
		dir := copyData(t, base)
		b := bytes.Clone(orig)
		r := offs[p]
		n := int(binary.LittleEndian.Uint32(b[r:]))
		b[r+recPrefix+n-2] ^= 0x01
		fixRecordCRC(b, r)
		if err := os.WriteFile(logFile(dir), b, 0o644); err != nil {
			t.Fatal(err)
		}
		if code, out := runVerify(t, "--data", dir); code != 1 || !strings.Contains(out, fmt.Sprintf("position %d carries chain hash", p)) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
	})
	t.Run("bad usage", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"--data", base, "--digest", "12"}, {"--data", base, "--digest", "x:y"}, {"--data", base, "extra"}} {
			if code, out := runVerify(t, args...); code != 2 {
				t.Errorf("verify %v: exit %d, want 2:\n%s", args, code, out)
			}
		}
	})
}

// The digest a running server publishes (turnstile log status, GET
// /api/v1/log) checks with turnstile verify on a copy of its data
// directory; the same digest with one hex digit changed does not.
func TestClientLogStatusDigestVerifies(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	server := startTestServerIn(t, dir)
	mustCLI(t, server, "actions", "create", "--ref", "log.echo", "--runner", "core.echo")
	mustCLI(t, server, "exec", "request", "log.echo", "--input", `{"x":1}`, "--wait")
	code, out, errOut := cliAs(t, server, readerToken, "log", "status", "--json")
	if code != 0 {
		t.Fatalf("log status: exit %d: %s%s", code, out, errOut)
	}
	st := decode[wire.LogStatus](t, out)
	if st.Head == 0 || st.Digest == nil || st.Digest.Position >= st.Head {
		t.Fatalf("log status: %s", out)
	}
	digest := fmt.Sprintf("%d:%s", st.Digest.Position, st.Digest.Hash)
	if text := mustCLI(t, server, "log", "status"); !field("digest", digest).MatchString(text) {
		t.Fatalf("log status (text) does not show the digest %s:\n%s", digest, text)
	}
	cp := copyData(t, dir) // the server owns dir (its lock): verify a copy
	if code, out := runVerify(t, "--data", cp, "--digest", digest); code != 0 || !strings.Contains(out, "result:   OK") {
		t.Fatalf("verify of the published digest: exit %d\n%s", code, out)
	}
	h := []byte(st.Digest.Hash)
	h[0] = "01"[(h[0]-'0'+1)%2]
	bad := fmt.Sprintf("%d:%s", st.Digest.Position, h)
	if code, out := runVerify(t, "--data", cp, "--digest", bad); code != 1 || !strings.Contains(out, fmt.Sprintf("MISMATCH at position %d: digest mismatch", st.Digest.Position)) {
		t.Fatalf("verify of a changed digest: exit %d\n%s", code, out)
	}
	if code, out := runVerify(t, "--data", dir); code != 3 || !strings.Contains(out, "running server owns the directory") {
		t.Fatalf("verify of a directory a server owns: exit %d\n%s", code, out)
	}
}
