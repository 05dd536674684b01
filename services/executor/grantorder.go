// The order of a grant cycle's candidates: the grantable waiters of every
// queue, highest priority then oldest request first across all queues, and a
// total-limited queue's round together, in the queue's own order, at the
// place of its first waiter. Each queue's list is in that order already
// (domain.Queue.Grantable), so the lists are merged as the cycle consumes
// them instead of sorted whole: a cycle often grants a few of the
// candidates of a hundred queues.

package executor

import (
	"sync"

	"github.com/turnstile/turnstile/domain"
)

// grantCand is a waiter a grant cycle may grant.
type grantCand struct {
	q    *domain.Queue
	w    domain.Waiter
	lead domain.Waiter // the order's key: w, or the first of its total-limited queue's round
	i    int           // w's turn in that round
}

// before reports whether a comes before b (a total order: the waiters of a
// cycle are distinct executions, and a round's share its lead).
func (a grantCand) before(b grantCand) bool {
	if a.lead.Execution != b.lead.Execution {
		return domain.GrantsBefore(a.lead, b.lead)
	}
	return a.i < b.i
}

// grantList is one queue's candidates and how many were taken.
type grantList struct {
	q     *domain.Queue
	ws    []domain.Waiter
	total bool
	next  int
}

func (l *grantList) head() grantCand {
	c := grantCand{q: l.q, w: l.ws[l.next], lead: l.ws[l.next]}
	if l.total {
		c.lead, c.i = l.ws[0], l.next
	}
	return c
}

// grantMerge yields the candidates of its lists in order (a binary heap of
// the lists by their heads).
type grantMerge struct {
	lists []grantList
	heap  []int // indexes into lists
}

// add adds queue q's grantable waiters ws (in q's grant order); total says
// that q's limit is a total across its key values (ws is then one round).
func (m *grantMerge) add(q *domain.Queue, ws []domain.Waiter, total bool) {
	if len(ws) == 0 {
		return
	}
	m.lists = append(m.lists, grantList{q: q, ws: ws, total: total})
	m.heap = append(m.heap, len(m.lists)-1)
	m.up(len(m.heap) - 1)
}

// next returns the next candidate in order, or false when none is left.
func (m *grantMerge) next() (grantCand, bool) {
	if len(m.heap) == 0 {
		return grantCand{}, false
	}
	l := &m.lists[m.heap[0]]
	c := l.head()
	if l.next++; l.next == len(l.ws) {
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
	}
	m.down(0)
	return c, true
}

func (m *grantMerge) less(i, j int) bool {
	return m.lists[m.heap[i]].head().before(m.lists[m.heap[j]].head())
}

func (m *grantMerge) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !m.less(i, p) {
			return
		}
		m.heap[i], m.heap[p] = m.heap[p], m.heap[i]
		i = p
	}
}

func (m *grantMerge) down(i int) {
	for {
		l, r, least := 2*i+1, 2*i+2, i
		if l < len(m.heap) && m.less(l, least) {
			least = l
		}
		if r < len(m.heap) && m.less(r, least) {
			least = r
		}
		if least == i {
			return
		}
		m.heap[i], m.heap[least] = m.heap[least], m.heap[i]
		i = least
	}
}

// mergeScratch keeps merges' slices from one grant cycle to the next.
var mergeScratch = sync.Pool{New: func() any { return &grantMerge{} }}

func (m *grantMerge) reset() {
	clear(m.lists)
	m.lists, m.heap = m.lists[:0], m.heap[:0]
}
