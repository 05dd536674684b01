// Package chaincheck checks the log's hash chain (eventstore.NextHash) over
// any events in position order: a store's live log, an archive, or both
// handed over one after the other. It recomputes every event's hash from
// the hash before the first, compares it with the hash the event carries
// (when its store keeps the chain), checks digests published earlier, and
// names the first position that does not match.
//
// It promises: an event changed, dropped, added or moved is reported at the
// first position where the log differs from the chain (or, for a store that
// keeps no chain, at the first digest the change precedes); a log that
// passes continues every digest given, so a digest published earlier proves
// that no event up to its position changed since.
package chaincheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Digest is a link of the chain published at some time: the hash of the
// event at Position. Its text form is "POSITION:HASH" (GET /api/v1/log
// publishes it as JSON).
type Digest struct {
	Position uint64      `json:"position"`
	Hash     domain.Hash `json:"hash"`
}

// String is "POSITION:HASH".
func (d Digest) String() string { return fmt.Sprintf("%d:%s", d.Position, d.Hash) }

// ParseDigest reads "POSITION:HASH" (64 hex digits).
func ParseDigest(s string) (Digest, error) {
	p, h, ok := strings.Cut(s, ":")
	if !ok {
		return Digest{}, fmt.Errorf("digest %q: want POSITION:HASH", s)
	}
	pos, err := strconv.ParseUint(p, 10, 64)
	if err != nil {
		return Digest{}, fmt.Errorf("digest %q: the position is not a number", s)
	}
	hash, err := domain.ParseHash(h)
	if err != nil {
		return Digest{}, fmt.Errorf("digest %q: %w", s, err)
	}
	return Digest{Position: pos, Hash: hash}, nil
}

// Kind says what does not match.
type Kind string

// The kinds of Mismatch.
const (
	// HashMismatch: the event carries a hash that is not the one the chain
	// gives (it, or an event before it, was changed, or it is missing one).
	HashMismatch Kind = "hash mismatch"
	// Missing: the position is not in the log; later ones are.
	Missing Kind = "position missing"
	// OutOfOrder: the position comes after a later one, or again.
	OutOfOrder Kind = "out of order"
	// DigestMismatch: the chain at the digest's position is not the digest.
	DigestMismatch Kind = "digest mismatch"
	// Truncated: the log ends before the digest's position.
	Truncated Kind = "log ends before the digest"
)

// Mismatch is what Checker reports: the first position that does not match
// and why. Errors that are not a *Mismatch are failures to read.
type Mismatch struct {
	Position uint64
	Kind     Kind
	Detail   string
}

func (m *Mismatch) Error() string {
	return fmt.Sprintf("position %d: %s: %s", m.Position, m.Kind, m.Detail)
}

// ErrUnverifiable is returned (wrapped) for a digest that the events given
// cannot check: its position precedes the first of them (an archived part of
// the log that was not given).
var ErrUnverifiable = errors.New("the digest cannot be checked against these events")

// Options says where the chain starts and what to check.
type Options struct {
	// First is the position of the first event, and Prev the chain hash
	// before it (the zero Hash before position 0). A trimmed live log
	// starts where eventstore.Trimmer's Start says.
	First uint64
	Prev  domain.Hash
	// Stored: the events carry their hashes (eventstore.KeepsChain); each
	// one is compared. Without it the chain is only computed, and digests
	// are what it is checked against.
	Stored bool
	// Dense: positions are consecutive (embedded, postgres, memory), so a
	// gap is a missing event. Otherwise they need only increase.
	Dense bool
	// Digests published earlier, each checked when its position passes.
	Digests []Digest
}

// Summary is what a check that passed saw.
type Summary struct {
	First   uint64 // the position of the first event checked (Options.First)
	Events  uint64 // how many events were checked
	Head    uint64 // the position after the last event checked (First if none)
	Last    Digest // the last event's digest; zero Position and Hash if none
	Digests int    // how many digests were checked
}

// Checker checks events handed to it in position order. Its zero value is
// not usable: call New.
type Checker struct {
	o       Options
	c       eventstore.Chainer
	prev    domain.Hash
	next    uint64 // the position expected next (Dense), or the least allowed
	events  uint64
	last    Digest
	digests []Digest // not yet reached, by position
	checked int
	// A gap seen (Dense): the position expected and the one found instead,
	// kept until the next event says whether the missing one was moved.
	gap             bool
	gapWant, gapGot uint64
	failed          error
}

// New returns a Checker for o. It fails with ErrUnverifiable for a digest
// below o.First.
func New(o Options) (*Checker, error) {
	ds := append([]Digest(nil), o.Digests...)
	for _, d := range ds {
		if d.Position < o.First {
			return nil, fmt.Errorf("digest %s: position %d precedes the first event given (%d): %w", d, d.Position, o.First, ErrUnverifiable)
		}
	}
	slices.SortFunc(ds, func(a, b Digest) int { return cmp.Compare(a.Position, b.Position) })
	return &Checker{o: o, prev: o.Prev, next: o.First, digests: ds}, nil
}

