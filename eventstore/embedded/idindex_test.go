package embedded

import (
	"math/rand/v2"
	"testing"

	"github.com/google/uuid"
)

// TestIDIndexAgreesWithAMap: after any sequence of adds (with repeats, which
// are refused), growths and removals of random entries, the index finds
// exactly the ids a map holds, at their positions, and no other.
func TestIDIndexAgreesWithAMap(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		var posID []uuid.UUID
		x := newIDIndex(int(rng.IntN(50)))
		want := map[uuid.UUID]uint64{}
		var ids []uuid.UUID // distinct ids so far, for repeats and removals
		for step := 0; step < 3000; step++ {
			switch op := rng.IntN(10); {
			case op < 6: // a new id
				var id uuid.UUID
				for i := range id {
					id[i] = byte(rng.UintN(256))
				}
				if rng.IntN(4) == 0 {
					id[15] = 0 // ids that differ in few bits
				}
				if _, dup := want[id]; dup {
					continue
				}
				pos := uint64(len(posID))
				posID = append(posID, id)
				if !x.put(pos, posID) {
					t.Fatalf("seed %d step %d: a new id refused", seed, step)
				}
				want[id] = pos
				ids = append(ids, id)
			case op < 8 && len(ids) > 0: // an id again, at a new position: refused
				id := ids[rng.IntN(len(ids))]
				if _, ok := want[id]; !ok {
					continue
				}
				posID = append(posID, id)
				if x.put(uint64(len(posID)-1), posID) {
					t.Fatalf("seed %d step %d: a repeated id accepted", seed, step)
				}
				posID[len(posID)-1] = uuid.UUID{} // that position holds nothing then
			case len(ids) > 0: // a removal
				i := rng.IntN(len(ids))
				id := ids[i]
				ids[i] = ids[len(ids)-1]
				ids = ids[:len(ids)-1]
				x.del(id, posID)
				delete(want, id)
			}
		}
		if x.Len() != len(want) {
			t.Fatalf("seed %d: Len %d, want %d", seed, x.Len(), len(want))
		}
		for id, pos := range want {
			if got, ok := x.get(id, posID); !ok || got != pos {
				t.Fatalf("seed %d: get(%s) = %d, %v; want %d", seed, id, got, ok, pos)
			}
		}
		for _, id := range posID {
			if _, in := want[id]; !in {
				if _, ok := x.get(id, posID); ok && id != (uuid.UUID{}) {
					t.Fatalf("seed %d: a removed id %s is still found", seed, id)
				}
			}
		}
		if _, ok := x.get(uuid.New(), posID); ok {
			t.Fatalf("seed %d: an unknown id is found", seed)
		}
	}
}

// TestIDIndexRemovesFromTheEnd: taking the last entries out one by one, as
// recovery does, leaves exactly the earlier ones.
func TestIDIndexRemovesFromTheEnd(t *testing.T) {
	var posID []uuid.UUID
	x := newIDIndex(0)
	for i := 0; i < 5000; i++ {
		posID = append(posID, uuid.New())
		x.put(uint64(i), posID)
	}
	for i := len(posID) - 1; i >= 1000; i-- {
		x.del(posID[i], posID)
	}
	if x.Len() != 1000 {
		t.Fatalf("Len %d, want 1000", x.Len())
	}
	for i, id := range posID {
		if p, ok := x.get(id, posID); ok != (i < 1000) || ok && p != uint64(i) {
			t.Fatalf("id at %d: found %v at %d", i, ok, p)
		}
	}
}
