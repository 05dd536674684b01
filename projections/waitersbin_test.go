package projections

// Tests of the waiters' binary layout, and of the queue aggregate's waiters
// through it (moved here with the layout from the domain).

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// randomRequest returns an execution.requested the queue fold admits (no
// items, so not a with_items parent), with each optional field set or not.
func randomRequest(r *rand.Rand) domain.ExecutionRequested {
	e := domain.ExecutionRequested{Action: "act"}
	if r.IntN(2) == 0 {
		e.Input = json.RawMessage(`{"n":` + strconv.Itoa(r.IntN(1000)) + `}`)
	}
	if r.IntN(3) == 0 {
		e.Parent, e.ItemIndex = "p-"+strconv.Itoa(r.IntN(9)), r.IntN(50)
	}
	if r.IntN(5) == 0 { // what no executor writes, but a log may say
		e.Items, e.Concurrency = -r.IntN(3), r.IntN(4)
		e.WithItems = []json.RawMessage{json.RawMessage(`1`), {}}
	}
	if r.IntN(2) == 0 {
		e.IdempotencyKey, e.RequestHash = "k"+strconv.Itoa(r.IntN(9)), "h"+strconv.Itoa(r.IntN(9))
	}
	return e
}

// randomTime returns a log time: mostly UTC, sometimes in another zone or
// carrying a monotonic reading, which a waiter must keep as they are.
func randomTime(r *rand.Rand) time.Time {
	t := t0.Add(time.Duration(r.Int64N(int64(time.Hour))))
	switch r.IntN(6) {
	case 0:
		return t.In(time.FixedZone("X", 3600))
	case 1:
		return time.Now()
	case 2:
		return time.Time{}
	}
	return t
}

// TestWaitingExecutionIsTheFoldsAggregate checks that the execution a queue
// rebuilds for a waiter (Queues.Waiting) is exactly the aggregate its
// execution.requested event gives, before and after a snapshot of the
// queues (in Waiters' binary layout) and a restore, for requests with any
// of their fields set, at any version and log time.
func TestWaitingExecutionIsTheFoldsAggregate(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		qs := domain.NewQueues()
		qs.Apply(&domain.Envelope{Stream: "action-act", Time: t0}, domain.ActionDefined{Policy: domain.Policy{Ref: "act", Runner: "core.noop", MaxQueueLength: 1000}.WithDefaults()})
		qs.Apply(&domain.Envelope{Stream: "action-act", Version: 1, Time: t0}, domain.ActionPaused{})
		want := map[string]*domain.Execution{}
		for i := range 1 + r.IntN(20) {
			id := "x" + strconv.Itoa(i)
			env := &domain.Envelope{Stream: domain.ExecutionStream(id), Version: uint64(r.IntN(2)), Position: uint64(10 + i), Time: randomTime(r)}
			e := randomRequest(r)
			qs.Apply(env, e)
			x := domain.NewExecution(id)
			x.Apply(e, env.Version, env.Time)
			want[id] = x
		}
		sn := qs.Snapshot()
		for qi := range sn.Queues {
			for ki := range sn.Queues[qi].Keys {
				k := &sn.Queues[qi].Keys[ki]
				b, err := marshalWaiters(k.Waiting)
				if err != nil {
					t.Fatal(err)
				}
				back, err := unmarshalWaiters(b)
				if err != nil {
					t.Fatal(err)
				}
				if !sameWaiters(back.List(), k.Waiting.List()) {
					t.Fatalf("round %d: waiters differ after the binary layout:\n%+v\n%+v", round, back.List(), k.Waiting.List())
				}
				if again, err := marshalWaiters(back); err != nil || !bytes.Equal(again, b) {
					t.Fatalf("round %d: decoded waiters encode otherwise (%v)", round, err)
				}
				k.Waiting = back
			}
		}
		restored := domain.RestoreQueues(sn)
		if !sameQueues(restored.Snapshot(), sn) {
			t.Fatalf("round %d: restored queues snapshot differently", round)
		}
		// A second restore of the same snapshot is independent of the first.
		again := domain.RestoreQueues(sn)
		scratch := domain.RestoreQueues(sn)
		for id := range want {
			scratch.Apply(&domain.Envelope{Stream: domain.ExecutionStream(id), Position: 1000}, domain.ExecutionCancelled{})
		}
		if !sameQueues(again.Snapshot(), sn) || !sameQueues(restored.Snapshot(), sn) {
			t.Fatalf("round %d: changing one restore changed another", round)
		}
		for id, x := range want {
			for name, q := range map[string]*domain.Queues{"fold": qs, "restored": restored} {
				got, ok := q.Waiting(id)
				if !ok {
					t.Fatalf("round %d: %s: %s is not waiting", round, name, id)
				}
				gs, ws := got.Snapshot(), x.Snapshot()
				// Times are compared as instants in their zone: a monotonic
				// reading does not survive in the aggregate's snapshot either.
				if !reflect.DeepEqual(gs, ws) && !(gs.RequestedAt.Equal(ws.RequestedAt) && sameButTime(gs, ws)) {
					t.Fatalf("round %d: %s: %s rebuilt as\n%+v\nthe fold has\n%+v", round, name, id, gs, ws)
				}
			}
		}
	}
}

