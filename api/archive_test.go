package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/services/node"
)

// TestArchivedExecutionsAnswer: once an ended execution has left the live
// log for the archive (archived, then trimmed), GET answers it from the
// archive with "archived": true; one the read model holds is not marked; an
// unknown id is still 404; as_of reads cross into the archive.
func TestArchivedExecutionsAnswer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	arch := archivetest.Open(t, t.TempDir())
	e, _ := startE2E(t, store, e2eSetup{retain: 1, archive: &archive.History{Archive: arch, Live: store}})

	e.define("arch.echo", "core.echo", 1)
	var ids []string
	for i := range 4 {
		id := e.request("arch.echo", map[string]any{"i": i, "html": "<&>"})
		e.waitStatus(id, domain.StatusCompleted)
		ids = append(ids, id)
	}
	var before wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+ids[0], nil, http.StatusOK, &before)
	head, _ := store.Head(ctx)
	if err := arch.Write(ctx, store, 0, head); err != nil {
		t.Fatal(err)
	}
	var keep []string // every stream but the executions' (all ended)
	for _, s := range []string{"action-arch.echo", "queue-arch.echo", "worker-local-1", "worker-local-2"} {
		if _, err := store.ReadStream(ctx, s, 0, 1); err == nil {
			keep = append(keep, s)
		}
	}
	if err := store.Trim(ctx, head, keep); err != nil {
		t.Fatal(err)
	}

	var got wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+ids[0], nil, http.StatusOK, &got)
	if !got.Archived || got.Status != "completed" || string(got.Result) != string(before.Result) || got.Position != before.Position || got.Version != before.Version {
		t.Fatalf("an archived execution: %+v\nbefore the archive: %+v", got, before)
	}
	var held wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+ids[3], nil, http.StatusOK, &held)
	if held.Archived || held.Status != "completed" {
		t.Fatalf("an execution the read model holds: %+v", held)
	}
	if code, _, _ := e.do("GET", "/api/v1/executions/no-such-execution", nil); code != http.StatusNotFound {
		t.Fatalf("an unknown execution: %d, want 404", code)
	}
	var then wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+ids[0]+"?as_of="+strconv.FormatUint(before.Position-1, 10), nil, http.StatusOK, &then)
	if then.ID != ids[0] || then.Status != "running" || then.Version != before.Version-1 {
		t.Fatalf("as_of across the archive: %+v", then)
	}
	// The audit reads archive + live log: the whole history.
	var verdict wire.AuditVerdict
	e.mustJSON("GET", "/api/v1/audit", nil, http.StatusOK, &verdict)
	if !verdict.OK || verdict.From != nil || verdict.Ended < len(ids) {
		t.Fatalf("GET /api/v1/audit with an archive: %+v", verdict)
	}
	// The live log goes on after the trim.
	id := e.request("arch.echo", map[string]any{"i": 4})
	e.waitStatus(id, domain.StatusCompleted)
	var fresh wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+id, nil, http.StatusOK, &fresh)
	if fresh.Archived {
		t.Fatalf("a live execution marked archived: %+v", fresh)
	}
}

// TestAsOfBeforeTheLiveLogIsGone: without an archive, a read as of a
// position the live log no longer holds is 410 naming where it starts.
func TestAsOfBeforeTheLiveLogIsGone(t *testing.T) {
	t.Parallel()
	e := newE2E(t)
	e.define("gone.echo", "core.echo", 1)
	id := e.request("gone.echo", map[string]any{"i": 1})
	e.waitStatus(id, domain.StatusCompleted)
	ctx := context.Background()
	store := e.store.(*memstore.Store)
	head, _ := store.Head(ctx)
	if err := store.Trim(ctx, head, []string{"action-gone.echo", "queue-gone.echo", "worker-local-1", "worker-local-2"}); err != nil {
		t.Fatal(err)
	}
	code, _, body := e.do("GET", "/api/v1/queue-stats?as_of=3", nil)
	var p wire.Problem
	if err := json.Unmarshal(body, &p); err != nil || code != http.StatusGone || p.Type != "https://turnstile.dev/problems/archived" ||
		!strings.Contains(p.Detail, fmt.Sprintf("the live log starts at %d", head)) {
		t.Fatalf("as_of before the live log: %d %s", code, body)
	}
}

