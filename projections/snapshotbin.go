package projections

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/turnstile/turnstile/domain"
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

// chunkSize is about how large the pieces of a chunked encoding are: a
// reader then never holds more than one piece of a large snapshot.
const chunkSize = 1 << 20

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
	given := false
	return rs.decodeChunks(func() ([]byte, error) {
		if given {
			return nil, errors.New("truncated")
		}
		given = true
		return data, nil
	})
}

// encodeChunks writes MarshalBinary's layout in pieces of about 1 MiB, cut
// between records, calling emit with each (emit may keep a piece only until
// it returns).
func (rs ExecutionRecords) encodeChunks(emit func([]byte) error) error {
	b := make([]byte, 0, min(chunkSize+4096, 16+len(rs.ids)*64))
	b = append(b, recordsFormat)
	b = binary.AppendUvarint(b, uint64(len(rs.ids)))
	for i, id := range rs.ids {
		r := &rs.recs[i]
		if r.final != nil {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = appendString(b, id)
		if r.final != nil {
			b = appendString(b, string(r.final))
		}
		b = appendString(b, r.action)
		b = appendString(b, r.parent)
		b = append(b, byte(r.status))
		b = binary.AppendUvarint(b, r.pos)
		if len(b) >= chunkSize && i < len(rs.ids)-1 {
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
	r := binReader{next: next}
	r.refill()
	if f := r.byte(); f != recordsFormat && r.err == nil {
		return fmt.Errorf("execution records in layout %d, this binary reads %d", f, recordsFormat)
	}
	n := r.uvarint()
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
	for i := uint64(0); i < n && r.err == nil; i++ {
		r.refill()
		var rec execRecord
		final := r.byte()
		id := string(r.field())
		if final == 1 {
			rec.final = append([]byte{}, r.field()...)
		} else if final != 0 {
			r.err = fmt.Errorf("record %d: flags %d", i, final)
		}
		rec.action = intern(r.field())
		rec.parent = intern(r.field())
		rec.status = statusCode(r.byte())
		if int(rec.status) >= len(domain.AllStatuses) && r.err == nil {
			r.err = fmt.Errorf("record %d: unknown state %d", i, rec.status)
		}
		rec.seq, rec.pos = int(i), r.uvarint()
		ids, recs = append(ids, id), append(recs, rec)
	}
	if r.err == nil && r.off != len(r.b) {
		r.err = fmt.Errorf("%d bytes after the records", len(r.b)-r.off)
	}
	if r.err != nil {
		return fmt.Errorf("decode execution records: %w", r.err)
	}
	*rs = ExecutionRecords{ids: ids, recs: recs}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// binReader reads a binary layout, from pieces that next gives when the
// current one is used up (refill, called between elements); its first error
// sticks and later reads return zero values.
type binReader struct {
	b    []byte
	off  int
	err  error
	next func() ([]byte, error)
}

// refill takes the next piece if the current one is used up.
func (r *binReader) refill() {
	if r.err != nil || r.off < len(r.b) {
		return
	}
	b, err := r.next()
	if err != nil {
		r.err = err
		return
	}
	r.b, r.off = b, 0
}

func (r *binReader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("truncated at byte %d reading %s", r.off, what)
	}
}

func (r *binReader) byte() byte {
	if r.err != nil || r.off >= len(r.b) {
		r.fail("a byte")
		return 0
	}
	r.off++
	return r.b[r.off-1]
}

func (r *binReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("a number")
		return 0
	}
	r.off += n
	return v
}

// field reads what appendString wrote; the bytes are the data's own.
func (r *binReader) field() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("bytes")
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}
