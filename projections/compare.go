package projections

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
)

// Compare lists how a and b differ (at most max differences, each one line):
// position, executions (state, children, order), actions, queue contents and
// statistics, and workers. Two Views that folded the same log compare equal
// whatever batches they were given. Compare locks both for reading.
func Compare(a, b *Views, max int) []string {
	diffs, _ := compare(a, b, max, false)
	return diffs
}

// CompareAt is Compare for views that may still be folding: it compares
// only if both are at the same position (reported by at).
func CompareAt(a, b *Views, max int) (diffs []string, at bool) {
	return compare(a, b, max, true)
}

func compare(a, b *Views, max int, onlyAtSamePosition bool) ([]string, bool) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	if a != b {
		b.mu.RLock()
		defer b.mu.RUnlock()
	}
	if onlyAtSamePosition && a.st.Next != b.st.Next {
		return nil, false
	}
	diffs := []string{}
	add := func(format string, args ...any) bool {
		if len(diffs) < max {
			diffs = append(diffs, fmt.Sprintf(format, args...))
		}
		return len(diffs) < max
	}
	same := func(x, y any) bool {
		jx, errx := json.Marshal(x)
		jy, erry := json.Marshal(y)
		return errx == nil && erry == nil && bytes.Equal(jx, jy)
	}
	if a.st.Next != b.st.Next {
		add("position: %d != %d", a.st.Next, b.st.Next)
	}
	ao, bo := a.kept(), b.kept()
	if len(ao) != len(bo) {
		add("executions: %d != %d", len(ao), len(bo))
	}
	for i := 0; i < min(len(ao), len(bo)); i++ {
		id := ao[i]
		if bo[i] != id {
			if !add("execution order at %d: %s != %s", i, id, bo[i]) {
				return diffs, true
			}
			continue
		}
		va, vb := a.viewLocked(id, a.execs.Get(id)), b.viewLocked(id, b.execs.Get(id))
		if !same(va, vb) {
			ja, _ := json.Marshal(va)
			jb, _ := json.Marshal(vb)
			if !add("execution %s: %s != %s", id, ja, jb) {
				return diffs, true
			}
		}
	}
	refs := union(a.refsLocked(), b.refsLocked())
	for _, ref := range refs {
		if !same(actionOf(a, ref), actionOf(b, ref)) {
			add("action %s differs", ref)
		}
		if !same(a.statsLocked(ref), b.statsLocked(ref)) {
			ja, _ := json.Marshal(a.statsLocked(ref))
			jb, _ := json.Marshal(b.statsLocked(ref))
			add("queue_stats %s: %s != %s", ref, ja, jb)
		}
		qa, qb := queueContents(a.st, ref), queueContents(b.st, ref)
		if !same(qa, qb) {
			add("queue %s: %d waiting, %d active != %d waiting, %d active", ref, len(qa.Waiting), len(qa.Active), len(qb.Waiting), len(qb.Active))
		}
	}
	for _, id := range union(a.st.WorkerIDs(), b.st.WorkerIDs()) {
		wa, wb := a.st.Workers[id], b.st.Workers[id]
		if wa == nil || wb == nil {
			add("worker %s known to one side only", id)
			continue
		}
		if !same(a.workerLocked(id), b.workerLocked(id)) {
			add("worker %s differs", id)
		}
	}
	return diffs, true
}

// kept returns the ids of the executions v holds, in request order.
func (v *Views) kept() []string {
	if v.holes == 0 {
		return v.order
	}
	out := make([]string, 0, len(v.order)-v.holes)
	for _, id := range v.order {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

func actionOf(v *Views, ref string) any {
	a := v.st.Actions[ref]
	if a == nil {
		return nil
	}
	return ActionView{Policy: a.Policy(), Paused: a.Paused(), Version: a.Version()}
}

func union(a, b []string) []string {
	set := map[string]struct{}{}
	for _, s := range a {
		set[s] = struct{}{}
	}
	for _, s := range b {
		set[s] = struct{}{}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}