// sameQueues compares snapshots of queues, their waiters by their lists
// (a restore marks the waiters it keeps).
func sameQueues(a, b domain.QueuesSnapshot) bool {
	strip := func(s domain.QueuesSnapshot) (domain.QueuesSnapshot, [][]domain.WaiterSnapshot) {
		var lists [][]domain.WaiterSnapshot
		s.Queues = slices.Clone(s.Queues)
		for i := range s.Queues {
			s.Queues[i].Keys = slices.Clone(s.Queues[i].Keys)
			for j := range s.Queues[i].Keys {
				lists = append(lists, s.Queues[i].Keys[j].Waiting.List())
				s.Queues[i].Keys[j].Waiting = domain.Waiters{}
			}
		}
		return s, lists
	}
	sa, la := strip(a)
	sb, lb := strip(b)
	return reflect.DeepEqual(sa, sb) && reflect.DeepEqual(la, lb)
}

// sameWaiters compares waiters with their times as instants at an offset: a
// monotonic reading and a zone's name do not survive an encoding.
func sameWaiters(a, b []domain.WaiterSnapshot) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		_, ox := x.EnqueuedAt.Zone()
		_, oy := y.EnqueuedAt.Zone()
		if !x.EnqueuedAt.Equal(y.EnqueuedAt) || ox != oy {
			return false
		}
		x.EnqueuedAt, y.EnqueuedAt = time.Time{}, time.Time{}
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

func sameButTime(a, b domain.ExecutionSnapshot) bool {
	// A zone's name does not survive a binary (or gob) encoding; its offset does.
	if _, oa := a.RequestedAt.Zone(); true {
		if _, ob := b.RequestedAt.Zone(); oa != ob {
			return false
		}
	}
	a.RequestedAt, b.RequestedAt = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// TestWaitersBinaryCoversEveryField fills every field of a WaiterSnapshot
// (by reflection, so a new field is filled too) and checks the binary layout (marshalWaiters)
// and a queue slot carry it.
func TestWaitersBinaryCoversEveryField(t *testing.T) {
	var w domain.WaiterSnapshot
	fill(t, reflect.ValueOf(&w).Elem())
	if w.Request == nil {
		t.Fatal("the request was not filled")
	}
	if w.Priority == 0 {
		t.Fatal("the priority was not filled")
	}
	w.Priority = domain.MaxPriority // a queue keeps a priority of 1..4 (0 for the default)
	b, err := marshalWaiters(domain.NewWaiters(w))
	if err != nil {
		t.Fatal(err)
	}
	back, err := unmarshalWaiters(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Len() != 1 || !reflect.DeepEqual(back.List()[0], w) {
		t.Fatalf("binary layout lost a field:\n%+v\n%+v", back.List(), w)
	}
	// And through a queue: restore a queue holding it, snapshot it again.
	sn := domain.QueuesSnapshot{Queues: []domain.QueueSnapshot{{Ref: "act", Version: -1,
		Keys: []domain.KeyQueueSnapshot{{Key: "", Waiting: domain.NewWaiters(w)}}}}}
	if got := domain.RestoreQueues(sn).Snapshot(); !reflect.DeepEqual(got.Queues[0].Keys[0].Waiting.List()[0], w) {
		t.Fatalf("a queue lost a field:\n%+v\n%+v", got.Queues[0].Keys[0].Waiting.List()[0], w)
	}
	for cut := range len(b) {
		if _, err := unmarshalWaiters(b[:cut]); err == nil {
			t.Fatalf("a layout cut at byte %d of %d decodes", cut, len(b))
		}
	}
	if _, err := unmarshalWaiters(append([]byte{9}, b[1:]...)); err == nil {
		t.Fatal("another layout's format byte is accepted")
	}
}

// fill sets every field of the struct v to something other than its zero
// value, following pointers to structs.
func fill(t *testing.T, v reflect.Value) {
	t.Helper()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("s" + strconv.Itoa(i))
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(-3 - i))
		case reflect.Uint64:
			f.SetUint(uint64(7 + i))
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.Uint8 {
				f.SetBytes([]byte(`{"a":1}`))
			} else {
				f.Set(reflect.ValueOf([]json.RawMessage{json.RawMessage(`2`), nil, {}}))
			}
		case reflect.Struct:
			f.Set(reflect.ValueOf(t0.Add(time.Duration(i))))
		case reflect.Pointer:
			f.Set(reflect.New(f.Type().Elem()))
			fill(t, f.Elem())
		default:
			t.Fatalf("field %s of kind %s: teach this test (and Waiters' binary layout) about it", v.Type().Field(i).Name, f.Kind())
		}
	}
}

