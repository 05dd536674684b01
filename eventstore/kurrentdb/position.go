package kurrentdb

import (
	"fmt"
	"math"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"
)

// Positions
//
// KurrentDB orders $all by (commit, prepare) positions, byte offsets into its
// transaction log. For every event appended through the gRPC API (the only way
// this backend writes), the two are equal and belong to that event alone, so
// the commit position identifies an event. A turnstile position is twice the
// commit position:
//
//	2c   the event at commit position c;
//	2c+1 just after it, before the next event.
//
// Readers resume with last.Position+1 and Head returns "after the last event";
// both are odd, and mean "strictly after commit position c", which the server
// can serve from c itself. The server can only start a read at a record
// boundary, never at an arbitrary offset, so a turnstile position handed out
// by the store, or one plus it, or Head, is always a safe place to start. An
// arbitrary number may not be: an even number that is not an event's position
// inside the log makes the server fail the read. Positions are strictly
// increasing in commit order but far from dense: consecutive events are at
// least twice their record size apart.

// noCommit is the commit position servers report for events read from a
// stream (not from $all) when they do not fill it in (before v22.6).
const noCommit = math.MaxUint64

// maxCommit is the largest commit position a turnstile position can carry.
// Servers use signed 64-bit offsets, so it is never reached.
const maxCommit = math.MaxUint64 >> 1

// positionOf returns the turnstile position of an event at p.
func positionOf(p esdb.Position) (uint64, error) {
	c := p.Commit
	switch {
	case c == noCommit:
		// A stream read on an older server: the prepare position is the
		// event's own, and equals its commit position (see above).
		c = p.Prepare
	case c != p.Prepare:
		return 0, fmt.Errorf("%w: commit %d, prepare %d", errTransaction, p.Commit, p.Prepare)
	}
	if c > maxCommit {
		return 0, fmt.Errorf("kurrentdb: commit position %d out of range", c)
	}
	return c << 1, nil
}

// commitOf returns the commit position a turnstile position names (for an
// odd one, the event just before it).
func commitOf(pos uint64) uint64 { return pos >> 1 }

// readFrom returns where a $all read or subscription starts for a turnstile
// position from. A read from it is inclusive and a subscription exclusive;
// either way the caller drops events below from, so both serve from.
func readFrom(from uint64) esdb.AllPosition {
	if from < 2 {
		return esdb.Start{}
	}
	c := commitOf(from)
	return esdb.Position{Commit: c, Prepare: c}
}

// atEvent reports whether from names an event (an even position past the
// start), which a subscription, exclusive of its start, would skip.
func atEvent(from uint64) bool { return from >= 2 && from%2 == 0 }

// after returns the turnstile position just after the event at pos.
func after(pos uint64) uint64 { return pos | 1 }
