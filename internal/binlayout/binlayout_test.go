package binlayout

import (
	"bytes"
	"testing"
)

// TestRoundTripAcrossPieces: what the Append functions write reads back
// with the Reader, across piece boundaries between elements, and a piece
// cut short fails with an error that sticks.
func TestRoundTripAcrossPieces(t *testing.T) {
	var p1, p2 []byte
	p1 = AppendString(p1, "héllo")
	p1 = AppendBytes(p1, nil)
	p1 = AppendBytes(p1, []byte{})
	p2 = AppendBytes(p2, []byte("data"))
	p2 = append(p2, 7)
	pieces := [][]byte{p1, p2}
	r := NewReader(func() ([]byte, error) {
		if len(pieces) == 0 {
			return nil, bytes.ErrTooLarge
		}
		p := pieces[0]
		pieces = pieces[1:]
		return p, nil
	})
	if s := r.String(); s != "héllo" {
		t.Fatalf("String %q", s)
	}
	if b := r.Bytes(); b != nil {
		t.Fatalf("nil came back as %q", b)
	}
	if b := r.Bytes(); b == nil || len(b) != 0 {
		t.Fatalf("empty came back as %v", b)
	}
	if r.Left() != 0 {
		t.Fatalf("%d bytes left in the first piece", r.Left())
	}
	r.Refill()
	if b := r.Bytes(); string(b) != "data" {
		t.Fatalf("Bytes %q", b)
	}
	if c := r.Byte(); c != 7 || r.Err() != nil {
		t.Fatalf("Byte %d, %v", c, r.Err())
	}
	r.Byte() // past the end
	if r.Err() == nil {
		t.Fatal("reading past the end gave no error")
	}
	first := r.Err()
	r.Fail(bytes.ErrTooLarge)
	if r.Uvarint() != 0 || r.Err() != first {
		t.Fatal("the first error did not stick")
	}
	cut := NewReader(OnePiece(AppendString(nil, "abcdef")[:3]))
	if cut.String() != "" || cut.Err() == nil {
		t.Fatal("a string cut short was read")
	}
}
