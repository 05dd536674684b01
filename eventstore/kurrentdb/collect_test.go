package kurrentdb

import (
	"context"
	"sync"
	"testing"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// collector is a subscription running in the background that keeps every
// event it is delivered, in delivery order.
type collector struct {
	mu   sync.Mutex
	got  []domain.Envelope
	done chan error // receives what Subscribe returned, once it has
}

// collect subscribes to all of s from position 0 with no filter until ctx
// ends (or the subscription does).
func collect(ctx context.Context, s *Store) *collector {
	c := &collector{done: make(chan error, 1)}
	go func() {
		c.done <- s.Subscribe(ctx, 0, eventstore.Filter{}, func(b []domain.Envelope) error {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.got = append(c.got, b...)
			return nil
		})
	}()
	return c
}

// count returns how many events have been delivered so far.
func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

// isLog fails the test unless the events delivered are those of s's whole
// log, in its order: no gap, no duplicate.
func (c *collector) isLog(t *testing.T, s *Store) {
	t.Helper()
	all := mustReadAll(t, s)
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got) != len(all) {
		t.Fatalf("delivered %d events, the log holds %d", len(c.got), len(all))
	}
	for i := range all {
		if c.got[i].ID != all[i].ID {
			t.Fatalf("delivery %d is %s, the log has %s", i, c.got[i].ID, all[i].ID)
		}
	}
}
