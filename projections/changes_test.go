package projections

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore/codec"
)

// TestFeedFallsBackToScanWhenTheRingWrapped: a reader further behind than
// the ring remembers gets the same answer from the scan of every record.
func TestFeedFallsBackToScanWhenTheRingWrapped(t *testing.T) {
	small, big := newViews(4), newViews(1<<10)
	pos := uint64(0)
	put := func(stream string, ev domain.Event) {
		env, err := codec.Events.Encode(uuid.New(), ev, domain.OwnerExecutor, "x")
		if err != nil {
			t.Fatal(err)
		}
		env.Stream, env.Position, env.Time = stream, pos, time.Unix(int64(pos), 0)
		pos++
		for _, v := range []*Views{small, big} {
			if err := v.Apply([]domain.Envelope{env}); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(domain.ActionStream("a"), domain.ActionDefined{Policy: domain.Policy{Ref: "a", Runner: "core.noop"}.WithDefaults()})
	for i := range 20 {
		put(domain.ExecutionStream(fmt.Sprint(i)), domain.ExecutionRequested{Action: "a"})
	}
	if small.changes.covers(1) {
		t.Fatal("the small ring still covers position 1")
	}
	for _, from := range []uint64{0, 1, 5, 19, 20, 21} {
		for _, max := range []int{1, 3, 100} {
			s, sn := small.ExecutionsSince(from, "", max)
			b, bn := big.ExecutionsSince(from, "", max)
			if fmt.Sprint(ids(s)) != fmt.Sprint(ids(b)) || sn != bn {
				t.Errorf("from %d max %d: scan gives %v next %d, ring gives %v next %d", from, max, ids(s), sn, ids(b), bn)
			}
		}
	}
}

func ids(xs []ExecutionView) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = fmt.Sprintf("%s@%d", x.ID, x.Position)
	}
	return out
}
