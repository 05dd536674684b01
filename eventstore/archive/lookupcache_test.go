package archive

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
)

// TestLookupsStayWithinTheirBudget: the cache of the segments' filters and
// member tables holds at most its budget, and look-ups still find every
// stream in every segment, reading the tables that left the cache from the
// index files again; after a reopen too.
func TestLookupsStayWithinTheirBudget(t *testing.T) {
	ctx := context.Background()
	src := memstore.New(memstore.Options{})
	const streams, events = 40, 8000
	for i := range events {
		if _, err := src.Append(ctx, fmt.Sprintf("s-%d", i%streams), eventstore.Any, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := src.Append(ctx, "late", eventstore.NoStream, domain.Envelope{ID: uuid.New(), Type: "t", Owner: domain.OwnerAPI, Data: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	a.SetSegmentEvents(400) // 21 segments
	const budget = 500      // a 400-event segment of 40 streams: a 50-byte filter, one member (about 230 bytes cached): two fit
	a.SetFilterCacheBytes(budget)
	if err := a.Write(ctx, src, 0, events+1); err != nil {
		t.Fatal(err)
	}
	reopened, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	reopened.SetFilterCacheBytes(budget)
	for name, x := range map[string]*Archive{"written": a, "reopened": reopened} {
		segs := x.snapshot()
		if len(segs) != 21 {
			t.Fatalf("%s: %d segments, want 21", name, len(segs))
		}
		for _, stream := range []string{"s-0", "s-13", "s-39", "late"} {
			want, err := src.ReadStream(ctx, stream, 0, events)
			if err != nil {
				t.Fatal(err)
			}
			got, err := x.ReadStream(ctx, stream)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("%s: %s: %d events, want %d", name, stream, len(got), len(want))
			}
			for i := range want {
				if got[i].Position != want[i].Position || got[i].ID != want[i].ID {
					t.Fatalf("%s: %s: event %d is %d/%s, want %d/%s", name, stream, i, got[i].Position, got[i].ID, want[i].Position, want[i].ID)
				}
			}
			if n := x.lookups.size(); n == 0 || n > budget {
				t.Fatalf("%s: the cache holds %d bytes, budget %d", name, n, budget)
			}
		}
		if _, ok, err := x.FirstEvent(ctx, "nope", time.Time{}); ok || err != nil {
			t.Fatalf("%s: FirstEvent(nope) = %v, %v", name, ok, err)
		}
	}
	// With no cache at all every read takes its tables from the files.
	reopened.SetFilterCacheBytes(0)
	got, err := reopened.Read(ctx, 3999, 3)
	if err != nil || len(got) != 3 || got[0].Position != 3999 || got[2].Position != 4001 {
		t.Fatalf("Read across two segments without a cache: %d events, %v", len(got), err)
	}
	if late, err := reopened.ReadStream(ctx, "late"); err != nil || len(late) != 1 || reopened.lookups.size() != 0 {
		t.Fatalf("ReadStream without a cache: %d events, %v, %d bytes cached", len(late), err, reopened.lookups.size())
	}
}