// Add checks the next events. It returns the first *Mismatch, and keeps
// returning it.
func (k *Checker) Add(evs []domain.Envelope) error {
	if k.failed != nil {
		return k.failed
	}
	for i := range evs {
		if err := k.add(&evs[i]); err != nil {
			k.failed = err
			return err
		}
	}
	return nil
}

func (k *Checker) add(e *domain.Envelope) error {
	p := e.Position
	if k.gap {
		if p < k.gapGot { // the missing position turns up late
			return &Mismatch{Position: k.gapWant, Kind: OutOfOrder,
				Detail: fmt.Sprintf("position %d comes after position %d", p, k.gapGot)}
		}
		return k.missing()
	}
	switch {
	case p < k.next && k.events == 0:
		return &Mismatch{Position: k.next, Kind: OutOfOrder,
			Detail: fmt.Sprintf("the events start at position %d", p)}
	case p < k.next:
		return &Mismatch{Position: k.next, Kind: OutOfOrder,
			Detail: fmt.Sprintf("position %d comes after position %d", p, k.last.Position)}
	case p > k.next && k.o.Dense:
		k.gap, k.gapWant, k.gapGot = true, k.next, p
		return nil
	}
	if len(k.digests) > 0 && k.digests[0].Position < p { // not Dense: a position the log does not have
		return &Mismatch{Position: k.digests[0].Position, Kind: DigestMismatch,
			Detail: fmt.Sprintf("the log has no event at the digest's position (the next is %d)", p)}
	}
	h := k.c.Next(k.prev, e)
	if k.o.Stored && e.Hash != h {
		what := fmt.Sprintf("the event carries %s, the chain gives %s", e.Hash, h)
		if e.Hash.IsZero() {
			what = fmt.Sprintf("the event carries no hash, the chain gives %s", h)
		}
		return &Mismatch{Position: p, Kind: HashMismatch, Detail: what + " (it, or an event before it, was changed)"}
	}
	for len(k.digests) > 0 && k.digests[0].Position == p {
		if d := k.digests[0]; d.Hash != h {
			return &Mismatch{Position: p, Kind: DigestMismatch,
				Detail: fmt.Sprintf("the chain gives %s, the digest says %s (an event up to this position was changed, dropped, added or moved since the digest was taken)", h, d.Hash)}
		}
		k.digests = k.digests[1:]
		k.checked++
	}
	k.prev, k.next = h, p+1
	k.events++
	k.last = Digest{Position: p, Hash: h}
	return nil
}

func (k *Checker) missing() *Mismatch {
	return &Mismatch{Position: k.gapWant, Kind: Missing,
		Detail: fmt.Sprintf("the log goes on at position %d", k.gapGot)}
}

// End says the events are all given. It returns what the check saw, or the
// first *Mismatch: also a gap at the end (Dense) and a digest past the last
// event (Truncated).
func (k *Checker) End() (Summary, error) {
	if k.failed == nil && k.gap {
		k.failed = k.missing()
	}
	if k.failed == nil && len(k.digests) > 0 {
		d := k.digests[0]
		k.failed = &Mismatch{Position: d.Position, Kind: Truncated,
			Detail: fmt.Sprintf("the log ends at position %d (%d events checked)", k.next, k.events)}
		if k.events == 0 {
			k.failed.(*Mismatch).Detail = fmt.Sprintf("no event at or after position %d", k.o.First)
		}
	}
	if k.failed != nil {
		return Summary{}, k.failed
	}
	return Summary{First: k.o.First, Events: k.events, Head: k.next, Last: k.last, Digests: k.checked}, nil
}

// Reader reads events in position order from a position on: an
// eventstore.Store does.
type Reader interface {
	ReadAll(ctx context.Context, from uint64, limit int) ([]domain.Envelope, error)
}

// pageSize is how many events Check reads at a time.
const pageSize = 4096

// Check reads r from o.First to its end and checks every event (see
// Checker); progress, if not nil, is called after each page with the
// events checked so far.
func Check(ctx context.Context, r Reader, o Options, progress func(events uint64)) (Summary, error) {
	k, err := New(o)
	if err != nil {
		return Summary{}, err
	}
	from := o.First
	for {
		page, err := r.ReadAll(ctx, from, pageSize)
		if err != nil {
			return Summary{}, fmt.Errorf("reading the log from position %d: %w", from, err)
		}
		if len(page) == 0 {
			return k.End()
		}
		if err := k.Add(page); err != nil {
			return Summary{}, err
		}
		if progress != nil {
			progress(k.events)
		}
		from = max(from, page[len(page)-1].Position) + 1
	}
}
