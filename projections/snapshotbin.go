package projections

import (
	"encoding/binary"
	"fmt"
	"slices"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/internal/binlayout"
)

// ExecutionRecords is the read model's executions in a snapshot, in request
// order, laid out as the read model keeps them: there may be millions, and
// a restore then makes no other copy of each (their records are allocated
// together, and stay so while any of them is kept). It encodes itself in a
// compact binary layout (MarshalBinary). NewExecutionRecords and List
// convert from and to plain ExecutionRecordSnapshots.
type ExecutionRecords struct {
	ids   []string
	recs  []execRecord // recs[i] is ids[i]'s; seq is i
	taken bool         // a Views uses recs: copy them for another
}

// NewExecutionRecords returns the records rs. Each status must be one the
// domain knows.
func NewExecutionRecords(rs ...ExecutionRecordSnapshot) ExecutionRecords {
	out := ExecutionRecords{ids: make([]string, len(rs)), recs: make([]execRecord, len(rs))}
	for i, r := range rs {
		out.ids[i] = r.ID
		out.recs[i] = execRecord{final: r.Final, action: r.Action, parent: r.Parent, status: mustCode(r.Status), seq: i, pos: r.Position}
	}
	return out
}

// Len returns how many records there are.
func (rs *ExecutionRecords) Len() int { return len(rs.ids) }

// List returns the records as ExecutionRecordSnapshots.
func (rs *ExecutionRecords) List() []ExecutionRecordSnapshot {
	out := make([]ExecutionRecordSnapshot, len(rs.ids))
	for i, id := range rs.ids {
		r := &rs.recs[i]
		out[i] = ExecutionRecordSnapshot{ID: id, Final: r.final, Action: r.action, Parent: r.parent, Status: r.status.status(), Position: r.pos}
	}
	return out
}

// take returns the records for a Views to keep: the first caller gets them,
// any later one a copy.
func (rs *ExecutionRecords) take() []execRecord {
	if rs.taken {
		return slices.Clone(rs.recs)
	}
	rs.taken = true
	return rs.recs
}

// recordsFormat is the first byte of ExecutionRecords' binary form. Change it
// with the layout: a snapshot in another layout is then refused, not misread.
const recordsFormat = 1

// MarshalBinary lays the records out as a format byte, their count, then per
// record: whether it has a final state, its id, its final state (if it has
// one), action, parent, status (its index in domain.AllStatuses) and
// position. Lengths and integers are varints.
func (rs ExecutionRecords) MarshalBinary() ([]byte, error) {
	var out []byte
	err := rs.encodeChunks(func(p []byte) error { out = append(out, p...); return nil })
	return out, err
}

// UnmarshalBinary reads what MarshalBinary wrote.
func (rs *ExecutionRecords) UnmarshalBinary(data []byte) error {
	return rs.decodeChunks(binlayout.OnePiece(data))
}

// encodeChunks writes MarshalBinary's layout in pieces of about 1 MiB, cut
// between records, calling emit with each (emit may keep a piece only until
// it returns).
func (rs ExecutionRecords) encodeChunks(emit func([]byte) error) error {
	b := make([]byte, 0, min(binlayout.ChunkSize+4096, 16+len(rs.ids)*64))
	b = append(b, recordsFormat)
	b = binary.AppendUvarint(b, uint64(len(rs.ids)))
	for i, id := range rs.ids {
		r := &rs.recs[i]
		if r.final != nil {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = binlayout.AppendString(b, id)
		if r.final != nil {
			b = binlayout.AppendString(b, string(r.final))
		}
		b = binlayout.AppendString(b, r.action)
		b = binlayout.AppendString(b, r.parent)
		b = append(b, byte(r.status))
		b = binary.AppendUvarint(b, r.pos)
		if len(b) >= binlayout.ChunkSize && i < len(rs.ids)-1 {
			if err := emit(b); err != nil {
				return err
			}
			b = b[:0]
		}
	}
	return emit(b)
}

// decodeChunks reads what encodeChunks wrote, taking its pieces from next
// (whose pieces it does not keep). Actions and parents repeat across records
// and are decoded into one string each.
func (rs *ExecutionRecords) decodeChunks(next func() ([]byte, error)) error {
	r := binlayout.NewReader(next)
	if f := r.Byte(); f != recordsFormat && r.Err() == nil {
		return fmt.Errorf("execution records in layout %d, this binary reads %d", f, recordsFormat)
	}
	n := r.Uvarint()
	shared := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := shared[string(b)]; ok { // (no allocation to look up)
			return s
		}
		s := string(b)
		shared[s] = s
		return s
	}
	// (A count read from a file bounds nothing: the lists grow as records come.)
	ids, recs := make([]string, 0, min(n, 1<<20)), make([]execRecord, 0, min(n, 1<<20))
	for i := uint64(0); i < n && r.Err() == nil; i++ {
		r.Refill()
		var rec execRecord
		final := r.Byte()
		id := string(r.Field())
		if final == 1 {
			rec.final = append([]byte{}, r.Field()...)
		} else if final != 0 {
			r.Fail(fmt.Errorf("record %d: flags %d", i, final))
		}
		rec.action = intern(r.Field())
		rec.parent = intern(r.Field())
		rec.status = statusCode(r.Byte())
		if int(rec.status) >= len(domain.AllStatuses) && r.Err() == nil {
			r.Fail(fmt.Errorf("record %d: unknown state %d", i, rec.status))
		}
		rec.seq, rec.pos = int(i), r.Uvarint()
		ids, recs = append(ids, id), append(recs, rec)
	}
	if r.Err() == nil && r.Left() != 0 {
		r.Fail(fmt.Errorf("%d bytes after the records", r.Left()))
	}
	if r.Err() != nil {
		return fmt.Errorf("decode execution records: %w", r.Err())
	}
	*rs = ExecutionRecords{ids: ids, recs: recs}
	return nil
}
