package projections_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// gobBytes encodes v; equal snapshots give equal bytes (their lists are sorted).
func gobBytes(t *testing.T, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSnapshotAtAnyPositionResumesExactly cuts the log at every position,
// saves both folds there, loads them back from the files, folds the rest, and
// checks the result equals one fold of the whole log.
// It runs on a log the executor's single-stream path wrote too, whose
// partial writes (grants without their handoff, void grants, announced
// action changes and children) the snapshot must carry: there the restored
// state is compared with one fold after every later event.
func TestSnapshotAtAnyPositionResumesExactly(t *testing.T) {
	t.Parallel()
	t.Run("atomic", func(t *testing.T) { t.Parallel(); testSnapshotAtAnyPosition(t, viewsLog(t), false) })
	t.Run("single-stream", func(t *testing.T) { t.Parallel(); testSnapshotAtAnyPosition(t, singleStreamLog(t), true) })
}

func testSnapshotAtAnyPosition(t *testing.T, store eventstore.Store, stepwise bool) {
	ctx := context.Background()
	evs := readAll(t, store)

	whole := projections.NewViews()
	if err := whole.Apply(evs); err != nil {
		t.Fatal(err)
	}
	wholeState := projections.NewState()
	wholeAt := make([][]byte, len(evs)+1) // the state's snapshot after each event
	for i := range evs {
		if stepwise {
			wholeAt[i] = gobBytes(t, wholeState.Snapshot())
		}
		if err := wholeState.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := gobBytes(t, wholeState.Snapshot())
	wholeAt[len(evs)] = want
	var partial struct{ unscheduled, announced, children bool }

	files := projections.SnapshotFiles{Dir: t.TempDir()}
	for cut := 0; cut <= len(evs); cut++ {
		lastID := ""
		if cut > 0 {
			lastID = evs[cut-1].ID.String()
		}
		v := projections.NewViews()
		st := projections.NewState()
		if err := v.Apply(evs[:cut]); err != nil {
			t.Fatal(err)
		}
		for i := range evs[:cut] {
			if err := st.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := files.Save("views", uint64(cut), lastID, v.Snapshot()); err != nil {
			t.Fatal(err)
		}
		if err := files.Save("state", uint64(cut), lastID, st.Snapshot()); err != nil {
			t.Fatal(err)
		}

		var vs projections.ViewsSnapshot
		var ss projections.StateSnapshot
		for name, into := range map[string]any{"views": &vs, "state": &ss} {
			ok, err := files.Load(ctx, store, name, into)
			if err != nil || !ok {
				t.Fatalf("cut %d: load %s: %v, %v", cut, name, ok, err)
			}
		}
		partial.unscheduled = partial.unscheduled || len(ss.Unscheduled) > 0
		partial.announced = partial.announced || len(ss.Announced) > 0
		for _, f := range ss.Fanouts {
			partial.children = partial.children || f.Announce != (uuid.UUID{})
		}
		rv, rs := projections.RestoreViews(&vs), projections.RestoreState(&ss)
		if rv.Next() != uint64(cut) || rs.Next != uint64(cut) {
			t.Fatalf("cut %d: restored at %d and %d", cut, rv.Next(), rs.Next)
		}
		if err := rv.Apply(evs); err != nil { // the events before the cut are skipped
			t.Fatal(err)
		}
		for i := range evs {
			if err := rs.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
			if stepwise && i >= cut && !bytes.Equal(gobBytes(t, rs.Snapshot()), wholeAt[i+1]) {
				t.Fatalf("cut %d: the restored state differs from one fold after the event at %d (%s on %s)", cut, i, evs[i].Type, evs[i].Stream)
			}
		}
		if d := projections.Compare(whole, rv, 10); len(d) != 0 {
			t.Errorf("cut %d: restored views differ from one fold: %v", cut, d)
		}
		if got := gobBytes(t, rs.Snapshot()); !bytes.Equal(got, want) {
			t.Errorf("cut %d: restored state differs from one fold", cut)
		}
		if got, want := gobBytes(t, rv.Snapshot()), gobBytes(t, whole.Snapshot()); !bytes.Equal(got, want) {
			t.Errorf("cut %d: restored views' snapshot differs from one fold's", cut)
		}
	}
	if stepwise && (!partial.unscheduled || !partial.announced || !partial.children) {
		t.Errorf("the log's snapshots never held some partial write (unscheduled grant, announced change, announced children): %+v", partial)
	}
}

// singleStreamLog writes a history as the executor's single-stream path
// leaves it: a grant whose handoff follows later, a void grant (of an
// execution cancelled before it), an action change announced on the queue
// stream before its action event, and children announced before they are
// requested.
func singleStreamLog(t *testing.T) eventstore.Store {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	w := logWriter{t: t, store: store}
	w.action("a", 2)
	w.request("e1", "a")
	w.request("e2", "a")
	w.request("e3", "a")
	w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e1"})
	w.request("e4", "a")
	w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
	w.put(domain.ExecutionStream("e1"), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "a", Runner: "core.noop"})
	w.put(domain.ExecutionStream("e2"), domain.OwnerExecutor, "x", domain.ExecutionCancelled{Reason: "client asked"})
	w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: "e2"}) // void
	// Pause a, announced first: the announcement carries the action event.
	paused, err := codec.Events.Encode(uuid.New(), domain.ActionPaused{Reason: "maintenance"}, domain.OwnerAPI, "api")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(paused)
	if err != nil {
		t.Fatal(err)
	}
	w.put(domain.QueueStream("a"), domain.OwnerAPI, "api", domain.QueueActionChanged{ActionVersion: 1, Change: paused.Type, Event: raw})
	w.request("e5", "a")
	w.run("e1", "w1")
	if _, err := store.Append(context.Background(), domain.ActionStream("a"), eventstore.Exact(0), paused); err != nil {
		t.Fatal(err)
	}
	// A fan-out: items 0 and 1 announced, item 0 requested, then item 1.
	w.action("b", 3)
	w.parent("p", "b", 3, 2)
	w.announce("p", 0, 2)
	c0 := w.child("p", "b", 0)
	w.put(domain.QueueStream("b"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: c0})
	c1 := w.child("p", "b", 1)
	w.put(domain.ExecutionStream(c0), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
	w.put(domain.ExecutionStream(c0), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "b", Runner: "core.noop"})
	w.run(c0, "w1")
	w.reject(c1)
	w.put(domain.QueueStream("b"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: c1}) // void
	return store
}

