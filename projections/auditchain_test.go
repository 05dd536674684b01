package projections_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// tampered is a store whose reads give the log with one event changed or
// dropped, as an editor of its files would leave it.
type tampered struct {
	*memstore.Store
	at   uint64
	drop bool
}

func (s tampered) ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	evs, err := s.Store.ReadAll(ctx, from, limit)
	out := evs[:0:0]
	for _, e := range evs {
		if e.Position == s.at {
			if s.drop {
				continue
			}
			e.Data = json.RawMessage(`{"action":"b"}`)
		}
		out = append(out, e)
	}
	return out, err
}

// The audit follows the hash chain: a log as written has no chain
// violation; an event changed is reported at its position, an event dropped
// at the position after it, each once.
func TestAuditChecksTheChain(t *testing.T) {
	t.Parallel()
	store := memstore.New(memstore.Options{})
	defer func() { _ = store.Close() }()
	w := logWriter{t, store}
	w.action("a", 1)
	w.action("b", 1)
	for _, id := range []string{"x1", "x2", "x3"} {
		w.request(id, "a")
	}
	rep, err := projections.Audit(context.Background(), store, nil)
	if err != nil || !rep.OK() {
		t.Fatalf("the log as written: %v %+v", err, rep)
	}
	for _, c := range []struct {
		name string
		s    tampered
		at   uint64
	}{
		{"changed", tampered{store, 3, false}, 3},
		{"dropped", tampered{store, 3, true}, 4},
	} {
		rep, err := projections.Audit(context.Background(), c.s, nil)
		if err != nil {
			t.Fatal(err)
		}
		var chain []projections.Violation
		for _, v := range rep.Violations {
			if v.Rule == projections.RuleChain {
				chain = append(chain, v)
			}
		}
		if len(chain) != 1 || chain[0].Position != c.at {
			t.Fatalf("%s: chain violations %+v, want one at position %d", c.name, chain, c.at)
		}
	}
}