// TestWaitersInPieces encodes enough waiters for several pieces and checks
// they decode from the pieces to the same waiters, and that a missing last
// piece is an error.
func TestWaitersInPieces(t *testing.T) {
	var in []domain.WaiterSnapshot
	for i := range 60_000 {
		w := domain.WaiterSnapshot{Execution: "0190a3b4-1234-7abc-8def-" + strconv.Itoa(100000000000+i), Position: uint64(i), EnqueuedAt: t0.Add(time.Duration(i))}
		if i%7 == 0 {
			w.Request = &domain.WaiterRequest{Input: json.RawMessage(`{"i":` + strconv.Itoa(i) + `}`)}
		}
		in = append(in, w)
	}
	var pieces [][]byte
	if err := encodeWaiters(domain.NewWaiters(in...), func(p []byte) error {
		pieces = append(pieces, bytes.Clone(p))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(pieces) < 2 {
		t.Fatalf("%d pieces", len(pieces))
	}
	from := func(ps [][]byte) func() ([]byte, error) {
		return func() ([]byte, error) {
			if len(ps) == 0 {
				return nil, errors.New("no more pieces")
			}
			p := ps[0]
			ps = ps[1:]
			return p, nil
		}
	}
	back, err := decodeWaiters(from(pieces))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.List(), in) {
		t.Fatal("the waiters differ after pieces")
	}
	if _, err := decodeWaiters(from(pieces[:len(pieces)-1])); err == nil {
		t.Fatal("waiters without their last piece decode")
	}
}

// FuzzWaitersDecode feeds arbitrary bytes to the waiters' decoder: it must fail
// cleanly or give waiters that encode back to bytes that decode the same.
func FuzzWaitersDecode(f *testing.F) {
	ws := domain.NewWaiters(
		domain.WaiterSnapshot{Execution: "a", Position: 3, EnqueuedAt: t0},
		domain.WaiterSnapshot{Execution: "b", Position: 4, EnqueuedAt: t0.In(time.FixedZone("", 3600)),
			Request: &domain.WaiterRequest{Version: 1, Input: json.RawMessage(`{}`), Parent: "p", ItemIndex: 2, WithItems: []json.RawMessage{nil, {}}}},
	)
	b, err := marshalWaiters(ws)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)/2])
	f.Fuzz(func(t *testing.T, data []byte) {
		w, err := unmarshalWaiters(data)
		if err != nil {
			return
		}
		again, err := marshalWaiters(w)
		if err != nil {
			t.Fatal(err)
		}
		back, err := unmarshalWaiters(again)
		if err != nil || !sameWaiters(back.List(), w.List()) {
			t.Fatalf("decoded waiters do not survive another round: %v", err)
		}
	})
}

// t0 is the domain tests' time.
var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)
