package embedded

import (
	"encoding/binary"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// recordLen judges a record's length field by the bounds of the log's
// format: the smallest and largest body of each format are records (the
// largest cut short here), one byte less or more is a bad length. Format
// 1's smallest body is below format 2's, so one set of bounds for both
// would refuse small format-1 records or accept short format-2 ones.
func TestRecordLenPerFormat(t *testing.T) {
	for _, f := range []struct {
		name   string
		v1     bool
		lo, hi int
	}{
		{"format 1", true, minBodyV1, maxBodyV1},
		{"format 2", false, minBody, maxBody},
	} {
		for _, c := range []struct {
			body int
			want recordStatus
		}{
			{f.lo - 1, recBadLen},
			{f.lo, recOK},
			{f.hi, recShort},
			{f.hi + 1, recBadLen},
		} {
			b := make([]byte, prefixSize+min(c.body, f.lo))
			binary.LittleEndian.PutUint32(b, uint32(c.body))
			n, st := recordLen(b, f.v1)
			if st != c.want || st != recBadLen && n != prefixSize+c.body {
				t.Errorf("%s, a body of %d bytes: %d, %v; want %d, %v", f.name, c.body, n, st, prefixSize+c.body, c.want)
			}
		}
	}
	if minBodyV1 >= minBody {
		t.Fatalf("format 1's smallest body (%d) is not below format 2's (%d): the cases above test nothing", minBodyV1, minBody)
	}

	// The smallest event (one-byte stream and type, no data) as format 1
	// writes it: the format-2 encoding without its hash.
	e := domain.Envelope{Stream: "s", Type: "t", Owner: domain.OwnerAPI}
	var zero domain.Hash
	v2 := appendRecord(nil, "s", &e, 0, 0, 0, 0, true, &zero)
	body := append(append([]byte{}, v2[prefixSize:prefixSize+offHash]...), v2[prefixSize+offHash+len(zero):]...)
	v1 := binary.LittleEndian.AppendUint32(nil, uint32(len(body)))
	v1 = binary.LittleEndian.AppendUint32(v1, recordCRC(v1, body))
	v1 = append(v1, body...)
	var r rec
	var scratch []byte
	if n, st := parseRecordV1(v1, &r, &scratch); st != recOK || n != len(v1) || string(r.stream) != "s" || string(r.typ) != "t" {
		t.Fatalf("the smallest format-1 record: %d, %v, stream %q type %q; want %d, ok", n, st, r.stream, r.typ, len(v1))
	}
	if _, st := parseRecord(v1, &r); st == recOK {
		t.Fatal("a format-1 record parsed as format 2")
	}
}
