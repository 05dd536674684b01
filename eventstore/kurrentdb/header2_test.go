package kurrentdb

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// synthesised is user metadata as a server hands back a record appended by
// AppendRecords with properties meta: the same keys with string values, plus
// the server's own.
func synthesised(t *testing.T, meta []byte, typ string) []byte {
	t.Helper()
	var props map[string]string
	if err := json.Unmarshal(meta, &props); err != nil {
		t.Fatalf("header %s is not a JSON object of strings (AppendRecords refuses it): %v", meta, err)
	}
	props["$schema.name"] = typ
	props["$schema.format"] = "Json"
	b, err := json.Marshal(props)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestStringHeaderRoundTrip: an envelope written with the string-only header
// (the multi-stream path's) and read back as a server synthesises it comes
// back whole, whatever its metadata, and the header is one AppendRecords
// accepts.
func TestStringHeaderRoundTrip(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 3, 4, 5, 6, 7, 800, time.UTC)
	full := domain.Envelope{
		ID: uuid.New(), Type: "execution.scheduled", SchemaVersion: 7, Owner: domain.OwnerWorker,
		CorrelationID: "corr-Ünïcødé-1", CausationID: "cause-2", Writer: "worker-42",
		Data:     json.RawMessage(`{"z": 1}`),
		Metadata: json.RawMessage(`{ "trace" : "t-1", "html": "<&>" }`),
	}
	for _, c := range []struct {
		name   string
		mutate func(e *domain.Envelope)
	}{
		{"every field", func(*domain.Envelope) {}},
		{"minimal", func(e *domain.Envelope) {
			*e = domain.Envelope{ID: e.ID, Type: "t", Owner: domain.OwnerAPI, Data: json.RawMessage(`{}`)}
		}},
		{"metadata with space around", func(e *domain.Envelope) { e.Metadata = json.RawMessage(" {\"a\":1}\n") }},
		{"metadata not JSON", func(e *domain.Envelope) { e.Metadata = json.RawMessage(`{"a":`) }},
		{"metadata not UTF-8", func(e *domain.Envelope) { e.Metadata = []byte{'"', 0xc3, 0x28, '"'} }},
		{"metadata a string", func(e *domain.Envelope) { e.Metadata = json.RawMessage(`"x\u0041"`) }},
		{"metadata null", func(e *domain.Envelope) { e.Metadata = json.RawMessage(`null`) }},
		{"negative schema version", func(e *domain.Envelope) { e.SchemaVersion = -3 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			in := full
			in.Metadata = bytes.Clone(full.Metadata)
			c.mutate(&in)
			d := toEventData(&in)
			d.Metadata = synthesised(t, encodeStringHeader(&in), in.Type)
			got, err := fromRecorded(recorded(d, "ns-execution-1", 4, 1788, created), "ns-")
			if err != nil {
				t.Fatalf("fromRecorded: %v", err)
			}
			want := in
			want.Stream, want.Version, want.Position, want.Time = "execution-1", 4, 3576, created
			if err := sameEnvelope(&want, &got); err != nil {
				t.Fatal(err)
			}
			if !eventstore.SameContent(&in, &got) {
				t.Error("SameContent says the round trip changed the event")
			}
		})
	}
}

// TestStringHeaderBroken: a string-only header that says it is turnstile's
// but whose values cannot be read fails the read rather than giving an
// envelope with a made-up schema version or metadata.
func TestStringHeaderBroken(t *testing.T) {
	t.Parallel()
	for _, meta := range []string{
		`{"turnstile":"2","schemaVersion":"seven","owner":"api"}`,
		`{"turnstile":"2","schemaVersion":"1","owner":"api","metadataBase64":"!!"}`,
	} {
		d := toEventData(&domain.Envelope{ID: uuid.New(), Type: "t", Data: json.RawMessage(`{}`)})
		d.Metadata = []byte(meta)
		if _, err := fromRecorded(recorded(d, "s", 0, 10, time.Now()), ""); err == nil {
			t.Errorf("fromRecorded of header %s: no error", meta)
		}
	}
}
