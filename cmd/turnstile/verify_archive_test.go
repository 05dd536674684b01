package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/embedded"
)

// archiveLog archives positions [0, head-keep) of the embedded log in
// dir/log into dir/archive, in segments of size events.
func archiveLog(t *testing.T, dir string, keep uint64, size int) *archive.Archive {
	t.Helper()
	store, err := embedded.Open(filepath.Join(dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	head, _ := store.Head(context.Background())
	return archivetest.Write(t, store, filepath.Join(dir, "archive"), size, 0, head-keep)
}

func TestVerifyWithArchive(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, 8)
	a := archiveLog(t, dir, 5, 15)
	ctx := context.Background()
	arch := filepath.Join(dir, "archive")
	code, out, errs := runInProcess("verify", "--data", dir, "--archive", arch)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("archive:  %d events in %d segments", a.End(), len(a.Segments()))) || !strings.Contains(out, "continues the archive") {
		t.Fatalf("verify --archive: exit %d\n%s%s", code, out, errs)
	}
	// A digest in the archive is checked against it.
	h, err := a.PrevHash(ctx, 8)
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runInProcess("verify", "--data", dir, "--archive", arch, "--digest", fmt.Sprintf("7:%s", h), "--json"); code != 0 {
		t.Fatalf("a digest in the archive: exit %d\n%s%s", code, out, errs)
	} else {
		var rep verifyReport
		if err := json.Unmarshal([]byte(out), &rep); err != nil || !rep.OK || rep.Archive == nil || rep.Archive.Digests != 1 {
			t.Fatalf("report: %v %s", err, out)
		}
	}
	wrong := h
	wrong[0] ^= 1
	if code, out, _ := runInProcess("verify", "--data", dir, "--archive", arch, "--digest", fmt.Sprintf("7:%s", wrong)); code != 1 || !strings.Contains(out, "MISMATCH at position 7: digest mismatch") {
		t.Fatalf("a wrong digest in the archive: exit %d\n%s", code, out)
	}
	// The live log is not trimmed here, so it holds position 7 too and
	// agrees with the archive.
	if code, out, errs := runInProcess("verify", "--data", dir, "--digest", fmt.Sprintf("7:%s", h)); code != 0 {
		t.Fatalf("the same digest over the live log: exit %d\n%s%s", code, out, errs)
	}
	// Two events swapped in the second segment: named.
	seg := filepath.Join(arch, a.Segments()[1].Name)
	lines := archivetest.SegmentLines(t, seg)
	lines[3], lines[4] = lines[4], lines[3]
	archivetest.WriteSegment(t, seg, lines)
	if code, out, _ := runInProcess("verify", "--data", dir, "--archive", arch); code != 1 || !strings.Contains(out, "MISMATCH at position 18: archive does not verify") {
		t.Fatalf("verify of a tampered archive: exit %d\n%s", code, out)
	}
	// An archive of another log does not join this one.
	other := t.TempDir()
	writeLog(t, other, 8)
	archiveLog(t, other, 5, 15)
	if code, out, _ := runInProcess("verify", "--data", dir, "--archive", filepath.Join(other, "archive")); code != 1 || !strings.Contains(out, "the live log does not continue the archive") {
		t.Fatalf("verify with another log's archive: exit %d\n%s", code, out)
	}
	if code, _, errs := runInProcess("verify", "--data", dir, "--archive", filepath.Join(dir, "nope")); code != 2 {
		t.Fatalf("verify --archive of no directory: exit %d %s", code, errs)
	}
}

// serve --archive DIR reads the archive: GET /api/v1/log counts its
// segments; an archive that is not consistent stops the start.
func TestServeWithArchive(t *testing.T) {
	bin := turnstileBinary(t)
	dir := t.TempDir()
	writeLog(t, dir, 4)
	a := archiveLog(t, dir, 3, 10)
	ctx := context.Background()
	p := startServe(t, bin, dir, "--archive", filepath.Join(dir, "archive"))
	var st struct {
		Head             uint64 `json:"head"`
		ArchivedSegments int    `json:"archived_segments"`
	}
	if code, err := call(ctx, "GET", p.url+"/api/v1/log", nil, nil, &st); err != nil || code != 200 || st.ArchivedSegments != len(a.Segments()) || st.ArchivedSegments < 2 {
		t.Fatalf("GET /api/v1/log: %d %v %+v, want %d segments", code, err, st, len(a.Segments()))
	}
	p.stop(t)
	// An index without its segment: serve refuses to start.
	if err := os.Remove(filepath.Join(dir, "archive", a.Segments()[0].Name)); err != nil {
		t.Fatal(err)
	}
	q := startServeWith(t, bin, serveOpts{args: []string{"--data", dir, "--archive", filepath.Join(dir, "archive")}, mayDie: true})
	<-q.done
	if q.state.ExitCode() == 0 || !strings.Contains(q.logs.String(), "has an index but no segment file") {
		t.Fatalf("serve on a broken archive: exit %d\n%s", q.state.ExitCode(), q.logs.String())
	}
}

// One input changed inside an archived segment (the segment rewritten as an
// editor would, its index kept): audit --archive reports rule chain at
// that position, verify names it, and replay serves nothing of the
// segment, so the changed input is never shown.
func TestAuditWithATamperedArchive(t *testing.T) {
	dir := t.TempDir()
	writeLog(t, dir, 8)
	a := archiveLog(t, dir, 5, 15)
	data, arch := dir, filepath.Join(dir, "archive")
	s := a.Segments()[1]
	seg := filepath.Join(arch, s.Name)
	lines := archivetest.SegmentLines(t, seg)
	at := -1
	for i, l := range lines {
		if m := requestedInput.FindStringIndex(l); m != nil && strings.Contains(l, `"execution.requested"`) {
			lines[i], at = l[:m[0]]+`"input":{"i":99}`+l[m[1]:], i
			break
		}
	}
	if at < 0 {
		t.Fatalf("no execution.requested in %s", s.Name)
	}
	archivetest.WriteSegment(t, seg, lines)
	pos := s.First + uint64(at)

	code, out, errs := runInProcess("audit", "--data", data, "--archive", arch, "--json")
	var rep struct {
		Violations []struct {
			Position uint64
			Rule     string
		}
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 1 || len(rep.Violations) != 1 || rep.Violations[0].Rule != "chain" || rep.Violations[0].Position != pos {
		t.Fatalf("audit --archive of a tampered archive: exit %d, want 1 and one chain violation at %d\n%s%s", code, pos, out, errs)
	}
	if code, out, _ := runInProcess("audit", "--data", data, "--archive", arch); code != 1 || !strings.Contains(out, fmt.Sprintf("position %d ", pos)) || !strings.Contains(out, "[chain]") {
		t.Fatalf("audit --archive, text: exit %d\n%s", code, out)
	}
	if code, out, _ := runInProcess("verify", "--data", data, "--archive", arch); code != 1 || !strings.Contains(out, fmt.Sprintf("MISMATCH at position %d", pos)) {
		t.Fatalf("verify --archive: exit %d\n%s", code, out)
	}
	if code, out, errs := runInProcess("replay", "--data", data, "--archive", arch, "--json"); code == 0 || strings.Contains(out, `"i":99`) || !strings.Contains(errs, "does not verify") {
		t.Fatalf("replay --archive of a tampered archive: exit %d, want a failure naming the segment\n%s%s", code, out, errs)
	}
}

var requestedInput = regexp.MustCompile(`"input":\{"i":\d+\}`)
