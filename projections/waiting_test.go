package projections_test

import (
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// waitersLog is a log of many waiters with inputs, children and keys, some
// of which get other events while they wait (a cancellation request, a
// grant, a cancellation, a rejection), with enough grants from one queue's
// head for the queue to compact its slots.
func waitersLog(t *testing.T, seed uint64) eventstore.Store {
	t.Helper()
	store := memstore.New(memstore.Options{})
	t.Cleanup(func() { _ = store.Close() })
	w := logWriter{t: t, store: store}
	r := rand.New(rand.NewPCG(seed, 7))
	w.action("a", 3000)
	keyed := domain.Policy{Ref: "k", Runner: "core.noop", MaxConcurrent: 2, ConcurrencyKey: "tenant"}.WithDefaults()
	w.put(domain.ActionStream("k"), domain.OwnerAPI, "", domain.ActionDefined{Policy: keyed})
	w.action("b", 5)
	w.parent("p", "b", 4, 4)
	w.announce("p", 0, 2)
	w.child("p", "b", 0)
	w.child("p", "b", 1)
	var waiting []string
	for i := range 1800 {
		id := "w" + strconv.Itoa(i)
		ref, in := "a", json.RawMessage(nil)
		switch r.IntN(4) {
		case 0:
			in = json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)
		case 1:
			ref, in = "k", json.RawMessage(`{"tenant":"t`+strconv.Itoa(r.IntN(3))+`"}`)
		}
		w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionRequested{Action: ref, Input: in})
		if ref == "a" {
			waiting = append(waiting, id)
		}
		switch r.IntN(40) {
		case 0:
			w.put(domain.ExecutionStream(id), domain.OwnerAPI, "api", domain.ExecutionCancelRequested{Reason: "asked"})
		case 1:
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionCancelled{Reason: "timed out in the queue", Code: domain.CancelQueueTimeout})
		case 2:
			w.reject(id)
		}
	}
	// Grant most of a's waiters from the head, in order (a granted one
	// that had ended is a void grant), and run some of them.
	for i, id := range waiting[:1200] {
		w.put(domain.QueueStream("a"), domain.OwnerExecutor, "x", domain.QueueGranted{Execution: id})
		if i%3 != 0 {
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduling{})
			w.put(domain.ExecutionStream(id), domain.OwnerExecutor, "x", domain.ExecutionScheduled{Worker: "w1", Attempt: 1, Action: "a", Runner: "core.noop"})
		}
		if i%7 == 1 {
			w.run(id, "w1")
		}
	}
	return store
}

// streamFolds folds each execution stream of evs on its own, the way the
// whole fold keeps executions live (from their request to their end), and
// calls check after each event with the executions live then.
func streamFolds(evs []domain.Envelope, check func(i int, live map[string]*domain.Execution)) error {
	live := map[string]*domain.Execution{}
	for i := range evs {
		env := &evs[i]
		if cat, id := domain.SplitStream(env.Stream); cat == domain.StreamExecution {
			ev, err := codec.Events.Decode(env)
			if err != nil {
				return err
			}
			x := live[id]
			if _, req := ev.(domain.ExecutionRequested); x == nil && req {
				x = domain.NewExecution(id)
				live[id] = x
			}
			if x != nil {
				x.Apply(ev, env.Version, env.Time)
				if x.Status().Terminal() {
					delete(live, id)
				}
			}
		}
		check(i, live)
	}
	return nil
}

