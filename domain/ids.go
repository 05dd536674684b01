package domain

import (
	"crypto/sha1"

	"github.com/google/uuid"
)

// LocalEventID returns id made local in time: when stream is an execution's
// stream and the execution's id is a UUIDv7 (as the ids turnstile gives
// executions are), its first 48 bits become that id's timestamp (the
// request's millisecond) and its version nibble 8 (RFC 9562's custom
// layout); otherwise id comes back unchanged. The other 74 bits stay as
// id had them, so a derived id stays derived: the same inputs give the
// same id.
//
// Why: the events of an execution are written within moments of its
// request, and with ids that sort by that time an index on event ids
// (PostgreSQL's UNIQUE (id)) takes them near its right edge, on a few hot
// pages, instead of on a random page each; that insert was a third of the
// database's work per event (measured 2026-11-21; CHANGELOG.md, the figures of that wave).
func LocalEventID(id uuid.UUID, stream string) uuid.UUID {
	ts, ok := executionTime(stream)
	if !ok {
		return id
	}
	copy(id[:6], ts[:])
	id[6] = id[6]&0x0f | 0x80
	return id
}

// executionTime returns the 48-bit timestamp of the UUIDv7 that names the
// execution stream stream ("execution-0190b2c4-5e6f-7…").
func executionTime(stream string) (ts [6]byte, ok bool) {
	const prefix = StreamExecution + "-"
	if len(stream) != len(prefix)+36 || stream[:len(prefix)] != prefix {
		return ts, false
	}
	x := stream[len(prefix):]
	if x[8] != '-' || x[13] != '-' || x[14] != '7' {
		return ts, false
	}
	hex := x[:8] + x[9:13]
	for i := range ts {
		hi, ok1 := fromHex(hex[2*i])
		lo, ok2 := fromHex(hex[2*i+1])
		if !ok1 || !ok2 {
			return ts, false
		}
		ts[i] = hi<<4 | lo
	}
	return ts, true
}

func fromHex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// DeriveID returns the name-based UUID (version 5, SHA-1) of name in
// space: the same id as uuid.NewSHA1, without its allocations (ids are
// derived for every event the executor and the workers write).
func DeriveID(space uuid.UUID, name []byte) uuid.UUID {
	var buf [160]byte
	sum := sha1.Sum(append(append(buf[:0], space[:]...), name...))
	var id uuid.UUID
	copy(id[:], sum[:len(id)])
	id[6] = id[6]&0x0f | 0x50 // version 5
	id[8] = id[8]&0x3f | 0x80 // RFC 4122 variant
	return id
}
