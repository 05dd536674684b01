package postgres

import (
	"encoding/binary"
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// The hash chain (eventstore.NextHash) is kept in the events table's hash
// column and computed by PostgreSQL, in the appending statement, while it
// holds the log_head lock: log_head.hash is the hash of the event at
// log_head.next - 1, so a group chains from it without reading the events
// table, and advances it with next. Computing it in the statement keeps the
// one-round-trip commit: the positions and the commit time are only known
// there. Any number of Stores on one schema chain correctly, because every
// appending transaction holds the lock. The committer encodes what it knows
// of each event (chainTail), the statement adds the position, version, id
// and time; migration 2's chain_event encodes a stored row whole, for the
// rows of an older log. Both encode an event exactly as eventstore.Chainer
// does; the conformance suite checks every hash a read returns against
// eventstore.NextHash.

var _ eventstore.ChainReporter = (*Store)(nil)

// KeepsChain implements eventstore.ChainReporter: every event's Hash is
// filled, by every read path and the in-memory feed alike.
func (s *Store) KeepsChain() bool { return true }

// chainFuncs are the schema's chain functions, spelled out with the schema.
type chainFuncs struct {
	chain string // the aggregate chain(prev, enc), for the careful insert
	run   string // chain_run(prev, first, at, versions, ids, tails), for the one-round-trip append (migration 4)
}

// microsNow is the SQL for the statement's time as the chain encodes it:
// microseconds since the Unix epoch, 8 bytes big-endian.
const microsNow = `int8send((extract(epoch FROM statement_timestamp()) * 1000000)::bigint)`

// over returns the window expression that chains the rows of alias (with
// the columns position, version, id and tail, see chainTail) after prev, in
// the order of orderBy, at the time at (microsNow, evaluated once).
func (f chainFuncs) over(prev, at, orderBy, alias string) string {
	return fmt.Sprintf(`%s(%s, int8send(%s.position) || int8send(%s.version) || uuid_send(%s.id) || %s || %s.tail) OVER (ORDER BY %s)`,
		f.chain, prev, alias, alias, alias, at, alias, orderBy)
}

// chainTail is the part of e's canonical encoding (eventstore.Chainer) that
// follows its time: the schema version, the strings and the payload. The
// committer computes it, so that the appending statement, which holds the
// log_head lock, only adds the position, version, id and time and hashes.
func chainTail(e *domain.Envelope) []byte {
	n := 8 + 6*4 + len(e.Stream) + len(e.Type) + len(e.Owner) + len(e.CorrelationID) + len(e.CausationID) + len(e.Writer) +
		2*4 + len(e.Data) + len(e.Metadata)
	b := make([]byte, 0, n)
	b = binary.BigEndian.AppendUint64(b, uint64(int64(e.SchemaVersion)))
	for _, s := range []string{e.Stream, e.Type, string(e.Owner), e.CorrelationID, e.CausationID, e.Writer} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		b = append(b, s...)
	}
	for _, p := range [][]byte{e.Data, e.Metadata} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(p)))
		b = append(b, p...)
	}
	return b
}

// setHashes gives rows the hashes the appending statement computed, one per
// row in position order.
func setHashes(rows []domain.Envelope, hashes [][]byte) error {
	if len(hashes) != len(rows) {
		return fmt.Errorf("postgres: the append returned %d hashes for %d events", len(hashes), len(rows))
	}
	for i, h := range hashes {
		if len(h) != len(domain.Hash{}) {
			return fmt.Errorf("postgres: the append returned a hash of %d bytes", len(h))
		}
		copy(rows[i].Hash[:], h)
	}
	return nil
}
