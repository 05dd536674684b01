package projections

import (
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
)

// TestRecIndexAgreesWithAMap puts and removes records at random (many
// removals, so deleted entries pile up and the table is rebuilt in place as
// well as grown) and checks the index against a plain map.
func TestRecIndexAgreesWithAMap(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	var order []string
	x := newRecIndex(&order, 0)
	model := map[string]*execRecord{}
	for step := range 50_000 {
		if r.IntN(5) < 3 || len(model) == 0 {
			id := "e" + strconv.Itoa(step)
			rec := &execRecord{seq: len(order)}
			order = append(order, id)
			x.Put(id, rec, 0)
			model[id] = rec
		} else { // (order keeps the removed ids, as the read model's does until it compacts)
			for id := range model {
				x.Remove(id)
				delete(model, id)
				break
			}
		}
		if step%1000 == 0 || step == 49_999 {
			if x.Len() != len(model) {
				t.Fatalf("step %d: %d entries, %d records", step, x.Len(), len(model))
			}
			for id, rec := range model {
				if got := x.Get(id); got != rec {
					t.Fatalf("step %d: %s gives %p, want %p", step, id, got, rec)
				}
			}
			n := 0
			x.Each(func(id string, rec *execRecord, _ int) {
				if model[id] != rec {
					t.Fatalf("step %d: each gives %s that the map does not have", step, id)
				}
				n++
			})
			if n != len(model) || x.Get("e-none") != nil {
				t.Fatalf("step %d: each visits %d of %d", step, n, len(model))
			}
		}
	}
}

// FuzzExecutionRecordsDecode feeds arbitrary bytes to the records' decoder:
// it must fail cleanly or give records that survive another round.
func FuzzExecutionRecordsDecode(f *testing.F) {
	rs := NewExecutionRecords(
		ExecutionRecordSnapshot{ID: "a", Action: "act", Status: "requested", Position: 7},
		ExecutionRecordSnapshot{ID: "b", Final: []byte(`{"id":"b"}`), Action: "act", Parent: "p", Status: "completed", Position: 9},
	)
	b, err := rs.MarshalBinary()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(b[:len(b)-3])
	f.Fuzz(func(t *testing.T, data []byte) {
		var r ExecutionRecords
		if r.UnmarshalBinary(data) != nil {
			return
		}
		again, err := r.MarshalBinary()
		if err != nil {
			t.Fatal(err)
		}
		var back ExecutionRecords
		if err := back.UnmarshalBinary(again); err != nil || !reflect.DeepEqual(back.List(), r.List()) {
			t.Fatalf("records decoded from %x do not survive another round: %v", data, err)
		}
	})
}
