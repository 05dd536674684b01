// The simulation archives (Config.Archive): at random steps an executor's
// fold is written into the log as a checkpoint (through the faulty log, so
// a checkpoint may be cut short), and the log before a checkpoint is moved
// to the simulation's archive (the events, in order) and trimmed from the
// live log, keeping the streams the checkpoint names and its live
// executions'. Executors that start later start from the newest checkpoint
// the live log holds; the forwarder, finding its position trimmed, resumes
// at the live log's start; clients resend old requests, whose idempotency
// keys the command side finds in the archive once their executions left
// the live log (simHistory). The checker reads the live log as before; at the
// end the whole history (archive + live log) is audited (which checks
// every checkpoint against the fold at its position) and rebuilt.

package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/memstore"
	"github.com/turnstile/turnstile/projections"
)

// checkpoint writes a ready executor's fold into the log.
func (w *world) checkpoint() {
	x := w.pickExec(func(x *simExec) bool { return x.ready })
	if x == nil {
		return
	}
	var sn *projections.StateSnapshot
	x.e.Inspect(func(s *projections.State) { sn = s.Snapshot() })
	if sn.Next == 0 {
		return
	}
	var prev domain.Hash
	if evs, err := w.mem.ReadAll(w.ctx, sn.Next-1, 1); err == nil && len(evs) == 1 {
		prev = evs[0].Hash
	}
	m, err := projections.WriteCheckpoint(w.ctx, w.writeTo, sn, prev, x.name, nil)
	if err == nil {
		w.res.Checkpoints++
	}
	w.tracef("executor %s writes a checkpoint at %d (%d parts): %v", x.name, sn.Next, m.Parts, err)
}

// archive moves the log before the newest checkpoint that every reader has
// passed to the archive, and trims the live log there.
func (w *world) archive() error {
	first, _, err := w.mem.Start(w.ctx)
	if err != nil {
		return err
	}
	cps, err := projections.CheckpointMarkers(w.ctx, w.mem)
	if err != nil {
		return err
	}
	limit := min(w.checker.next, w.views.Next())
	for _, x := range w.execs {
		if x.started {
			limit = min(limit, x.e.Position())
		}
	}
	// (Requests being retried do not hold the trim back: their keys are
	// looked up in the archive, simHistory.)
	var cp *projections.Checkpoint
	for i := len(cps) - 1; i >= 0; i-- {
		if c := cps[i].Position; c > first && c <= limit {
			cp = &cps[i]
			break
		}
	}
	if cp == nil {
		return nil
	}
	sn, err := projections.ReadCheckpoint(w.ctx, w.mem, cp.CheckpointWritten)
	if err != nil {
		return fmt.Errorf("archive: the checkpoint at %d does not read: %w", cp.Position, err)
	}
	evs, err := w.mem.ReadAll(w.ctx, first, int(cp.Position-first))
	if err != nil {
		return err
	}
	if len(evs) == 0 || evs[0].Position != first || evs[len(evs)-1].Position != cp.Position-1 {
		return fmt.Errorf("archive: read %d..%d of the live log, got %d events", first, cp.Position-1, len(evs))
	}
	w.archived = append(w.archived, evs...)
	keep := append(slices.Clone(cp.Keep), projections.LiveStreams(sn)...)
	if err := w.mem.Trim(w.ctx, cp.Position, keep); err != nil {
		return fmt.Errorf("archive: trim at %d: %w", cp.Position, err)
	}
	w.res.Trims++
	w.tracef("archive %d..%d; the live log starts at %d", first, cp.Position-1, cp.Position)
	return nil
}

// startFromCheckpoint starts a new executor on a trimmed log from the
// newest checkpoint there; it reports false when the log cannot be read now.
func (w *world) startFromCheckpoint(x *simExec) (bool, error) {
	first, _, err := w.mem.Start(w.ctx)
	if err != nil || first == 0 {
		return err == nil, err
	}
	sn, m, ok, err := projections.LatestCheckpoint(w.ctx, w.store, first, nil)
	switch {
	case err != nil:
		return false, nil // a read failed: it tries again
	case !ok:
		return false, fmt.Errorf("the live log starts at %d and holds no checkpoint an executor can start from", first)
	}
	x.e.Restore(sn)
	w.tracef("executor %s starts from the checkpoint at %d", x.name, m.Position)
	return true, nil
}

// history returns the archive and the live log as one log.
func (w *world) history() ([]domain.Envelope, error) {
	first, _, err := w.mem.Start(w.ctx)
	if err != nil {
		return nil, err
	}
	live, err := w.mem.ReadAll(w.ctx, first, 1<<30)
	if err != nil {
		return nil, err
	}
	if n := uint64(len(w.archived)); n != first {
		return nil, fmt.Errorf("the archive holds %d events, the live log starts at %d", n, first)
	}
	return append(slices.Clone(w.archived), live...), nil
}

// historyStore returns a store holding evs, the whole history, with their
// positions, times and hashes (for the audit).
func historyStore(ctx context.Context, evs []domain.Envelope) (eventstore.Store, error) {
	var at time.Time
	s := memstore.New(memstore.Options{Clock: func() time.Time { return at }})
	for _, e := range evs {
		at = e.Time
		want, pos := e.Hash, e.Position
		e.Position, e.Version, e.Hash = 0, 0, domain.Hash{}
		r, err := s.Append(ctx, e.Stream, eventstore.Any, e)
		if err != nil {
			return nil, err
		}
		got, err := s.ReadAll(ctx, r.Position, 1)
		if err != nil || len(got) != 1 || r.Position != pos || got[0].Hash != want {
			return nil, fmt.Errorf("the history does not chain at %d as the live log did (%v)", pos, err)
		}
	}
	return s, nil
}

// liveLog is the log the simulated services write to, with the memstore's
// trim (Start, Trim) visible through the faulty wrapper, as a real store's
// is: the command side finds the checkpoint a trimmed stream starts from.
type liveLog struct {
	eventstore.Store
	mem *memstore.Store
}

func (l liveLog) AtomicMultiStream() bool { return eventstore.AtomicMultiStream(l.Store) }

func (l liveLog) Start(ctx context.Context) (uint64, domain.Hash, error) { return l.mem.Start(ctx) }

func (l liveLog) Trim(ctx context.Context, before uint64, keep []string) error {
	return l.mem.Trim(ctx, before, keep)
}

// simHistory is the archive and the live log as the command side reads a
// stream of them (command.Service.History): its archived events, then its
// live ones.
type simHistory struct {
	eventstore.Store // the live log
	w                *world
}

func (h simHistory) ReadStream(ctx context.Context, stream string, from uint64, limit int) ([]domain.Envelope, error) {
	var out []domain.Envelope
	for _, e := range h.w.archived {
		if e.Stream == stream && e.Version >= from {
			out = append(out, e)
		}
	}
	live, err := h.Store.ReadStream(ctx, stream, from, limit)
	switch {
	case errors.Is(err, eventstore.ErrStreamNotFound) && len(out) > 0:
	case err != nil:
		return nil, err
	}
	for _, e := range live {
		if len(out) == 0 || e.Version > out[len(out)-1].Version { // a kept stream reads from its first live event
			out = append(out, e)
		}
	}
	return out[:min(len(out), limit)], nil
}
