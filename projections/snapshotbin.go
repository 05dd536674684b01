package projections

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/turnstile/turnstile/domain"
)

// ExecutionRecords is the read model's executions in a snapshot, in request
// order. It encodes itself in a compact binary layout (see MarshalBinary):
// there may be millions, and gob spends most of a restart on them.
type ExecutionRecords []ExecutionRecordSnapshot

// recordsFormat is the first byte of ExecutionRecords' binary form. Change it
// with the layout: a snapshot in another layout is then refused, not misread.
const recordsFormat = 1

// MarshalBinary lays the records out as a format byte, their count, then per
// record: whether it has a final state, its id, its final state (if it has
// one), action, parent, status and position. Lengths and integers are varints.
func (rs ExecutionRecords) MarshalBinary() ([]byte, error) {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(rs)*64)
	b = append(b, recordsFormat)
	b = binary.AppendUvarint(b, uint64(len(rs)))
	for i := range rs {
		r := &rs[i]
		if r.Final != nil {
			b = append(b, 1)
		} else {
			b = append(b, 0)
		}
		b = appendString(b, r.ID)
		if r.Final != nil {
			b = appendString(b, string(r.Final))
		}
		b = appendString(b, r.Action)
		b = appendString(b, r.Parent)
		b = appendString(b, string(r.Status))
		b = binary.AppendUvarint(b, r.Position)
	}
	return b, nil
}

// UnmarshalBinary reads what MarshalBinary wrote. Actions, parents and
// statuses repeat across records and are decoded into one string each.
func (rs *ExecutionRecords) UnmarshalBinary(data []byte) error {
	r := binReader{b: data}
	if f := r.byte(); f != recordsFormat {
		return fmt.Errorf("execution records in layout %d, this binary reads %d", f, recordsFormat)
	}
	n := r.uvarint()
	if r.err == nil && n > uint64(len(data)) { // every record takes several bytes
		r.err = errors.New("record count beyond the data")
	}
	shared := map[string]string{}
	intern := func(b []byte) string {
		if s, ok := shared[string(b)]; ok { // (no allocation to look up)
			return s
		}
		s := string(b)
		shared[s] = s
		return s
	}
	out := make(ExecutionRecords, n)
	for i := range out {
		if r.err != nil {
			break
		}
		rec := &out[i]
		final := r.byte()
		rec.ID = string(r.field())
		if final == 1 {
			rec.Final = append([]byte{}, r.field()...)
		} else if final != 0 {
			r.err = fmt.Errorf("record %d: flags %d", i, final)
		}
		rec.Action = intern(r.field())
		rec.Parent = intern(r.field())
		rec.Status = domain.Status(intern(r.field()))
		if _, ok := codeOf(rec.Status); !ok && r.err == nil {
			r.err = fmt.Errorf("record %d: unknown state %q", i, rec.Status)
		}
		rec.Position = r.uvarint()
	}
	if r.err == nil && r.off != len(data) {
		r.err = fmt.Errorf("%d bytes after the records", len(data)-r.off)
	}
	if r.err != nil {
		return fmt.Errorf("decode execution records: %w", r.err)
	}
	*rs = out
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// binReader reads a binary layout; its first error sticks and later reads
// return zero values.
type binReader struct {
	b   []byte
	off int
	err error
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
