package projections

import (
	"bytes"
	"encoding/gob"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// TestQueuesGobHasEveryField: the gob forms name the fields of the domain's
// snapshots one for one, so a field added there is not silently dropped.
func TestQueuesGobHasEveryField(t *testing.T) {
	for _, pair := range [][2]reflect.Type{
		{reflect.TypeFor[queuesGob](), reflect.TypeFor[domain.QueuesSnapshot]()},
		{reflect.TypeFor[queueGob](), reflect.TypeFor[domain.QueueSnapshot]()},
		{reflect.TypeFor[keyQueueGob](), reflect.TypeFor[domain.KeyQueueSnapshot]()},
	} {
		g, d := pair[0], pair[1]
		if g.NumField() != d.NumField() {
			t.Errorf("%s has %d fields, %s %d", g, g.NumField(), d, d.NumField())
			continue
		}
		for i := range d.NumField() {
			if _, ok := g.FieldByName(d.Field(i).Name); !ok {
				t.Errorf("%s has no field %s", g, d.Field(i).Name)
			}
		}
	}
}

// TestQueuesGobRoundTrip: a QueuesSnapshot with every field set comes back
// from gob as it was.
func TestQueuesGobRoundTrip(t *testing.T) {
	in := QueuesSnapshot{domain.QueuesSnapshot{
		Queues: []domain.QueueSnapshot{{
			Ref: "act", Policy: domain.Policy{Ref: "act", Runner: "core.noop", MaxConcurrent: 2}, Defined: true, Paused: true,
			Version: 7, Grants: []time.Time{t0, t0.Add(time.Second)}, RateSpan: time.Minute, RateMax: 3,
			LastKey: "k", HasLast: true,
			Keys: []domain.KeyQueueSnapshot{{Key: "k", Active: []string{"a1"}, Skips: 1, Waiting: domain.NewWaiters(
				domain.WaiterSnapshot{Execution: "w1", Position: 4, EnqueuedAt: t0},
				domain.WaiterSnapshot{Execution: "w2", Position: 5, EnqueuedAt: t0.Add(time.Hour),
					Request: &domain.WaiterRequest{Version: 1, Input: json.RawMessage(`{"n":1}`), Parent: "p", ItemIndex: 2}},
			)}},
		}},
		Pending: []domain.Rejection{{Execution: "x", Action: "act", Code: domain.RejectQueueFull, Reason: "full"}},
		Changed: []string{"act"},
	}}
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(in); err != nil {
		t.Fatal(err)
	}
	var out QueuesSnapshot
	if err := gob.NewDecoder(&b).Decode(&out); err != nil {
		t.Fatal(err)
	}
	got, want := out.Queues[0].Keys[0].Waiting.List(), in.Queues[0].Keys[0].Waiting.List()
	if !sameWaiters(got, want) {
		t.Fatalf("waiters differ:\n%+v\n%+v", got, want)
	}
	out.Queues[0].Keys[0].Waiting, in.Queues[0].Keys[0].Waiting = domain.Waiters{}, domain.Waiters{}
	if !reflect.DeepEqual(out, in) {
		t.Fatalf("gob round trip:\n%+v\n%+v", out, in)
	}
}
