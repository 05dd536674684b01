package projections

import (
	"math/rand/v2"
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
			x.put(id, rec)
			model[id] = rec
		} else { // (order keeps the removed ids, as the read model's does until it compacts)
			for id := range model {
				x.remove(id)
				delete(model, id)
				break
			}
		}
		if step%1000 == 0 || step == 49_999 {
			if x.live != len(model) {
				t.Fatalf("step %d: %d entries, %d records", step, x.live, len(model))
			}
			for id, rec := range model {
				if got := x.get(id); got != rec {
					t.Fatalf("step %d: %s gives %p, want %p", step, id, got, rec)
				}
			}
			n := 0
			x.each(func(id string, rec *execRecord) {
				if model[id] != rec {
					t.Fatalf("step %d: each gives %s that the map does not have", step, id)
				}
				n++
			})
			if n != len(model) || x.get("e-none") != nil {
				t.Fatalf("step %d: each visits %d of %d", step, n, len(model))
			}
		}
	}
}
