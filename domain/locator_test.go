package domain

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestLocatorAgreesWithAMap runs random pushes, grants and removals (from
// the head mostly, so the fifos compact, and from the middle) over a few key
// queues, and checks after each step that the locator places every live
// execution where a plain map says, that its slot holds its id, and that it
// knows nothing of the others.
func TestLocatorAgreesWithAMap(t *testing.T) {
	for seed := range uint64(4) {
		r := rand.New(rand.NewPCG(seed, 11))
		where := newLocator(int(seed) * 100)
		kqs := []*KeyQueue{{Key: "a"}, {Key: "b"}, {Key: "c"}}
		type place struct {
			kq      *KeyQueue
			granted bool
		}
		model := map[string]place{}
		var gone []string
		next, compacted := 0, false
		check := func(step int) {
			for id, m := range model {
				p, ok := where.get(id)
				if !ok || p.kq != m.kq || (p.i < 0) != m.granted {
					t.Fatalf("seed %d step %d: %s is at %+v (%v), the map says %+v", seed, step, id, p, ok, m)
				}
				if !m.granted && p.kq.waiting.items[p.i].id != id {
					t.Fatalf("seed %d step %d: %s points at the slot of %q", seed, step, id, p.kq.waiting.items[p.i].id)
				}
			}
			for _, id := range gone[max(0, len(gone)-50):] {
				if _, ok := where.get(id); ok {
					t.Fatalf("seed %d step %d: %s is gone but located", seed, step, id)
				}
			}
			if n := where.waiting.Len() + len(where.granted); n != len(model) {
				t.Fatalf("seed %d step %d: %d entries, %d live", seed, step, n, len(model))
			}
		}
		for step := range 30_000 {
			kq := kqs[r.IntN(len(kqs))]
			head := kq.waiting.head
			switch op := r.IntN(10); {
			case op < 5 || len(model) == 0: // a new waiter
				id := "x" + strconv.Itoa(next)
				next++
				kq.waiting.push(kq, slot{id: id, pos: uint64(next)}, where)
				model[id] = place{kq: kq}
			case op < 8: // the head leaves: granted or ended
				s, ok := kq.waiting.peek()
				if !ok {
					continue
				}
				id, i := s.id, kq.waiting.head
				if op == 5 {
					where.grant(id, kq)
					model[id] = place{kq: kq, granted: true}
				} else {
					where.remove(id)
					delete(model, id)
					gone = append(gone, id)
				}
				kq.waiting.remove(kq, i, where)
			default: // one from the middle ends (or a granted one)
				for id, m := range model {
					if p, _ := where.get(id); !m.granted {
						where.remove(id)
						m.kq.waiting.remove(m.kq, p.i, where)
					} else {
						where.remove(id)
					}
					delete(model, id)
					gone = append(gone, id)
					break
				}
			}
			compacted = compacted || (kq.waiting.head < head && kq.waiting.live > 0)
			if step%97 == 0 || step > 29_900 {
				check(step)
			}
		}
		check(-1)
		if !compacted {
			t.Errorf("seed %d: no fifo compacted", seed)
		}
	}
}
