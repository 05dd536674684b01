// Package archiver moves the live log's old prefix to the archive
// (docs/archive.md): it finds the newest checkpoint
// whose checkpoint.written is at least Config.After old by log time (the
// time of the log's newest event), writes the archive segments that cover
// the log up to the checkpoint's position C, and then trims the live log at
// C, keeping the streams that may still get appends (the checkpoint's keep
// and its live executions).
//
// The order is what makes a crash harmless: the trim comes only after the
// archive holds every event before C (durably: the archive fsyncs its
// segments and their directory), and both steps are idempotent. A crash
// after the segments are written and before the trim leaves events in both
// places; the next round finds the archive already at C (Archive.End) and
// only trims. A crash inside the trim leaves the live log starting where it
// started or at C (eventstore.Trimmer's promise); either way the next round
// finishes it. Nothing is lost (the trim never passes the archive's end)
// and nothing is counted twice (a history reads the archive up to the live
// log's start, then the live log).
//
// It runs only while Config.Active says so: beside the executor, with its
// lease, so that one process archives a shared log.
package archiver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/startstop"
	"github.com/turnstile/turnstile/projections"
	"github.com/turnstile/turnstile/services/crashpoint"
)

// Archive is where the log's prefix goes: eventstore/archive's *Archive.
type Archive interface {
	// Write appends the events at positions [from, to) of src to the
	// archive, durably; from must be the archive's End.
	Write(ctx context.Context, src eventstore.Store, from, to uint64) error
	// End is the position after the archive's last event (0: empty).
	End() uint64
}

// Config configures an Archiver. Zero fields take the defaults below.
type Config struct {
	Store   eventstore.Store // must implement eventstore.Trimmer
	Archive Archive
	// After is how old (by log time) a checkpoint must be before the log
	// before it is archived. Required.
	After time.Duration
	// Every is how often the archiver looks. Default min(After/4, 1 min),
	// at least 10 ms.
	Every time.Duration
	// Active reports whether this process may archive now (it holds the
	// executor's lease); nil: always.
	Active func() bool
	// Trimmed, if set, is called with the live log's new start after each
	// trim (the read model forgets what ended before it).
	Trimmed func(start uint64)
	Logger  *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Every == 0 {
		c.Every = max(min(c.After/4, time.Minute), 10*time.Millisecond)
	}
	if c.Active == nil {
		c.Active = func() bool { return true }
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	switch {
	case c.Store == nil:
		return errors.New("archiver: Store is required")
	case c.Archive == nil:
		return errors.New("archiver: Archive is required")
	case c.After <= 0:
		return fmt.Errorf("archiver: After %s must be positive", c.After)
	case c.Every < 0:
		return fmt.Errorf("archiver: Every %s is negative", c.Every)
	}
	if _, ok := c.Store.(eventstore.Trimmer); !ok {
		return fmt.Errorf("archiver: the store (%T) cannot trim its live log", c.Store)
	}
	return nil
}

// Archiver archives and trims the live log, one round every Config.Every.
type Archiver struct {
	*startstop.Func
	cfg  Config
	trim eventstore.Trimmer
	log  *slog.Logger

	// Rounds counts the rounds that trimmed the live log; Archived the
	// events moved to the archive.
	Rounds, Archived atomic.Int64
}

// New returns an archiver; it does nothing until Start.
func New(cfg Config) (*Archiver, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	a := &Archiver{cfg: cfg, trim: cfg.Store.(eventstore.Trimmer), log: cfg.Logger.With("component", "archiver")}
	a.Func = startstop.NewFunc(a.run)
	return a, nil
}

func (a *Archiver) run(ctx context.Context, started func()) error {
	started()
	t := time.NewTicker(a.cfg.Every)
	defer t.Stop()
	for {
		if a.cfg.Active() {
			if _, err := a.Round(ctx); err != nil && ctx.Err() == nil {
				a.log.Warn("archiving failed; trying again later", "err", err, "in", a.cfg.Every)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Round archives and trims once: up to the newest checkpoint at least
// Config.After old, if it is past the live log's start. It returns the
// live log's start afterwards.
func (a *Archiver) Round(ctx context.Context) (uint64, error) {
	first, _, err := a.trim.Start(ctx)
	if err != nil {
		return 0, fmt.Errorf("archiver: live log start: %w", err)
	}
	cp, ok, err := a.due(ctx, first)
	if err != nil || !ok {
		return first, err
	}
	c := cp.Position
	end := a.cfg.Archive.End()
	if end < first {
		return first, fmt.Errorf("archiver: the archive ends at %d and the live log starts at %d: positions %d..%d are in neither (wrong --archive directory?)", end, first, end, first-1)
	}
	if end < c {
		start := time.Now()
		if err := a.cfg.Archive.Write(ctx, a.cfg.Store, end, c); err != nil {
			return first, fmt.Errorf("archiver: archive %d..%d: %w", end, c-1, err)
		}
		if got := a.cfg.Archive.End(); got < c {
			return first, fmt.Errorf("archiver: the archive ends at %d after writing up to %d", got, c)
		}
		a.Archived.Add(int64(c - end))
		a.log.Info("archived", "from", end, "to", c, "events", c-end, "took", time.Since(start))
	}
	crashpoint.Hit(crashpoint.ArchiverWritten)
	sn, err := projections.ReadCheckpoint(ctx, a.cfg.Store, cp.CheckpointWritten)
	if err != nil {
		return first, fmt.Errorf("archiver: the checkpoint at %d: %w", c, err)
	}
	keep := append(slices.Clone(cp.Keep), projections.LiveStreams(sn)...)
	start := time.Now()
	if err := a.trim.Trim(ctx, c, keep); err != nil {
		return first, fmt.Errorf("archiver: trim at %d: %w", c, err)
	}
	crashpoint.Hit(crashpoint.ArchiverTrimmed)
	a.Rounds.Add(1)
	if a.cfg.Trimmed != nil {
		a.cfg.Trimmed(c)
	}
	a.log.Info("trimmed the live log", "start", c, "was", first, "kept_streams", len(keep), "took", time.Since(start))
	return c, nil
}

// due returns the newest checkpoint past the live log's start whose marker
// is at least Config.After older than the log's newest event.
func (a *Archiver) due(ctx context.Context, first uint64) (projections.Checkpoint, bool, error) {
	cps, err := projections.CheckpointMarkers(ctx, a.cfg.Store)
	if err != nil || len(cps) == 0 {
		return projections.Checkpoint{}, false, err
	}
	newest, err := a.newestTime(ctx)
	if err != nil {
		return projections.Checkpoint{}, false, err
	}
	for i := len(cps) - 1; i >= 0; i-- {
		cp := cps[i]
		if cp.Position <= first {
			break
		}
		if newest.Sub(cp.Time) >= a.cfg.After {
			return cp, true, nil
		}
	}
	return projections.Checkpoint{}, false, nil
}

// newestTime is the log time of the log's newest event.
func (a *Archiver) newestTime(ctx context.Context) (time.Time, error) {
	head, err := a.cfg.Store.Head(ctx)
	if err != nil || head == 0 {
		return time.Time{}, err
	}
	evs, err := a.cfg.Store.ReadAll(ctx, head-1, 1)
	if err != nil {
		return time.Time{}, fmt.Errorf("archiver: read the newest event: %w", err)
	}
	if len(evs) == 0 {
		return time.Time{}, fmt.Errorf("archiver: no event at %d below the head %d", head-1, head)
	}
	return evs[0].Time, nil
}
