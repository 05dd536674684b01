// The loop and its fold: the executor follows the log from where its fold
// stopped (retrying failed reads), folds every batch before deciding,
// decides only while active and caught up, and checks the time-based rules
// on each tick. The loop goroutine owns the fold; Fold lets a simulation
// drive it step by step instead.

package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/backoff"
	"github.com/turnstile/turnstile/internal/gopool"
)

// retryPause is how long the executor waits before reading the log again
// after a failed read: it doubles from the first value up to the second
// (equal jitter), from the first again once a read made progress.
var retryPause = [2]time.Duration{10 * time.Millisecond, time.Second}

func retryBackoff() backoff.Backoff {
	return backoff.Backoff{Min: retryPause[0], Max: retryPause[1], Jitter: backoff.Equal}
}

// readHead reads the log's head, trying again after a failure until ctx
// ends or the store is closed.
func (e *Executor) readHead(ctx context.Context) (uint64, error) {
	pause := retryBackoff()
	for {
		head, err := e.cfg.Store.Head(ctx)
		if err == nil {
			return head, nil
		}
		if ctx.Err() != nil || errors.Is(err, eventstore.ErrClosed) {
			return 0, fmt.Errorf("executor: read head: %w", err)
		}
		wait := pause.Next()
		e.log.Warn("cannot read the log's head; trying again", "err", err, "in", wait)
		if !backoff.Sleep(ctx, wait) {
			return 0, ctx.Err()
		}
	}
}

// follow subscribes to the log from position from and sends what it delivers
// to batches; when the subscription fails, it subscribes again from the
// position after the last batch sent. It returns when ctx ends or the store
// is closed.
func (e *Executor) follow(ctx context.Context, from uint64, batches chan<- []domain.Envelope) error {
	next, pause := from, retryBackoff()
	for {
		err := e.cfg.Store.Subscribe(ctx, next, eventstore.Filter{}, func(b []domain.Envelope) error {
			select {
			case batches <- b: // the handler's to keep (eventstore.Store)
				next = b[len(b)-1].Position + 1
				pause.Reset()
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		if ctx.Err() != nil || errors.Is(err, eventstore.ErrClosed) {
			return err
		}
		wait := pause.Next()
		e.log.Warn("log subscription failed; subscribing again", "from", next, "err", err, "in", wait)
		if !backoff.Sleep(ctx, wait) {
			return ctx.Err()
		}
	}
}

func (e *Executor) loop(ctx context.Context, heads <-chan uint64, batches <-chan []domain.Envelope, subErr <-chan error) {
	defer close(e.done)
	var head uint64
	select {
	case <-ctx.Done():
		return
	case err := <-subErr:
		if ctx.Err() == nil {
			e.log.Error("cannot read the log", "err", err)
		}
		return
	case head = <-heads:
	}
	tick := time.NewTicker(e.cfg.Tick)
	defer tick.Stop()
	// Decisions are appended in the background while the loop goes on
	// folding and deciding (see runAsync); before it returns, the loop waits
	// for the appends under way and records their outcomes.
	stopWriters := make(chan struct{})
	fl := &flight{results: make(chan opResult, 64), writers: gopool.New(time.Second, stopWriters)}
	defer fl.writers.Wait()
	defer close(stopWriters) // after land: no append is under way any more
	defer e.land(ctx, fl)
	if head == 0 {
		e.markReady() // an empty log: no worker of a previous run to lose
	} else if e.active.Load() && e.state.Next >= head && e.becomeReady(ctx, head) { // a snapshot at the log's end
		e.run(ctx, e.Decide(true))
	}
	for {
		timed := false
		select {
		case <-ctx.Done():
			return
		case err := <-subErr:
			if ctx.Err() == nil {
				e.log.Error("log subscription ended", "err", err)
			}
			return
		case r := <-fl.results:
			if !e.settled(ctx, fl, r) {
				continue // it landed: the fold shows it, and the next batch decides
			}
		case b := <-batches:
			e.apply(b)
		drain:
			for len(batches) > 0 { // fold everything already delivered before deciding
				select {
				case b := <-batches:
					e.apply(b)
				default:
					break drain
				}
			}
		case <-tick.C:
			timed = true
		case <-e.wakeup:
			timed = true // a new active executor checks the time-based rules at once
		}
		if e.cfg.Snapshots != nil && e.state.Next-e.snapshotAt >= e.cfg.SnapshotEvery && !e.saving.Load() {
			e.saveSnapshot()
		}
		e.checkpointSettled()
		if timed && e.active.Load() && e.ready.Load() && e.checkpointDue() {
			e.writeCheckpoint(ctx)
		}
		if !e.active.Load() {
			if !e.ready.Load() && e.state.Next >= head {
				e.markReady()
				e.log.Info("caught up with the log (standby: folding, not deciding)", "position", e.state.Next)
			}
			continue
		}
		if !e.ready.Load() && !e.becomeReady(ctx, head) {
			continue
		}
		if len(fl.cycles) >= maxCyclesInFlight {
			if timed {
				fl.timedWaiting = true // decide it once a cycle has landed
			}
			continue
		}
		timed = timed || fl.timedWaiting
		fl.timedWaiting = false
		e.runAsync(ctx, fl, e.Decide(timed), timed)
	}
}

// becomeReady reports whether the fold has reached head, the log's end at
// Start. The first time it has, it declares the previous run's workers lost
// before saying it is ready, so that no worker of this run, which registers
// after Ready, is taken for one of them.
func (e *Executor) becomeReady(ctx context.Context, head uint64) bool {
	if e.state.Next < head {
		return false
	}
	e.run(ctx, e.DecideAtStart())
	e.markReady()
	e.log.Info("caught up with the log", "position", e.state.Next)
	return true
}

// Fold folds a batch of the log's events, in position order, into the
// executor's state. Start's loop calls it with what its subscription
// delivers; a simulation that drives the executor step by step (without
// Start) calls it itself. Events already folded are skipped.
func (e *Executor) Fold(batch []domain.Envelope) { e.apply(batch) }

func (e *Executor) apply(batch []domain.Envelope) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state.Ended == nil {
		e.state.Ended = e.traceEnded // trace.go; set here, as a snapshot replaces the state
	}
	for i := range batch {
		env := &batch[i]
		if err := e.state.Apply(env); err != nil {
			// An event this build cannot read is skipped, loudly: the audit reports it.
			e.log.Error("cannot fold event", "position", env.Position, "stream", env.Stream, "err", err)
			e.state.Next = env.Position + 1
			e.Stats.Undecodable.Add(1)
		}
		if v, ok := e.awaiting[env.Stream]; ok && env.Version >= v {
			delete(e.awaiting, env.Stream)
		}
		if h, ok := e.handing[env.Stream]; ok && env.Version >= h.version {
			delete(e.handing, env.Stream)
		}
		if v, ok := e.doubted[env.Stream]; ok && env.Version >= v {
			delete(e.doubted, env.Stream)
		}
		e.noteCheckpoint(env)
	}
	if n := len(batch); n > 0 && batch[n-1].Position+1 == e.state.Next {
		e.lastID = batch[n-1].ID.String()
		e.cp.lastTime, e.cp.lastHash = batch[n-1].Time, batch[n-1].Hash
		if e.cp.firstTime.IsZero() {
			e.cp.firstTime = batch[0].Time
		}
	}
	e.position.Store(e.state.Next)
}
