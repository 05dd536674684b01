package domain

import (
	"encoding/hex"
	"fmt"
)

// Hash is a link of the log's hash chain: a SHA-256 digest that covers one
// event and, through the hash before it, every event before it (see
// eventstore.NextHash). The zero Hash is the chain's start, before position 0,
// and what an event carries when its store keeps no chain.
type Hash [32]byte

// IsZero reports whether h is the zero Hash.
func (h Hash) IsZero() bool { return h == Hash{} }

// String is h in lower-case hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText encodes h as 64 lower-case hex digits.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes 64 hex digits.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 2*len(h) {
		return fmt.Errorf("a hash is %d hex digits, got %d", 2*len(h), len(b))
	}
	if _, err := hex.Decode(h[:], b); err != nil {
		return fmt.Errorf("a hash is hex digits: %w", err)
	}
	return nil
}

// ParseHash decodes 64 hex digits.
func ParseHash(s string) (Hash, error) {
	var h Hash
	err := h.UnmarshalText([]byte(s))
	return h, err
}