// TestSnapshotOfAnotherLogIsRefused: a snapshot is only used on the log it
// was taken from; otherwise Load says why and the caller folds from 0.
func TestSnapshotOfAnotherLogIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := viewsLog(t)
	evs := readAll(t, store)
	files := projections.SnapshotFiles{Dir: t.TempDir()}

	var none projections.StateSnapshot
	if ok, err := files.Load(ctx, store, "state", &none); ok || err != nil {
		t.Fatalf("no file: got %v, %v; want false, nil", ok, err)
	}

	st := projections.NewState()
	for i := range evs {
		if err := st.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := files.Save("state", uint64(len(evs)), "not-the-event-id", st.Snapshot()); err != nil {
		t.Fatal(err)
	}
	var sn projections.StateSnapshot
	if ok, err := files.Load(ctx, store, "state", &sn); ok || !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Errorf("wrong event id: got %v, %v; want a mismatch", ok, err)
	}

	// A snapshot past the end of the log (the log was reset).
	empty := memstore.New(memstore.Options{})
	defer empty.Close()
	if err := files.Save("state", uint64(len(evs)), evs[len(evs)-1].ID.String(), st.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if ok, err := files.Load(ctx, empty, "state", &sn); ok || !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Errorf("reset log: got %v, %v; want a mismatch", ok, err)
	}

	// A snapshot of another type under the name.
	if err := files.Save("state", 0, "", projections.QueuesSnapshot{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := files.Load(ctx, store, "state", &sn); ok || !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Errorf("other type: got %v, %v; want a mismatch", ok, err)
	}

	// A damaged file: any one byte changed, or the file cut short. (A change
	// inside a count decodes fine: only the checksum catches it.)
	if err := files.Save("state", uint64(len(evs)), evs[len(evs)-1].ID.String(), st.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if ok, err := files.Load(ctx, store, "state", &sn); !ok || err != nil {
		t.Fatalf("intact: got %v, %v", ok, err)
	}
	path := filepath.Join(files.Dir, "state.snapshot")
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []int{0, len(good) / 3, len(good) / 2, len(good) - 5, len(good) - 1} {
		bad := slices.Clone(good)
		bad[at] ^= 0x01
		if err := os.WriteFile(path, bad, 0o644); err != nil {
			t.Fatal(err)
		}
		if ok, err := files.Load(ctx, store, "state", &sn); ok || !errors.Is(err, projections.ErrSnapshotMismatch) {
			t.Errorf("byte %d of %d changed: got %v, %v; want a mismatch", at, len(good), ok, err)
		}
	}
	if err := os.WriteFile(path, good[:len(good)-1], 0o644); err != nil {
		t.Fatal(err)
	}
	if ok, err := files.Load(ctx, store, "state", &sn); ok || !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Errorf("cut short: got %v, %v; want a mismatch", ok, err)
	}
}

// TestStateSnapshotCoversEveryField fails when State or Fanout gains a field
// that its snapshot does not carry: a restored fold would then silently
// differ (domain.TestSnapshotsCoverEveryField checks the aggregates).
func TestStateSnapshotCoversEveryField(t *testing.T) {
	for _, c := range []struct {
		fold, snap any
		extra      int // fields of the fold its snapshot does not store
	}{
		// State's Ended is a callback, not state; live is Executions (the
		// queues keep the waiters that have no other event); Deferred is
		// rebuilt from the executions at restore. StateSnapshot's StatsKept
		// is no field of the fold: it marks a snapshot that keeps the
		// statistics (stats, statsFrom).
		{projections.State{}, projections.StateSnapshot{}, 2 - 1},
		// FanoutSnapshot names its parent, the key of State.Fanouts.
		{projections.Fanout{}, projections.FanoutSnapshot{}, -1},
		{projections.WorkerState{}, projections.WorkerStateSnapshot{}, 0},
	} {
		f, s := reflect.TypeOf(c.fold), reflect.TypeOf(c.snap)
		if f.NumField() != s.NumField()+c.extra {
			t.Errorf("%s has %d fields, %s carries %d (%+d not stored): add the new field to the snapshot",
				f.Name(), f.NumField(), s.Name(), s.NumField(), c.extra)
		}
	}
}
