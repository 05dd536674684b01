package chaincheck_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/chaincheck"
)

// chained returns n events at positions first.. with their chain hashes
// from prev.
func chained(n int, first uint64, prev domain.Hash) []domain.Envelope {
	out := make([]domain.Envelope, n)
	t0 := time.Date(2026, 11, 26, 9, 0, 0, 0, time.UTC)
	for i := range out {
		e := domain.Envelope{
			Stream: fmt.Sprintf("execution-%d", i%7), Version: uint64(i / 7), Position: first + uint64(i),
			ID: uuid.New(), Type: "test.event", Time: t0.Add(time.Duration(i) * time.Millisecond),
			Owner: domain.OwnerExecutor, Data: json.RawMessage(fmt.Sprintf(`{"i":%d}`, i)),
		}
		e.Hash = eventstore.NextHash(prev, &e)
		prev = e.Hash
		out[i] = e
	}
	return out
}

// slice is a Reader over events as given (in the order given, which a
// damaged store may not keep).
type slice []domain.Envelope

func (s slice) ReadAll(_ context.Context, from uint64, limit int) ([]domain.Envelope, error) {
	for i := range s {
		if s[i].Position >= from {
			return s[i:min(len(s), i+limit)], nil
		}
	}
	return nil, nil
}

func digestAt(evs []domain.Envelope, p uint64) chaincheck.Digest {
	for _, e := range evs {
		if e.Position == p {
			return chaincheck.Digest{Position: p, Hash: e.Hash}
		}
	}
	panic("no such position")
}

// Each damage is reported as the right kind at the first position that
// does not match; the intact log passes with its digest.
func TestCheckNamesTheFirstPositionThatDoesNotMatch(t *testing.T) {
	t.Parallel()
	good := chained(10000, 0, domain.Hash{})
	last := digestAt(good, 9999)
	sum, err := chaincheck.Check(context.Background(), slice(good), chaincheck.Options{Stored: true, Dense: true, Digests: []chaincheck.Digest{last}}, nil)
	if err != nil {
		t.Fatalf("the intact log: %v", err)
	}
	if sum.Events != 10000 || sum.Head != 10000 || sum.Last != last || sum.Digests != 1 {
		t.Fatalf("summary %+v", sum)
	}
	clone := func() []domain.Envelope { return append([]domain.Envelope(nil), good...) }
	cases := []struct {
		name   string
		damage func() []domain.Envelope
		kind   chaincheck.Kind
		at     uint64
	}{
		{"a byte of data", func() []domain.Envelope {
			evs := clone()
			evs[5000].Data = json.RawMessage(`{"i":5001}`)
			return evs
		}, chaincheck.HashMismatch, 5000},
		{"a stored hash", func() []domain.Envelope {
			evs := clone()
			evs[7].Hash[3] ^= 1
			return evs
		}, chaincheck.HashMismatch, 7},
		{"dropped", func() []domain.Envelope {
			evs := clone()
			return append(evs[:4096:4096], evs[4097:]...) // at a page boundary
		}, chaincheck.Missing, 4096},
		{"the first dropped", func() []domain.Envelope { return clone()[1:] }, chaincheck.Missing, 0},
		{"the last dropped", func() []domain.Envelope { return clone()[:9999] }, chaincheck.Truncated, 9999},
		{"reordered", func() []domain.Envelope {
			evs := clone()
			evs[300], evs[301] = evs[301], evs[300]
			return evs
		}, chaincheck.OutOfOrder, 300},
		{"repeated", func() []domain.Envelope {
			evs := clone()
			return append(evs[:301:301], evs[300:]...)
		}, chaincheck.OutOfOrder, 301},
		{"dropped, renumbered and rehashed after", func() []domain.Envelope {
			evs := append(clone()[:600:600], chained(9400, 600, good[599].Hash)...) // a rewritten history as long as the old
			return evs
		}, chaincheck.DigestMismatch, 9999},
		{"truncated", func() []domain.Envelope { return clone()[:5000] }, chaincheck.Truncated, 9999},
		{"no hashes", func() []domain.Envelope {
			evs := clone()
			evs[0].Hash = domain.Hash{}
			return evs
		}, chaincheck.HashMismatch, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			_, err := chaincheck.Check(context.Background(), slice(c.damage()),
				chaincheck.Options{Stored: true, Dense: true, Digests: []chaincheck.Digest{last}}, nil)
			var m *chaincheck.Mismatch
			if !errors.As(err, &m) || m.Kind != c.kind || m.Position != c.at {
				t.Fatalf("Check = %v, want %s at position %d", err, c.kind, c.at)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("position %d", c.at)) {
				t.Fatalf("the message %q does not name position %d", err, c.at)
			}
		})
	}
}

