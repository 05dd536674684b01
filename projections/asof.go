package projections

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// Cut is a point in the log for "as of" queries: every event at a position
// ≤ Position, or (ByTime) every event committed at or before Time.
type Cut struct {
	Position uint64
	Time     time.Time
	ByTime   bool
}

// ParseCut reads a log position (a non-negative integer) or an RFC 3339 time.
func ParseCut(s string) (Cut, error) {
	if n, err := strconv.ParseUint(s, 10, 64); err == nil {
		return Cut{Position: n}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return Cut{}, fmt.Errorf("as_of %q is neither a log position nor an RFC 3339 time", s)
	}
	return Cut{Time: t, ByTime: true}, nil
}

// Includes reports whether env is at or before the cut.
func (c Cut) Includes(env *domain.Envelope) bool {
	if c.ByTime {
		return !env.Time.After(c.Time)
	}
	return env.Position <= c.Position
}

// ExecutionAsOf folds execution id's stream up to the cut. found is false
// when the execution had not been requested by then.
func ExecutionAsOf(ctx context.Context, store eventstore.Store, id string, cut Cut) (view ExecutionView, found bool, err error) {
	return foldExecution(ctx, store, domain.NewExecution(id), 0, 0, cut)
}

// foldExecution folds x's stream from version from up to the cut into x;
// pos is the position of x's last event before from.
func foldExecution(ctx context.Context, store eventstore.Store, x *domain.Execution, from, pos uint64, cut Cut) (view ExecutionView, found bool, err error) {
	id := x.ID()
	view.Position = pos
	for {
		batch, err := store.ReadStream(ctx, domain.ExecutionStream(id), from, 1000)
		if err != nil {
			return ExecutionView{}, false, err
		}
		for i := range batch {
			env := &batch[i]
			if !cut.Includes(env) {
				return ExecutionView{ExecutionState: x.State(), Position: view.Position}, x.Version() >= 0, nil
			}
			ev, err := codec.Events.Decode(env)
			if err != nil {
				return ExecutionView{}, false, err
			}
			x.Apply(ev, env.Version, env.Time)
			view.Position = env.Position
		}
		if len(batch) < 1000 {
			return ExecutionView{ExecutionState: x.State(), Position: view.Position}, x.Version() >= 0, nil
		}
		from += uint64(len(batch))
	}
}

// ViewsAsOf folds the whole log up to the cut into new Views: every
// action's queue and statistics as they were then. It reads the log from
// the start, so it costs a full fold up to the cut.
func ViewsAsOf(ctx context.Context, store eventstore.Store, cut Cut) (*Views, error) {
	v := newViews(1) // nobody follows its changes: no ring of recent ones

	for {
		batch, err := store.ReadAll(ctx, v.Next(), 4096)
		if err != nil {
			return nil, err
		}
		n := 0
		for n < len(batch) && cut.Includes(&batch[n]) {
			n++
		}
		if n > 0 {
			if err := v.Apply(batch[:n]); err != nil {
				return nil, err
			}
		}
		if n < len(batch) || len(batch) == 0 {
			return v, nil
		}
	}
}
