package projections_test

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"testing"

	"github.com/turnstile/turnstile/domain"
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
func TestSnapshotAtAnyPositionResumesExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := viewsLog(t)
	evs := readAll(t, store)

	whole := projections.NewViews()
	if err := whole.Apply(evs); err != nil {
		t.Fatal(err)
	}
	wholeState := projections.NewState()
	for i := range evs {
		if err := wholeState.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	want := gobBytes(t, wholeState.Snapshot())

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
	if err := files.Save("state", 0, "", domain.QueuesSnapshot{}); err != nil {
		t.Fatal(err)
	}
	if ok, err := files.Load(ctx, store, "state", &sn); ok || !errors.Is(err, projections.ErrSnapshotMismatch) {
		t.Errorf("other type: got %v, %v; want a mismatch", ok, err)
	}
}