// A digest taken earlier (a prefix of today's log) passes; a wrong one
// fails at its position; one past the end fails as Truncated; one below
// the first event given cannot be checked.
func TestDigests(t *testing.T) {
	t.Parallel()
	evs := chained(100, 0, domain.Hash{})
	early := digestAt(evs, 41)
	wrong := early
	wrong.Hash[0] ^= 1
	check := func(o chaincheck.Options, evs []domain.Envelope) error {
		_, err := chaincheck.Check(context.Background(), slice(evs), o, nil)
		return err
	}
	if err := check(chaincheck.Options{Stored: true, Dense: true, Digests: []chaincheck.Digest{early}}, evs); err != nil {
		t.Fatalf("an earlier digest: %v", err)
	}
	// A store that keeps no chain: the chain is computed, the digest checks it.
	bare := append([]domain.Envelope(nil), evs...)
	for i := range bare {
		bare[i].Hash = domain.Hash{}
	}
	if err := check(chaincheck.Options{Digests: []chaincheck.Digest{early}}, bare); err != nil {
		t.Fatalf("an earlier digest, no stored hashes: %v", err)
	}
	bare[3].Data = json.RawMessage(`{"i":-3}`)
	var m *chaincheck.Mismatch
	if err := check(chaincheck.Options{Digests: []chaincheck.Digest{early}}, bare); !errors.As(err, &m) || m.Kind != chaincheck.DigestMismatch || m.Position != 41 {
		t.Fatalf("a change before the digest, no stored hashes: %v", err)
	}
	if err := check(chaincheck.Options{Stored: true, Dense: true, Digests: []chaincheck.Digest{wrong}}, evs); !errors.As(err, &m) || m.Kind != chaincheck.DigestMismatch || m.Position != 41 {
		t.Fatalf("a wrong digest: %v", err)
	}
	if err := check(chaincheck.Options{Stored: true, Dense: true, Digests: []chaincheck.Digest{{Position: 100}}}, evs); !errors.As(err, &m) || m.Kind != chaincheck.Truncated {
		t.Fatalf("a digest past the end: %v", err)
	}
	// A trimmed live log: the chain starts from the hash before its first event.
	live := evs[50:]
	if err := check(chaincheck.Options{First: 50, Prev: evs[49].Hash, Stored: true, Dense: true, Digests: []chaincheck.Digest{digestAt(evs, 99)}}, live); err != nil {
		t.Fatalf("a trimmed log: %v", err)
	}
	if err := check(chaincheck.Options{First: 50, Prev: evs[48].Hash, Stored: true, Dense: true}, live); !errors.As(err, &m) || m.Position != 50 {
		t.Fatalf("a trimmed log from the wrong hash: %v", err)
	}
	if err := check(chaincheck.Options{First: 50, Prev: evs[49].Hash, Stored: true, Dense: true, Digests: []chaincheck.Digest{early}}, live); !errors.Is(err, chaincheck.ErrUnverifiable) {
		t.Fatalf("a digest below the live log: %v", err)
	}
	// Positions that are not dense (KurrentDB): gaps are no finding.
	sparse := chained(3, 0, domain.Hash{})
	sparse[1].Position, sparse[2].Position = 10, 20
	sparse[1].Hash = eventstore.NextHash(sparse[0].Hash, &sparse[1])
	sparse[2].Hash = eventstore.NextHash(sparse[1].Hash, &sparse[2])
	if err := check(chaincheck.Options{Digests: []chaincheck.Digest{{Position: 20, Hash: sparse[2].Hash}}}, sparse); err != nil {
		t.Fatalf("sparse positions: %v", err)
	}
	if err := check(chaincheck.Options{Digests: []chaincheck.Digest{{Position: 15, Hash: sparse[2].Hash}}}, sparse); !errors.As(err, &m) || m.Position != 15 {
		t.Fatalf("a digest at a position the sparse log lacks: %v", err)
	}
}

func TestParseDigest(t *testing.T) {
	t.Parallel()
	d := chaincheck.Digest{Position: 42, Hash: domain.Hash{1, 2, 31: 3}}
	got, err := chaincheck.ParseDigest(d.String())
	if err != nil || got != d {
		t.Fatalf("ParseDigest(%q) = %v, %v", d, got, err)
	}
	for _, bad := range []string{"", "42", "x:" + d.Hash.String(), "42:abc", "-1:" + d.Hash.String()} {
		if _, err := chaincheck.ParseDigest(bad); err == nil {
			t.Errorf("ParseDigest(%q) passed", bad)
		}
	}
}
