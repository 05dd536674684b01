package bus

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// FuzzDecodeEvent feeds any payload to the bus's event decoder: it must not
// panic, must refuse what is not an event, and what it accepts must survive
// encode → decode unchanged (decode(encode(x)) == x).
func FuzzDecodeEvent(f *testing.F) {
	env := domain.Envelope{Stream: "execution-1", Version: 3, Position: 42, ID: uuid.MustParse("5b0c3f4d-8e21-4f57-9a43-6f1f3a522d7e"),
		Type: domain.TypeExecutionScheduled, SchemaVersion: 1, Time: time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC),
		Owner: domain.OwnerExecutor, Writer: "executor", Data: json.RawMessage(`{"worker":"local-1","attempt":1}`)}
	m, err := EncodeEvent(&env)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(m.Payload))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"stream":"s","type":"t","data":null}`))
	f.Add([]byte(`not json`))
	f.Add([]byte(`{"stream":"s","type":"t","id":"nope"}`))
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := DecodeEvent(message.NewMessage("m", payload))
		if err != nil {
			return
		}
		if got.Type == "" || got.Stream == "" {
			t.Fatalf("accepted an event with no type or stream: %+v", got)
		}
		m, err := EncodeEvent(&got)
		if err != nil {
			return // e.g. data that is not JSON cannot be sent on: refused, not mangled
		}
		again, err := DecodeEvent(m)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", m.Payload, err)
		}
		if !sameEnvelope(got, again) {
			t.Fatalf("decode(encode(x)) != x:\n got %+v\nwant %+v", again, got)
		}
		if m.UUID != got.ID.String() {
			t.Fatalf("message UUID %s, event id %s", m.UUID, got.ID)
		}
	})
}

// sameEnvelope compares envelopes, their JSON payloads by value.
func sameEnvelope(a, b domain.Envelope) bool {
	ja, jb := a.Data, b.Data
	ma, mb := a.Metadata, b.Metadata
	a.Data, b.Data, a.Metadata, b.Metadata = nil, nil, nil, nil
	return reflect.DeepEqual(a, b) && sameJSON(ja, jb) && sameJSON(ma, mb)
}

func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b) || string(a) == "null" || string(b) == "null"
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return string(a) == string(b)
	}
	return reflect.DeepEqual(va, vb)
}
