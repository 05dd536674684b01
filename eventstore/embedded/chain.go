package embedded

import (
	"fmt"
	"unsafe"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// The hash chain in the log (format 2): every record carries its event's
// chain hash (eventstore.NextHash over the hash of the record before it).
// The committer computes it as it encodes a record; recovery checks it for
// every record it reads; readers hand it out as Envelope.Hash.

// KeepsChain reports true: every event this store commits carries its chain
// hash, and every event it reads back has Hash filled.
func (s *Store) KeepsChain() bool { return true }

var _ eventstore.ChainReporter = (*Store)(nil)

// chainHash returns the chain hash of the record r after prev, as the
// committer computed it when it wrote r. It allocates nothing: the envelope
// it hashes borrows r's bytes for the call.
func chainHash(c *eventstore.Chainer, prev domain.Hash, r *rec) domain.Hash {
	e := envelopeView(r)
	return c.Next(prev, &e)
}

// envelopeView returns the event of record r with every string and slice
// borrowing r's bytes: valid only while they do not change, and only for
// reading.
func envelopeView(r *rec) domain.Envelope {
	e := domain.Envelope{
		Stream: borrow(r.stream), Version: r.version, Position: r.position, ID: r.id,
		Type: borrow(r.typ), SchemaVersion: int(r.schema), Time: timeOf(r.micros), Owner: r.owner,
		CorrelationID: borrow(r.text[:r.corrLen]),
		CausationID:   borrow(r.text[r.corrLen : r.corrLen+r.causLen]),
		Writer:        borrow(r.text[r.corrLen+r.causLen:]),
	}
	if r.flags&flagDataNil == 0 {
		e.Data = r.payload[:r.dataLen:r.dataLen]
	}
	if r.flags&flagMetaNil == 0 {
		e.Metadata = r.payload[r.dataLen:]
	}
	return e
}

// borrow returns b as a string without copying it. The string is valid only
// while b's bytes do not change: chainHash uses it for the duration of one
// hash, which keeps nothing.
func borrow(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// checkChain returns an error wrapping eventstore.ErrCorrupt when the record
// r at offset off does not carry the chain hash that follows prev, and the
// record's hash otherwise.
func checkChain(c *eventstore.Chainer, prev domain.Hash, r *rec, off int64) (domain.Hash, error) {
	want := chainHash(c, prev, r)
	if want != r.hash {
		return want, corruptError(logName, off, fmt.Sprintf(
			"the record of position %d carries chain hash %s where the chain gives %s (its content or an event before it was changed)",
			r.position, r.hash, want))
	}
	return want, nil
}