// TestStateKeepsEveryExecutionExactly checks, after every event of several
// logs, that the fold's executions (State.Execution, whether the fold keeps
// the aggregate or only the waiter's queue slot) are exactly each execution
// stream folded on its own, that LiveIDs and IsLive name exactly the live
// ones, and that the read model shows each live one as that fold does.
func TestStateKeepsEveryExecutionExactly(t *testing.T) {
	t.Parallel()
	logs := map[string]eventstore.Store{"views": viewsLog(t), "single-stream": singleStreamLog(t), "waiters": waitersLog(t, 1)}
	for name, store := range logs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			evs := readAll(t, store)
			st, v := projections.NewState(), projections.NewViews()
			every := max(1, len(evs)/30) // every execution, LiveIDs and the read model at about 30 positions
			err := streamFolds(evs, func(i int, live map[string]*domain.Execution) {
				if err := st.Apply(&evs[i]); err != nil {
					t.Fatal(err)
				}
				same := func(xid string, want *domain.Execution) {
					got := st.Execution(xid)
					if got == nil || !reflect.DeepEqual(got.Snapshot(), want.Snapshot()) {
						t.Fatalf("after event %d: execution %s is\n%+v\nits stream says\n%+v", i, xid, snapOf(got), want.Snapshot())
					}
				}
				// The execution the event is about, after each event; all of
				// them at about 30 positions.
				id := ""
				switch cat, xid := domain.SplitStream(evs[i].Stream); cat {
				case domain.StreamExecution:
					id = xid
				case domain.StreamQueue:
					if ev, err := codec.Events.Decode(&evs[i]); err == nil {
						if g, ok := ev.(domain.QueueGranted); ok {
							id = g.Execution
						}
					}
				}
				if id != "" {
					if x := live[id]; x != nil {
						same(id, x)
					} else if st.IsLive(id) || st.Execution(id) != nil {
						t.Fatalf("after event %d: ended execution %s is live", i, id)
					}
				}
				if i%every != 0 && i != len(evs)-1 {
					return
				}
				for xid, x := range live {
					same(xid, x)
				}
				ids := st.LiveIDs()
				want := slices.Sorted(func(yield func(string) bool) {
					for id := range live {
						if !yield(id) {
							return
						}
					}
				})
				if !slices.Equal(ids, want) {
					t.Fatalf("after event %d: live %v, the streams say %v", i, ids, want)
				}
				if err := v.Apply(evs[:i+1]); err != nil {
					t.Fatal(err)
				}
				for _, id := range ids {
					got, ok := v.View(id)
					if !ok || !reflect.DeepEqual(got.ExecutionState, live[id].State()) {
						t.Fatalf("after event %d: the read model shows %s as %+v, its stream says %+v", i, id, got.ExecutionState, live[id].State())
					}
				}
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}

func snapOf(x *domain.Execution) any {
	if x == nil {
		return nil
	}
	return x.Snapshot()
}

// TestSnapshotOfManyWaitersResumesExactly is TestSnapshotAtAnyPosition on
// the waiters' log, cut at a dozen positions.
func TestSnapshotOfManyWaitersResumesExactly(t *testing.T) {
	t.Parallel()
	store := waitersLog(t, 2)
	evs := readAll(t, store)
	whole := projections.NewState()
	wholeViews := projections.NewViews()
	for i := range evs {
		if err := whole.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := wholeViews.Apply(evs); err != nil {
		t.Fatal(err)
	}
	want := gobBytes(t, whole.Snapshot())
	files := projections.SnapshotFiles{Dir: t.TempDir()}
	for cut := 0; cut <= len(evs); cut += 1 + len(evs)/12 {
		st, v := projections.NewState(), projections.NewViews()
		for i := range evs[:cut] {
			if err := st.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := v.Apply(evs[:cut]); err != nil {
			t.Fatal(err)
		}
		lastID := ""
		if cut > 0 {
			lastID = evs[cut-1].ID.String()
		}
		if err := files.Save("state", uint64(cut), lastID, st.Snapshot()); err != nil {
			t.Fatal(err)
		}
		if err := files.Save("views", uint64(cut), lastID, v.Snapshot()); err != nil {
			t.Fatal(err)
		}
		var ss projections.StateSnapshot
		var vs projections.ViewsSnapshot
		if _, _, err := files.Read("state", &ss); err != nil {
			t.Fatal(err)
		}
		if _, _, err := files.Read("views", &vs); err != nil {
			t.Fatal(err)
		}
		rs, rv := projections.RestoreState(&ss), projections.RestoreViews(&vs)
		for i := range evs {
			if err := rs.Apply(&evs[i]); err != nil {
				t.Fatal(err)
			}
		}
		if err := rv.Apply(evs); err != nil {
			t.Fatal(err)
		}
		if got := gobBytes(t, rs.Snapshot()); !slices.Equal(got, want) {
			t.Fatalf("cut %d: the restored state differs from one fold", cut)
		}
		if d := projections.Compare(wholeViews, rv, 10); len(d) != 0 {
			t.Fatalf("cut %d: the restored read model differs from one fold: %v", cut, d)
		}
	}
}

// TestExecutionRecordsBinaryCoversEveryField fills every field of an
// ExecutionRecordSnapshot (by reflection, so a new field is filled too) and
// checks the binary layout carries it, and refuses cut or foreign data.
func TestExecutionRecordsBinaryCoversEveryField(t *testing.T) {
	var rec projections.ExecutionRecordSnapshot
	v := reflect.ValueOf(&rec).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + strconv.Itoa(i))
			if f.Type() == reflect.TypeFor[domain.Status]() {
				f.SetString(string(domain.StatusTimedOut))
			}
		case reflect.Uint64:
			f.SetUint(uint64(300 + i))
		case reflect.Slice:
			f.SetBytes([]byte(`{"id":"x"}`))
		default:
			t.Fatalf("field %s of kind %s: teach this test (and the binary layout) about it", v.Type().Field(i).Name, f.Kind())
		}
	}
	live := rec
	live.Final = nil
	empty := rec
	empty.Final = []byte{}
	want := []projections.ExecutionRecordSnapshot{rec, live, empty, {}}
	in := projections.NewExecutionRecords(want...)
	b, err := in.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var back projections.ExecutionRecords
	if err := back.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.List(), want) {
		t.Fatalf("binary layout lost a field:\n%+v\n%+v", back.List(), want)
	}
	for cut := range len(b) {
		if err := back.UnmarshalBinary(b[:cut]); err == nil {
			t.Fatalf("records cut at byte %d of %d decode", cut, len(b))
		}
	}
	if err := back.UnmarshalBinary(append([]byte{9}, b[1:]...)); err == nil {
		t.Fatal("another layout's format byte is accepted")
	}
	if err := back.UnmarshalBinary(append(b, 0)); err == nil {
		t.Fatal("trailing bytes are accepted")
	}
	odd := rec
	odd.Position = 1 // one byte, after the status's
	if b, err := projections.NewExecutionRecords(odd).MarshalBinary(); err != nil {
		t.Fatal(err)
	} else if b[len(b)-2] = 200; back.UnmarshalBinary(b) == nil {
		t.Fatal("a record in an unknown state is accepted")
	}
}

