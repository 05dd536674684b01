// Commits: one decision's appends, atomically when the store can, else one
// stream at a time with the fence first; then what the outcome leaves. A
// landed decision is counted; a failed one frees its streams so that the
// next cycle decides again on the fold, and an unknown outcome is read back
// from the store (a lost verdict that may have landed keeps its worker from
// new handoffs until the fold says).

package executor

import (
	"context"
	"errors"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/crashpoint"
	"github.com/turnstile/turnstile/services/repository"
)

// written is the outcome of an op's appends: each one's error (nil: it
// landed; errNotTried: it was not attempted, the chain having stopped
// before it), and the first error.
type written struct {
	errs []error
	err  error
}

// errNotTried marks an append of a single-stream op that was not attempted.
var errNotTried = errors.New("not attempted: an earlier append of the op failed")

// write appends o: atomically when the store can, else one stream at a
// time as o.seq says.
func (e *Executor) write(ctx context.Context, o *op) written {
	for i := range o.appends { // decoded here, off the loop, for the folds of this process
		for j := range o.appends[i].Events {
			_ = codec.Events.Remember(&o.appends[i].Events[j])
		}
	}
	w := written{errs: make([]error, len(o.appends))}
	all := func(err error) written {
		for i := range w.errs {
			w.errs[i] = err
		}
		w.err = err
		return w
	}
	switch {
	case len(o.appends) == 1:
		a := &o.appends[0]
		_, err := e.cfg.Store.Append(ctx, a.Stream, a.Expected, a.Events...)
		return all(err)
	case !e.single:
		_, err := e.cfg.Store.AppendMulti(ctx, o.appends...)
		return all(err)
	}
	for i := range o.appends {
		a := &o.appends[i]
		_, err := e.cfg.Store.Append(ctx, a.Stream, a.Expected, a.Events...)
		if err == nil {
			continue
		}
		w.errs[i] = err
		if w.err == nil {
			w.err = err
		}
		switch {
		case i > 0 && o.seq == seqEach:
		case i > 0 && o.seq == seqChainPastRaces && repository.LostRace(err):
		default:
			for j := i + 1; j < len(o.appends); j++ {
				w.errs[j] = errNotTried
			}
			return w
		}
	}
	return w
}

// Commit appends one decision and records the outcome: the decision's count
// on success; on failure, its streams are free for the next decisions. It
// returns the store's error (on a store without atomic multi-stream appends,
// the first of its appends' errors: the appends before it, the fence first,
// may have landed, and the fold shows what is missing). A lost race
// (repository.LostRace) is expected and harmless: the fold shows the winner's
// events and the next cycle decides again. So is any other failure: the ids
// of a decision's events are derived from what it decides, so deciding it
// again on a fold that already shows it writes nothing twice.
func (e *Executor) Commit(ctx context.Context, d Decision) error {
	if e.beforeAppend != nil {
		e.beforeAppend(d.o.what)
	}
	w := e.write(ctx, &d.o)
	landed := e.landed(ctx, &d.o, w)
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settle(ctx, &d.o, w, landed)
	return w.err
}

// landed, after appends failed with an unknown outcome, reads whether they
// landed: per stream, false when the stream has no event at the version the
// append would have reached, true when it has one (ours, or a winner's: the
// fold will show it either way), absent when that is still unknown.
func (e *Executor) landed(ctx context.Context, o *op, w written) map[string]bool {
	if w.err == nil || ctx.Err() != nil {
		return nil
	}
	var out map[string]bool
	for i, a := range o.appends {
		if err := w.errs[i]; err == nil || errors.Is(err, errNotTried) || repository.LostRace(err) {
			continue // landed, or known not to have landed
		}
		e.mu.Lock()
		v, ok := e.awaiting[a.Stream]
		e.mu.Unlock()
		if !ok {
			continue // the fold has shown it meanwhile
		}
		evs, rerr := e.cfg.Store.ReadStream(ctx, a.Stream, v, 1)
		if rerr == nil || errors.Is(rerr, eventstore.ErrStreamNotFound) {
			if out == nil {
				out = map[string]bool{}
			}
			out[a.Stream] = len(evs) > 0
		}
	}
	return out
}

// settle records the outcome of one op's appends; landed says, after a
// failure, which of its handoffs are known to have landed or not. e.mu must
// be held.
func (e *Executor) settle(ctx context.Context, o *op, w written, landed map[string]bool) {
	if w.errs[o.key] == nil && o.count != nil {
		o.count.Add(int64(max(o.n, 1)))
	}
	if w.err == nil {
		return
	}
	for i, a := range o.appends {
		err := w.errs[i]
		in, known := landed[a.Stream]
		if err == nil || (known && in) {
			continue // it will show up in the fold
		}
		// It will not (or whether it will is unknown: then, as after a lost
		// race, the decision is taken again on the fold, and its ids make a
		// landed twin an idempotent replay).
		notLanded := errors.Is(err, errNotTried) || repository.LostRace(err) || known
		if cat, _ := domain.SplitStream(a.Stream); o.takeBack && !notLanded && cat == domain.StreamWorker {
			// A lost verdict that may have landed, unless the fold already
			// shows the version it would have reached (it dropped awaiting's
			// entry then): another event holds that version, so the
			// verdict, fenced on the one before, cannot land any more. A
			// doubt kept then would only clear at the worker's next event,
			// which an idle worker never writes: it would be handed nothing
			// ever again.
			if v, ok := e.awaiting[a.Stream]; ok {
				e.doubted[a.Stream] = v
			}
		}
		delete(e.awaiting, a.Stream)
		if notLanded {
			delete(e.handing, a.Stream) // it did not land
		}
	}
	if w.errs[0] == nil {
		// A single-stream op cut short after its fence: the fold shows what
		// is missing, and the next cycles complete it.
		if repository.LostRace(w.err) {
			e.Stats.Conflicts.Add(1)
		}
		if ctx.Err() == nil {
			e.log.Info("an op's appends after its fence did not all land; the log says what is missing", "op", o.what, "err", w.err)
		}
		return
	}
	err := w.err
	if repository.LostRace(err) {
		e.Stats.Conflicts.Add(1)
		if o.takeBack {
			// A worker (or another executor) wrote first: the log has
			// decided, and the next cycle decides on what it says.
			e.log.Info("lost a race for a take-back; the log decided otherwise", "op", o.what, "err", err)
		} else {
			e.log.Debug("lost a race, deciding again", "op", o.what, "err", err)
		}
		return
	}
	if ctx.Err() == nil {
		e.log.Warn("append failed; the next cycle decides again", "op", o.what, "err", err)
	}
}

// crashAfter passes the crash points of a committed op (see crashpoint).
func crashAfter(o *op) {
	crashpoint.Hit(crashpoint.ExecutorAppended)
	switch {
	case o.grants:
		crashpoint.Hit(crashpoint.ExecutorGranted)
	case o.takeBack:
		crashpoint.Hit(crashpoint.ExecutorTakenBack)
	}
}
