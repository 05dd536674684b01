package projections

import (
	"fmt"
	"strings"
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

// TestFeedBatchesAreBoundedInBytes: a batch of the executions feed, from
// the ring, from the scan and from the current state's pages, ends once it
// holds about DefaultPageBytes, whatever its max; resuming from its next
// position gives every execution once.
func TestFeedBatchesAreBoundedInBytes(t *testing.T) {
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
	const n, size = 12, 200 << 10
	input := []byte(`{"s":"` + strings.Repeat("x", size) + `"}`)
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("%d@%d", i, pos))
		put(domain.ExecutionStream(fmt.Sprint(i)), domain.ExecutionRequested{Action: "a", Input: input})
	}
	perBatch := DefaultPageBytes/size + 1
	for name, v := range map[string]*Views{"scan": small, "ring": big} {
		var got []string
		batches := 0
		for from := uint64(0); ; batches++ {
			xs, next := v.ExecutionsSince(from, "", 256)
			if len(xs) == 0 {
				break
			}
			if len(xs) > perBatch {
				t.Errorf("%s: a batch of %d executions of %d KiB", name, len(xs), size>>10)
			}
			got, from = append(got, ids(xs)...), next
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || batches < 2 {
			t.Errorf("%s: %d batches gave %v", name, batches, got)
		}
	}
	pages, _ := big.CurrentExecutions("")
	count, npages := 0, 0
	for xs := pages(256); len(xs) > 0; xs, npages = pages(256), npages+1 {
		if len(xs) > perBatch {
			t.Errorf("a page of the current state with %d executions of %d KiB", len(xs), size>>10)
		}
		count += len(xs)
	}
	if count != n || npages < 2 {
		t.Errorf("the current state's %d pages gave %d executions, want %d", npages, count, n)
	}
}
