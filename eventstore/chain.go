package eventstore

import (
	"crypto/sha256"
	"encoding/binary"
	"hash"

	"github.com/turnstile/turnstile/domain"
)

// The hash chain. Every event's Hash is SHA-256 over the hash of the event
// before it (the zero Hash before position 0) and the event's canonical
// encoding:
//
//	"turnstile-chain-1"          domain separation, 17 bytes
//	prev                         32 bytes
//	position, version            8 bytes each, big-endian
//	id                           16 bytes
//	time                         8 bytes, microseconds since the Unix epoch, signed
//	schema version               8 bytes, signed
//	stream, type, owner, correlation id, causation id, writer, data, metadata
//	                             each as a 4-byte big-endian length and its bytes
//
// Data and metadata count as their bytes: nil and empty hash alike. So a
// chain hash at position p covers every event up to p, and a digest
// (position, hash) published once lets anyone prove later that no event up to
// that position was changed, dropped, added or reordered.

const chainDomain = "turnstile-chain-1"

// Chainer computes chain hashes with one reused SHA-256 state. The zero
// Chainer is ready; one Chainer is not safe for concurrent use.
type Chainer struct {
	h   hash.Hash
	buf [8]byte
	sum [sha256.Size]byte
}

// Next returns the hash of e chained after prev.
func (c *Chainer) Next(prev domain.Hash, e *domain.Envelope) domain.Hash {
	if c.h == nil {
		c.h = sha256.New()
	}
	h := c.h
	h.Reset()
	h.Write([]byte(chainDomain))
	h.Write(prev[:])
	c.u64(e.Position)
	c.u64(e.Version)
	h.Write(e.ID[:])
	c.u64(uint64(e.Time.UnixMicro()))
	c.u64(uint64(int64(e.SchemaVersion)))
	c.str(e.Stream)
	c.str(e.Type)
	c.str(string(e.Owner))
	c.str(e.CorrelationID)
	c.str(e.CausationID)
	c.str(e.Writer)
	c.bytes(e.Data)
	c.bytes(e.Metadata)
	var out domain.Hash
	copy(out[:], h.Sum(c.sum[:0]))
	return out
}

func (c *Chainer) u64(v uint64) {
	binary.BigEndian.PutUint64(c.buf[:], v)
	c.h.Write(c.buf[:8])
}

func (c *Chainer) str(s string) {
	binary.BigEndian.PutUint32(c.buf[:4], uint32(len(s)))
	c.h.Write(c.buf[:4])
	if s != "" {
		c.h.Write([]byte(s))
	}
}

func (c *Chainer) bytes(b []byte) {
	binary.BigEndian.PutUint32(c.buf[:4], uint32(len(b)))
	c.h.Write(c.buf[:4])
	c.h.Write(b)
}

// NextHash returns the hash of e chained after prev (see Chainer).
func NextHash(prev domain.Hash, e *domain.Envelope) domain.Hash {
	var c Chainer
	return c.Next(prev, e)
}

// ChainReporter is implemented by a Store that can say whether it keeps the
// hash chain (fills every event's Hash at commit). A Store that does not
// implement it keeps none.
type ChainReporter interface {
	KeepsChain() bool
}

// KeepsChain reports whether s fills every event's Hash.
func KeepsChain(s Store) bool {
	r, ok := s.(ChainReporter)
	return ok && r.KeepsChain()
}
