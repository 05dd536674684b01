package postgres

import (
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
// appending transaction holds the lock. The SQL functions (migration 2)
// encode an event exactly as eventstore.Chainer does; the conformance suite
// checks every hash a read returns against eventstore.NextHash.

var _ eventstore.ChainReporter = (*Store)(nil)

// KeepsChain implements eventstore.ChainReporter: every event's Hash is
// filled, by every read path and the in-memory feed alike.
func (s *Store) KeepsChain() bool { return true }

// chainFuncs are the schema's chain functions, spelled out with the schema.
type chainFuncs struct {
	chain string // the aggregate chain(prev, enc)
	event string // chain_event(…): an event's canonical encoding
}

// over returns the window expression that chains the rows of alias (with
// the events' column names, position included) after prev, in the order of
// orderBy; the rows' time is the statement's (statement_timestamp()).
func (f chainFuncs) over(prev, orderBy, alias string) string {
	return fmt.Sprintf(`%s(%s, %s(%s.position, %s.version, %s.id, statement_timestamp(), %s.schema_version, %s.stream, %s.type,
		%s.owner, %s.correlation_id, %s.causation_id, %s.writer, %s.data, %s.metadata)) OVER (ORDER BY %s)`,
		f.chain, prev, f.event, alias, alias, alias, alias, alias, alias, alias, alias, alias, alias, alias, alias, orderBy)
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