// TestIdempotencyKeyAcrossTheArchive: a retry with an idempotency key whose
// execution has left the live log for the archive is a retry still (202,
// Idempotent-Replayed, the same id, nothing written), with another body it
// is 409, and the history stays clean: before the fix the execution ran a
// second time, as a second life of an ended stream the audit refuses.
func TestIdempotencyKeyAcrossTheArchive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	arch := archivetest.Open(t, t.TempDir())
	e, _ := startE2E(t, store, e2eSetup{retain: 1, archive: &archive.History{Archive: arch, Live: store}})
	e.define("key.echo", "core.echo", 1)
	body := map[string]any{"action": "key.echo", "input": map[string]any{"order": 42}}
	var first wire.Execution
	e.mustJSON("POST", "/api/v1/executions", body, http.StatusAccepted, &first, "Idempotency-Key", "order-42")
	e.waitStatus(first.ID, domain.StatusCompleted)
	for i := range 2 { // the read model (retaining 1) forgets the keyed one
		e.waitStatus(e.request("key.echo", map[string]any{"i": i}), domain.StatusCompleted)
	}
	head, _ := store.Head(ctx)
	if err := arch.Write(ctx, store, 0, head); err != nil {
		t.Fatal(err)
	}
	if err := store.Trim(ctx, head, []string{"action-key.echo", "queue-key.echo", "worker-local-1", "worker-local-2"}); err != nil {
		t.Fatal(err)
	}

	code, h, b := e.do("POST", "/api/v1/executions", body, "Idempotency-Key", "order-42")
	var again wire.Execution
	if err := json.Unmarshal(b, &again); err != nil || code != http.StatusAccepted || again.ID != first.ID || again.Status != "completed" || h.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the retry after the archive: %d %q %s", code, h.Get("Idempotent-Replayed"), b)
	}
	other := map[string]any{"action": "key.echo", "input": map[string]any{"order": 43}}
	if code, _, b := e.do("POST", "/api/v1/executions", other, "Idempotency-Key", "order-42"); code != http.StatusConflict {
		t.Fatalf("the key with another body after the archive: %d %s, want 409", code, b)
	}
	if after, _ := store.Head(ctx); after != head {
		t.Fatalf("the retries wrote %d events", after-head)
	}
	var got wire.Execution
	e.mustJSON("GET", "/api/v1/executions/"+first.ID, nil, http.StatusOK, &got)
	if !got.Archived || got.Status != "completed" {
		t.Fatalf("the keyed execution: %+v", got)
	}
	fresh := e.request("key.echo", map[string]any{"i": 9}) // (a new key still creates: see below)
	var created wire.Execution
	e.mustJSON("POST", "/api/v1/executions", map[string]any{"action": "key.echo", "input": map[string]any{"order": 44}}, http.StatusAccepted, &created, "Idempotency-Key", "order-44")
	e.waitStatus(fresh, domain.StatusCompleted)
	e.waitStatus(created.ID, domain.StatusCompleted)
	var verdict wire.AuditVerdict
	e.mustJSON("GET", "/api/v1/audit", nil, http.StatusOK, &verdict)
	if !verdict.OK {
		t.Fatalf("the audit of archive + live log: %+v", verdict)
	}
}

// TestATamperedArchiveIsNotServed: one input changed inside an archived
// segment (the segment rewritten as an editor would, its index kept):
// GET of the execution refuses the segment (500, …/problems/log-corrupt)
// and never shows the changed input; GET /api/v1/audit reports rule chain
// at the changed event's position.
func TestATamperedArchiveIsNotServed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	dir := t.TempDir()
	reader := archivetest.Open(t, dir) // the server's: it sees the segment after the tampering
	var logs syncBuffer
	e, _ := startE2E(t, store, e2eSetup{retain: 1, archive: &archive.History{Archive: reader, Live: store},
		node: node.Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))}})
	e.define("arch.echo", "core.echo", 1)
	var ids []string
	for i := range 3 {
		id := e.request("arch.echo", map[string]any{"secret": fmt.Sprintf("value-%d", i)})
		e.waitStatus(id, domain.StatusCompleted)
		ids = append(ids, id)
	}
	head, _ := store.Head(ctx)
	archivetest.Move(t, archivetest.Write(t, store, dir, 0, 0, 0), store, head, []string{"action-arch.echo", "queue-arch.echo", "worker-local-1", "worker-local-2"})
	if err := reader.Refresh(); err != nil || len(reader.Segments()) != 1 {
		t.Fatalf("the archive: %v %v", reader.Segments(), err)
	}
	seg := filepath.Join(dir, reader.Segments()[0].Name)
	lines := archivetest.SegmentLines(t, seg)
	changed := -1
	for i, l := range lines {
		if strings.Contains(l, `"value-0"`) && strings.Contains(l, `"execution.requested"`) {
			lines[i], changed = strings.Replace(l, `"value-0"`, `"FORGED-0"`, 1), i
		}
	}
	if changed < 0 {
		t.Fatal("no execution.requested line with the input")
	}
	archivetest.WriteSegment(t, seg, lines)

	code, _, body := e.do("GET", "/api/v1/executions/"+ids[0], nil)
	var p wire.Problem
	if err := json.Unmarshal(body, &p); err != nil || code != http.StatusInternalServerError || p.Type != "https://turnstile.dev/problems/log-corrupt" ||
		strings.Contains(string(body), "FORGED") || !strings.Contains(p.Detail, reader.Segments()[0].Name) {
		t.Fatalf("GET an execution of the tampered segment: %d %s", code, body)
	}
	if code, _, body := e.do("GET", "/api/v1/executions/"+ids[0]+"?as_of=1", nil); code != http.StatusInternalServerError || strings.Contains(string(body), "FORGED") {
		t.Fatalf("GET as_of in the tampered segment: %d %s", code, body)
	}
	if l := logs.String(); !strings.Contains(l, "level=ERROR") || !strings.Contains(l, "does not verify") || !strings.Contains(l, reader.Segments()[0].Name) {
		t.Fatalf("the server's log says nothing of the segment that does not verify:\n%s", l)
	}
	var verdict wire.AuditVerdict
	e.mustJSON("GET", "/api/v1/audit", nil, http.StatusOK, &verdict)
	if verdict.OK || len(verdict.Violations) != 1 || verdict.Violations[0].Rule != "chain" || verdict.Violations[0].Position != uint64(changed) {
		t.Fatalf("GET /api/v1/audit of the tampered archive: %+v, want one chain violation at %d", verdict, changed)
	}
}