// TestLargeSnapshotFilesRoundTrip saves folds with enough waiters for their
// lists to take several pieces in the file, and checks what Read gives back
// restores to the same folds.
func TestLargeSnapshotFilesRoundTrip(t *testing.T) {
	t.Parallel()
	evs := []domain.Envelope{}
	add := func(stream string, ev domain.Event) {
		env, err := codec.Events.Encode(uuid.New(), ev, domain.OwnerExecutor, "x")
		if err != nil {
			t.Fatal(err)
		}
		env.Stream, env.Position, env.Time = stream, uint64(len(evs)), time.Date(2026, 11, 21, 0, 0, 0, len(evs), time.UTC)
		evs = append(evs, env)
	}
	add(domain.ActionStream("a"), domain.ActionDefined{Policy: domain.Policy{Ref: "a", Runner: "core.noop", MaxQueueLength: domain.MaxQueueLengthLimit}.WithDefaults()})
	add(domain.ActionStream("a"), domain.ActionPaused{})
	evs[1].Version = 1
	for i := range 30_000 { // (over 1 MiB of waiters: several pieces)
		var in json.RawMessage
		if i%5 == 0 {
			in = json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`)
		}
		add(domain.ExecutionStream(uuid.NewSHA1(uuid.Nil, []byte(strconv.Itoa(i))).String()), domain.ExecutionRequested{Action: "a", Input: in})
	}
	st, v := projections.NewState(), projections.NewViews()
	for i := range evs {
		if err := st.Apply(&evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := v.Apply(evs); err != nil {
		t.Fatal(err)
	}
	files := projections.SnapshotFiles{Dir: t.TempDir()}
	last := evs[len(evs)-1].ID.String()
	if err := files.Save("state", uint64(len(evs)), last, st.Snapshot()); err != nil {
		t.Fatal(err)
	}
	if err := files.Save("views", uint64(len(evs)), last, v.Snapshot()); err != nil {
		t.Fatal(err)
	}
	var ss projections.StateSnapshot
	var vs projections.ViewsSnapshot
	if _, ok, err := files.Read("state", &ss); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, ok, err := files.Read("views", &vs); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if got, want := gobBytes(t, projections.RestoreState(&ss).Snapshot()), gobBytes(t, st.Snapshot()); !slices.Equal(got, want) {
		t.Error("the state read back differs")
	}
	if d := projections.Compare(v, projections.RestoreViews(&vs), 5); len(d) != 0 {
		t.Errorf("the read model read back differs: %v", d)
	}
	if q, _ := v.Queue("a"); len(q.Waiting) != 30_000 {
		t.Fatalf("%d waiting", len(q.Waiting))
	}
	// A file cut anywhere in its pieces is refused.
	path := filepath.Join(files.Dir, "views.snapshot")
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, cut := range []int{len(whole) - 1, len(whole) * 3 / 4, len(whole) / 2, len(whole) / 5} {
		if err := os.WriteFile(path, whole[:cut], 0o600); err != nil {
			t.Fatal(err)
		}
		var vs projections.ViewsSnapshot
		if _, _, err := files.Read("views", &vs); !errors.Is(err, projections.ErrSnapshotMismatch) {
			t.Errorf("a file cut at %d of %d bytes: %v", cut, len(whole), err)
		}
	}
}
