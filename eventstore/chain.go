package eventstore

import (
	"crypto/sha256"
	"encoding/binary"

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

// Chainer computes chain hashes with one reused buffer: the event's whole
// encoding is laid out in it and hashed in one call, so Next allocates
// nothing once the buffer has grown to the events' size (a buffer grown
// past chainKeep by a large event is given back). The zero Chainer is
// ready; one Chainer is not safe for concurrent use.
type Chainer struct {
	buf []byte
}

// chainKeep bounds the buffer a Chainer keeps between events.
const chainKeep = 64 << 10

// Next returns the hash of e chained after prev.
func (c *Chainer) Next(prev domain.Hash, e *domain.Envelope) domain.Hash {
	b := append(c.buf[:0], chainDomain...)
	b = append(b, prev[:]...)
	b = binary.BigEndian.AppendUint64(b, e.Position)
	b = binary.BigEndian.AppendUint64(b, e.Version)
	b = append(b, e.ID[:]...)
	b = binary.BigEndian.AppendUint64(b, uint64(e.Time.UnixMicro()))
	b = binary.BigEndian.AppendUint64(b, uint64(int64(e.SchemaVersion)))
	b = appendStr(b, e.Stream)
	b = appendStr(b, e.Type)
	b = appendStr(b, string(e.Owner))
	b = appendStr(b, e.CorrelationID)
	b = appendStr(b, e.CausationID)
	b = appendStr(b, e.Writer)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Data)))
	b = append(b, e.Data...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Metadata)))
	b = append(b, e.Metadata...)
	out := domain.Hash(sha256.Sum256(b))
	if cap(b) > chainKeep {
		b = nil
	}
	c.buf = b
	return out
}

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
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
