package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/archive/archivetest"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/node"
)

// TestAsOfAfterTheLiveLogsStart: on a live log the archiver trimmed behind
// its checkpoints, a server without --archive answers as_of reads at
// positions and times from the live log's start on (and at start-1: the
// state of the checkpoint the archiver trimmed at) from the newest
// checkpoint at or before them, over real HTTP: every action's
// queue_stats and queue, and each execution's state (also of executions
// live at the checkpoint, whose streams began before it), exactly as a
// fold of archive + live log from position 0 gives them; as_of before the
// live log's start and its first checkpoint is still 410. GET
// /api/v1/audit audits the live log alone from its checkpoint, saying so.
func TestAsOfAfterTheLiveLogsStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := memstore.New(memstore.Options{})
	arch := archivetest.Open(t, t.TempDir())
	e, n := startE2E(t, store, e2eSetup{node: node.Config{Workers: 2, Slots: 2, CheckpointEvery: 50 * time.Millisecond,
		Archive: arch, ArchiveAfter: 200 * time.Millisecond, ArchiveEvery: 20 * time.Millisecond, StopGrace: time.Second}})
	e.define("ck.sleep", "core.sleep", 1) // one at a time: executions wait across checkpoints
	e.define("ck.echo", "core.echo", 2)
	var ids []string
	deadline := time.Now().Add(60 * time.Second) // a failure guard, not a timing assertion
	for n.Archiver.Rounds.Load() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d trims", n.Archiver.Rounds.Load())
		}
		ids = append(ids, e.request("ck.sleep", map[string]any{"seconds": 0.05}), e.request("ck.echo", map[string]any{"i": len(ids)}))
		time.Sleep(15 * time.Millisecond)
	}
	for _, id := range ids {
		e.waitStatus(id, domain.StatusCompleted)
	}
	n.Stop() // (the log stops growing; the server still reads it)
	first, _, err := store.Start(ctx)
	if err != nil || first == 0 {
		t.Fatalf("the live log starts at %d: %v", first, err)
	}
	head, _ := store.Head(ctx)
	whole := archive.History{Archive: arch, Live: store}
	if _, err := whole.Continues(ctx); err != nil {
		t.Fatal(err)
	}

	live := 0 // executions live at a checkpoint the API starts from, with events after it
	for _, at := range []uint64{first - 1, first, first + 1, first + (head-first)/3, first + (head-first)/2, head - 1} {
		asOf := fmt.Sprint(at)
		var got wire.QueueStatsList
		e.mustJSON("GET", "/api/v1/queue-stats?as_of="+asOf, nil, http.StatusOK, &got)
		want, err := projections.ViewsAsOf(ctx, whole, projections.Cut{Position: at})
		if err != nil {
			t.Fatal(err)
		}
		if g, w := statsJSON(t, got.QueueStats), statsJSON(t, want.AllStats()); !bytes.Equal(g, w) || got.Position != want.Next() {
			t.Fatalf("queue-stats as of %d (position %d)\n%s\nfrom archive + live log (position %d)\n%s", at, got.Position, g, want.Next(), w)
		}
		var queue wire.Queue
		e.mustJSON("GET", "/api/v1/actions/ck.sleep/queue?as_of="+asOf, nil, http.StatusOK, &queue)
		wantQueue, _ := want.Queue("ck.sleep")
		var wq wire.Queue
		if err := json.Unmarshal(jsonBytes(t, wantQueue), &wq); err != nil {
			t.Fatal(err)
		}
		if g, w := jsonBytes(t, queue), jsonBytes(t, wq); !bytes.Equal(g, w) {
			t.Fatalf("queue as of %d\n%s\nfrom archive + live log\n%s", at, g, w)
		}
		for _, id := range ids {
			wantX, found, err := projections.ExecutionAsOf(ctx, whole, id, projections.Cut{Position: at})
			if err != nil {
				t.Fatal(err)
			}
			code, _, body := e.do("GET", "/api/v1/executions/"+id+"?as_of="+asOf, nil)
			inLive := streamStartsLive(t, store, id)
			switch {
			case !found && code == http.StatusNotFound:
			case !inLive && code == http.StatusNotFound && wantX.Status.Terminal():
				// ended before the live log's start: only the archive knows it
			case code == http.StatusOK && found:
				var gotX projections.ExecutionView
				if err := json.Unmarshal(body, &gotX); err != nil {
					t.Fatal(err)
				}
				if g, w := jsonBytes(t, gotX.ExecutionState), jsonBytes(t, wantX.ExecutionState); !bytes.Equal(g, w) {
					t.Fatalf("execution %s as of %d\n%s\nfrom archive + live log\n%s", id, at, g, w)
				}
				if !inLive { // begun before the live log: from the checkpoint's state
					live++
				}
			default:
				t.Fatalf("execution %s as of %d: %d %s; archive + live log: found %v %+v", id, at, code, body, found, wantX)
			}
		}
	}
	// The audit of the live log alone, from its checkpoint.
	var verdict wire.AuditVerdict
	e.mustJSON("GET", "/api/v1/audit", nil, http.StatusOK, &verdict)
	if !verdict.OK || verdict.From == nil || verdict.From.Checkpoint < first || verdict.From.LiveStart != first || len(verdict.From.NotJudged) == 0 {
		t.Fatalf("GET /api/v1/audit on the trimmed live log: %+v %+v", verdict, verdict.From)
	}
	if live == 0 {
		t.Fatal("no execution was live at a checkpoint with its stream begun before the live log: the test proves nothing about them")
	}
	// By time: the log time of the event at the live log's start.
	evs, err := store.ReadAll(ctx, first, 1)
	if err != nil {
		t.Fatal(err)
	}
	at := evs[0].Time.Format(time.RFC3339Nano)
	var got wire.QueueStatsList
	e.mustJSON("GET", "/api/v1/queue-stats?as_of="+url.QueryEscape(at), nil, http.StatusOK, &got)
	want, err := projections.ViewsAsOf(ctx, whole, projections.Cut{Time: evs[0].Time, ByTime: true})
	if err != nil {
		t.Fatal(err)
	}
	if g, w := statsJSON(t, got.QueueStats), statsJSON(t, want.AllStats()); !bytes.Equal(g, w) {
		t.Fatalf("queue-stats as of %s\n%s\nfrom archive + live log\n%s", at, g, w)
	}
	// Before the live log's start and its first checkpoint (at the start:
	// as of first-1 is that checkpoint's state): 410, by position and by time.
	for _, path := range []string{"/api/v1/queue-stats?as_of=" + fmt.Sprint(first-2), "/api/v1/executions/" + ids[0] + "?as_of=" + fmt.Sprint(first-2),
		"/api/v1/queue-stats?as_of=" + url.QueryEscape(evs[0].Time.Add(-time.Hour).Format(time.RFC3339Nano))} {
		code, _, body := e.do("GET", path, nil)
		var p wire.Problem
		if err := json.Unmarshal(body, &p); err != nil || code != http.StatusGone || p.Type != "https://turnstile.dev/problems/archived" ||
			!strings.Contains(p.Detail, fmt.Sprintf("the live log starts at %d", first)) {
			t.Fatalf("%s: %d %s", path, code, body)
		}
	}
}

// statsJSON is the JSON of queue statistics, in the fields both the API's
// and the read model's have.
func statsJSON[T any](t *testing.T, stats []T) []byte {
	t.Helper()
	var common []projections.QueueStats
	if err := json.Unmarshal(jsonBytes(t, stats), &common); err != nil {
		t.Fatal(err)
	}
	return jsonBytes(t, common)
}

func jsonBytes(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// streamStartsLive reports whether execution id's stream begins in the live
// log (its version 0 was not trimmed).
func streamStartsLive(t *testing.T, store *memstore.Store, id string) bool {
	t.Helper()
	evs, err := store.ReadStream(context.Background(), domain.ExecutionStream(id), 0, 1)
	return err == nil && len(evs) > 0 && evs[0].Version == 0
}
