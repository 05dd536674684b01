package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/chaincheck"
)

// digestFlags collects --digest POSITION:HASH, any number of times.
type digestFlags []chaincheck.Digest

func (d *digestFlags) String() string {
	parts := make([]string, len(*d))
	for i, x := range *d {
		parts[i] = x.String()
	}
	return strings.Join(parts, ",")
}

func (d *digestFlags) Set(s string) error {
	x, err := chaincheck.ParseDigest(s)
	if err != nil {
		return err
	}
	*d = append(*d, x)
	return nil
}

// verifyReport is what verify prints (--json as is).
type verifyReport struct {
	OK         bool                 `json:"ok"`
	KeepsChain bool                 `json:"keeps_chain"`
	First      uint64               `json:"first_position"`
	Events     uint64               `json:"events"`
	Head       uint64               `json:"head"`
	Digest     *chaincheck.Digest   `json:"digest,omitempty"`
	Checked    int                  `json:"digests_checked"`
	EventsPerS float64              `json:"events_per_s"`
	Seconds    float64              `json:"seconds"`
	Mismatch   *chaincheck.Mismatch `json:"mismatch,omitempty"`
	Corrupt    string               `json:"corrupt,omitempty"`
	Archive    *archiveVerified     `json:"archive,omitempty"` // with --archive DIR
}

// cmdVerify checks the hash chain of the live log (DESIGN.md, "The log over
// months"): exit 0 with a summary, 1 naming the first position that does not
// match, 2 bad usage, 3 the store could not be read or a digest cannot be
// checked against it.
func cmdVerify(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("verify", stderr)
	data := fs.String("data", "", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL")
	var digests digestFlags
	fs.Var(&digests, "digest", "a digest published earlier, POSITION:HASH (GET /api/v1/log's digest); repeatable")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	archiveDir := fs.String("archive", "", "archive directory: check every segment against its index and the chain, the digests in it, and that the live log continues it")
	if err := parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
		return 2
	}
	kind, _, err := storeLocation(*storeURL, *data)
	if err != nil {
		fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
		return 2
	}
	rep := &verifyReport{}
	print := func() {
		if *asJSON {
			enc := newJSONEncoder(stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
			return
		}
		printVerify(stdout, rep)
	}
	store, _, err := openStore(*storeURL, *data)
	if errors.Is(err, eventstore.ErrCorrupt) {
		// The embedded store checks every record and its chain hash as it
		// opens: damage is a finding, named by position and offset.
		rep.Corrupt = err.Error()
		print()
		return 1
	}
	if err != nil {
		fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
		if errors.Is(err, eventstore.ErrLocked) {
			fmt.Fprintln(stderr, "turnstile verify: a running server owns the directory: verify a copy of it, or check its GET /api/v1/log digest later")
		}
		return 3
	}
	defer store.Close()
	if *archiveDir != "" {
		rest, sum, m, err := verifyArchive(ctx, *archiveDir, store, digests, stderr, *asJSON)
		rep.Archive = sum
		switch {
		case m != nil:
			rep.Mismatch = m
			print()
			return 1
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
			return 2
		case err != nil:
			fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
			return 3
		}
		digests = rest
	}
	plan, err := liveLogPlan(ctx, store, kind, digests)
	if err != nil {
		fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
		return 3
	}
	rep.KeepsChain, rep.First = plan.o.Stored, plan.o.First
	progress := func(uint64) {}
	if isTerminal(stderr) && !*asJSON {
		head, _ := store.Head(ctx)
		progress = func(n uint64) {
			fmt.Fprintf(stderr, "\rverify: %d/%d events", n, head-plan.o.First)
		}
		defer fmt.Fprintln(stderr)
	}
	t0 := time.Now()
	sum, err := chaincheck.Check(ctx, plan.r, plan.o, progress)
	rep.Seconds = time.Since(t0).Seconds()
	var m *chaincheck.Mismatch
	switch {
	case errors.As(err, &m):
		rep.Mismatch = m
		print()
		return 1
	case errors.Is(err, eventstore.ErrCorrupt):
		rep.Corrupt = err.Error()
		print()
		return 1
	case err != nil:
		fmt.Fprintf(stderr, "turnstile verify: %v\n", err)
		return 3
	}
	rep.OK = true
	rep.Events, rep.Head, rep.Checked = sum.Events, sum.Head, sum.Digests
	if sum.Events > 0 {
		rep.Digest = &sum.Last
	}
	if rep.Seconds > 0 {
		rep.EventsPerS = float64(sum.Events) / rep.Seconds
	}
	print()
	return 0
}

// verifyPlan is what verify reads and from where the chain starts.
type verifyPlan struct {
	r chaincheck.Reader
	o chaincheck.Options
}

// liveLogPlan checks the live log alone: from its start (Trimmer.Start: the
// first live position and the chain hash before it), or from position 0 and
// the zero hash when the store trims nothing. A store that keeps no chain
// (KurrentDB) has its chain computed and checked against the digests only.
//
// With --archive DIR, verifyArchive checks the archive first (every segment
// against its index and the chain, the digests in it, the join with the
// live log), and the live log's check gets the digests after the archive.
func liveLogPlan(ctx context.Context, store eventstore.Store, kind string, digests []chaincheck.Digest) (verifyPlan, error) {
	o := chaincheck.Options{
		Stored:  eventstore.KeepsChain(store),
		Dense:   kind != "kurrentdb", // KurrentDB's $all positions are commit positions, with gaps
		Digests: digests,
	}
	if t, ok := store.(eventstore.Trimmer); ok {
		first, prev, err := t.Start(ctx)
		if err != nil {
			return verifyPlan{}, fmt.Errorf("reading where the live log starts: %w", err)
		}
		o.First, o.Prev = first, prev
	}
	for _, d := range digests {
		if d.Position < o.First {
			return verifyPlan{}, fmt.Errorf("digest %s: position %d is archived (the live log starts at %d): give --archive DIR to check it: %w",
				d, d.Position, o.First, chaincheck.ErrUnverifiable)
		}
	}
	return verifyPlan{r: store, o: o}, nil
}

func printVerify(w io.Writer, rep *verifyReport) {
	if rep.Mismatch == nil && rep.Corrupt == "" {
		printArchiveVerified(w, rep.Archive)
	}
	if rep.Corrupt != "" {
		fmt.Fprintf(w, "result:   CORRUPT: %s\n", rep.Corrupt)
		return
	}
	if m := rep.Mismatch; m != nil {
		fmt.Fprintf(w, "result:   MISMATCH at position %d: %s: %s\n", m.Position, m.Kind, m.Detail)
		return
	}
	fmt.Fprintf(w, "events:   %d (positions %d to %d)\n", rep.Events, rep.First, int64(rep.Head)-1)
	fmt.Fprintf(w, "head:     %d\n", rep.Head)
	if rep.Digest != nil {
		fmt.Fprintf(w, "digest:   %s (keep it: verify --digest %s proves later that nothing up to here changed)\n", rep.Digest, rep.Digest)
	} else {
		fmt.Fprintln(w, "digest:   none (the log is empty)")
	}
	fmt.Fprintf(w, "digests:  %d given, all match\n", rep.Checked)
	fmt.Fprintf(w, "speed:    %.0f events/s (%.2f s)\n", rep.EventsPerS, rep.Seconds)
	if rep.KeepsChain {
		fmt.Fprintln(w, "result:   OK — every event's stored hash chains over the one before it")
	} else {
		fmt.Fprintln(w, "result:   OK — the chain is computed (this store keeps none); only the digests given check it")
	}
}
