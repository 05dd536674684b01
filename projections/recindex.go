package projections

import "github.com/turnstile/turnstile/domain"

// recIndex finds an execution's record by its id (the read model's execs):
// a domain.Index whose entries keep no key of their own. A record's key is
// its id in the read model's order, (*order)[rec.seq], so an entry is 16
// bytes where a map[string]*execRecord takes about 60 per execution. Every
// record in the index must be at its place in order whenever it is used.
type recIndex = domain.Index[execRecord, recordKeys]

// recordKeys gives a record's key: its id in the read model's order.
type recordKeys struct{ order *[]string }

func (k recordKeys) Key(r *execRecord, _ int32) string { return (*k.order)[r.seq] }

func newRecIndex(order *[]string, n int) *recIndex {
	return domain.NewIndex(recordKeys{order}, n)
}
