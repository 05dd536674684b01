package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/archive"
	"github.com/turnstile/turnstile/eventstore/chaincheck"
)

// archiveVerified is the archive's part of verify's report.
type archiveVerified struct {
	Dir        string      `json:"dir"`
	Segments   int         `json:"segments"`
	First      uint64      `json:"first_position"`
	End        uint64      `json:"end"` // the position after the last archived event
	Events     uint64      `json:"events"`
	Bytes      int64       `json:"bytes"`
	Digests    int         `json:"digests_checked"`
	EventsPerS float64     `json:"events_per_s"`
	Seconds    float64     `json:"seconds"`
	EndHash    string      `json:"end_hash,omitempty"`
	LiveFirst  uint64      `json:"live_first_position"`
	Mismatch   *archiveBad `json:"-"`
}

// archiveBad is a mismatch found in the archive or at its join with the live log.
type archiveBad struct{ m *chaincheck.Mismatch }

// The kinds of mismatch the archive adds to chaincheck's.
const (
	kindArchive chaincheck.Kind = "archive does not verify"
	kindJoin    chaincheck.Kind = "the live log does not continue the archive"
)

// verifyArchive checks the archive in dir (archive.Verify: every segment
// against its index and the chain), the digests that fall in it, and that
// the live log continues it (archive.History.Continues). It returns the
// digests left for the live log, the archive's summary, and a mismatch
// (exit 1) or an error (exit 3 or 2).
func verifyArchive(ctx context.Context, dir string, live eventstore.Store, digests []chaincheck.Digest, stderr io.Writer, quiet bool) ([]chaincheck.Digest, *archiveVerified, *chaincheck.Mismatch, error) {
	a, err := openArchive(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	defer a.Close()
	sum := &archiveVerified{Dir: dir, First: a.First(), End: a.End()}
	progress := func(uint64) {}
	if isTerminal(stderr) && !quiet {
		progress = func(pos uint64) {
			fmt.Fprintf(stderr, "\rverify: archive %d/%d events", pos-sum.First, sum.End-sum.First)
		}
		defer fmt.Fprintln(stderr)
	}
	t0 := time.Now()
	v, err := a.Verify(ctx, progress)
	sum.Seconds = time.Since(t0).Seconds()
	var bad *archive.Mismatch
	if errors.As(err, &bad) {
		return nil, sum, &chaincheck.Mismatch{Position: bad.Position, Kind: kindArchive, Detail: fmt.Sprintf("%s: %s", bad.Segment, bad.Reason)}, nil
	}
	if err != nil {
		return nil, sum, nil, err
	}
	sum.Segments, sum.Events, sum.Bytes = v.Segments, v.Events, v.Bytes
	if v.Segments > 0 {
		sum.EndHash = v.EndHash.String()
	}
	if sum.Seconds > 0 {
		sum.EventsPerS = float64(v.Events) / sum.Seconds
	}
	liveFirst, err := archive.History{Archive: a, Live: live}.Continues(ctx)
	sum.LiveFirst = liveFirst
	if errors.As(err, &bad) {
		return nil, sum, &chaincheck.Mismatch{Position: bad.Position, Kind: kindJoin, Detail: bad.Reason}, nil
	}
	if err != nil {
		return nil, sum, nil, err
	}
	// Digests in the archive are checked against it; the rest are the
	// live log's.
	var rest []chaincheck.Digest
	for _, d := range digests {
		switch {
		case v.Segments == 0 || d.Position >= v.End:
			rest = append(rest, d)
		case d.Position < v.First:
			return nil, sum, nil, fmt.Errorf("digest %s: position %d precedes the archive's first position %d: %w", d, d.Position, v.First, chaincheck.ErrUnverifiable)
		default:
			h, err := a.PrevHash(ctx, d.Position+1)
			if err != nil {
				return nil, sum, nil, err
			}
			if h != d.Hash {
				return nil, sum, &chaincheck.Mismatch{Position: d.Position, Kind: chaincheck.DigestMismatch, Detail: fmt.Sprintf("the archive's chain hash at %d is %s, the digest says %s", d.Position, h, d.Hash)}, nil
			}
			sum.Digests++
		}
	}
	return rest, sum, nil, nil
}

func printArchiveVerified(w io.Writer, a *archiveVerified) {
	if a == nil {
		return
	}
	if a.Segments == 0 {
		fmt.Fprintf(w, "archive:  %s is empty\n", a.Dir)
		return
	}
	fmt.Fprintf(w, "archive:  %d events in %d segments (positions %d to %d, %d bytes), %.0f events/s (%.2f s); every segment matches its index and the chain\n",
		a.Events, a.Segments, a.First, a.End-1, a.Bytes, a.EventsPerS, a.Seconds)
	fmt.Fprintf(w, "join:     the live log starts at %d and continues the archive (chain hash %s at %d)\n", a.LiveFirst, a.EndHash, a.End-1)
	if a.Digests > 0 {
		fmt.Fprintf(w, "digests:  %d in the archive, all match\n", a.Digests)
	}
}
