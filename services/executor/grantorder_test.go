package executor

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// TestGrantMergeIsTheSortedOrder: merging the queues' lists gives exactly
// the order of sorting all their candidates (the order grant cycles used to
// build whole), for random queues of random priorities and positions, some
// of them total-limited rounds (in the round's own order, not sorted).
func TestGrantMergeIsTheSortedOrder(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewPCG(seed, 7))
		positions := r.Perm(10_000)
		var all []grantCand
		m := &grantMerge{}
		for q := range r.IntN(12) {
			n := r.IntN(15)
			ws := make([]domain.Waiter, n)
			for i := range ws {
				p := positions[0]
				positions = positions[1:]
				ws[i] = domain.Waiter{Execution: fmt.Sprintf("x%d", p), Position: uint64(p), Priority: 1 + r.IntN(4), Key: fmt.Sprint(q)}
			}
			total := r.IntN(3) == 0
			if !total { // a plain queue's list is in grant order
				sort.Slice(ws, func(i, j int) bool { return domain.GrantsBefore(ws[i], ws[j]) })
			}
			for i, w := range ws {
				c := grantCand{w: w, lead: w}
				if total {
					c.lead, c.i = ws[0], i
				}
				all = append(all, c)
			}
			m.add(nil, ws, total)
		}
		sort.Slice(all, func(i, j int) bool { return all[i].before(all[j]) })
		var got []grantCand
		for {
			c, ok := m.next()
			if !ok {
				break
			}
			got = append(got, c)
		}
		if !slices.EqualFunc(got, all, func(a, b grantCand) bool { return a.w == b.w && a.lead == b.lead && a.i == b.i }) {
			t.Fatalf("seed %d: merged order differs from the sorted one:\n got %v\nwant %v", seed, execs(got), execs(all))
		}
	}
}

func execs(cs []grantCand) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.w.Execution
	}
	return out
}
