package embedded

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// envelopeOf rebuilds the writer's fields of a decoded record.
func envelopeOf(r *rec) domain.Envelope {
	t := string(r.text)
	e := domain.Envelope{
		ID:            r.id,
		Type:          string(r.typ),
		SchemaVersion: int(r.schema),
		Owner:         r.owner,
		CorrelationID: t[:r.corrLen],
		CausationID:   t[r.corrLen : r.corrLen+r.causLen],
		Writer:        t[r.corrLen+r.causLen:],
	}
	if r.flags&flagDataNil == 0 {
		e.Data = json.RawMessage(bytes.Clone(r.payload[:r.dataLen]))
	}
	if r.flags&flagMetaNil == 0 {
		e.Metadata = json.RawMessage(bytes.Clone(r.payload[r.dataLen:]))
	}
	return e
}

// FuzzParseRecord: any bytes either fail to parse or parse to a record that
// encodes back to exactly the same bytes; nothing panics.
func FuzzParseRecord(f *testing.F) {
	e := richEvent(10)
	f.Add(appendRecord(nil, "execution-1", &e, 7, 3, 1234567, 2, true, &domain.Hash{1, 2, 3}))
	e2 := richEvent(7)
	f.Add(appendRecord(nil, "q", &e2, 0, 0, -5, 0, false, &domain.Hash{}))
	f.Add([]byte{})
	f.Add(make([]byte, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r rec
		n, st := parseRecord(b, &r)
		if st != recOK {
			return
		}
		e := envelopeOf(&r)
		again := appendRecord(nil, string(r.stream), &e, r.position, r.version, r.micros, r.inWrite, r.flags&flagCommit != 0, &r.hash)
		if !bytes.Equal(again, b[:n]) {
			t.Fatalf("record does not re-encode to the same bytes:\n in %x\nout %x", b[:n], again)
		}
	})
}

// FuzzRecordRoundTrip: every event the input limits allow survives encoding
// and decoding unchanged.
func FuzzRecordRoundTrip(f *testing.F) {
	f.Add("execution-1", "execution.scheduled", "corr", "cause", "worker-1", []byte(`{"a":1}`), []byte(`{}`), int64(1), uint8(1), true, false)
	f.Add("q", "t", "", "", "", []byte{}, []byte(nil), int64(-7), uint8(2), false, true)
	f.Fuzz(func(t *testing.T, stream, typ, corr, cause, writer string, data, meta []byte, schema int64, owner uint8, nilData, commit bool) {
		e := domain.Envelope{
			ID:            uuid.New(),
			Type:          typ,
			SchemaVersion: int(schema),
			Owner:         []domain.Owner{domain.OwnerAPI, domain.OwnerExecutor, domain.OwnerWorker}[owner%3],
			CorrelationID: corr,
			CausationID:   cause,
			Writer:        writer,
			Data:          data,
			Metadata:      meta,
		}
		if nilData {
			e.Data = nil
		}
		if eventstore.ValidateStream(stream) != nil || eventstore.ValidateEvent(&e) != nil {
			return
		}
		hash := domain.Hash{byte(len(data)), 7, 31: 9}
		b := appendRecord([]byte("prefix"), stream, &e, 42, 5, -99, 3, commit, &hash)[6:]
		var r rec
		n, st := parseRecord(append(b, "trailing"...), &r)
		if st != recOK || n != len(b) {
			t.Fatalf("parse: %v, %d of %d bytes", st, n, len(b))
		}
		got := envelopeOf(&r)
		if string(r.stream) != stream || r.hash != hash || r.position != 42 || r.version != 5 || r.micros != -99 || r.inWrite != 3 || (r.flags&flagCommit != 0) != commit {
			t.Fatalf("store fields differ: %+v", r)
		}
		if got.ID != e.ID || got.Type != e.Type || got.SchemaVersion != e.SchemaVersion || got.Owner != e.Owner ||
			got.CorrelationID != e.CorrelationID || got.CausationID != e.CausationID || got.Writer != e.Writer ||
			!bytes.Equal(got.Data, e.Data) || (got.Data == nil) != (e.Data == nil) ||
			!bytes.Equal(got.Metadata, e.Metadata) || (got.Metadata == nil) != (e.Metadata == nil) {
			t.Fatalf("round trip:\n got %+v\nwant %+v", got, e)
		}
		// Any single damaged byte is caught.
		for i := range b {
			var r2 rec
			if _, st := parseRecord(flip(b, int64(i)), &r2); st == recOK {
				t.Fatalf("flipping byte %d went unnoticed", i)
			}
		}
	})
}
