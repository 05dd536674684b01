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
// encode → decode unchanged (decode(encode(x)) == x), exactly through the
// compact form, and through JSON what JSON can carry.
func FuzzDecodeEvent(f *testing.F) {
	env := domain.Envelope{Stream: "execution-1", Version: 3, Position: 42, ID: uuid.MustParse("5b0c3f4d-8e21-4f57-9a43-6f1f3a522d7e"),
		Type: domain.TypeExecutionScheduled, SchemaVersion: 1, Time: time.Date(2026, 11, 21, 14, 0, 0, 0, time.UTC),
		Owner: domain.OwnerExecutor, Writer: "executor", Data: json.RawMessage(`{"worker":"local-1","attempt":1}`)}
	m, err := EncodeEvent(&env)
	if err != nil {
		f.Fatal(err)
	}
	f.Add([]byte(m.Payload))
	f.Add([]byte(EncodeEventCompact(&env).Payload))
	f.Add([]byte{compactTag, 7})
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
		c, err := DecodeEvent(EncodeEventCompact(&got))
		if err != nil {
			t.Fatalf("decode of the compact form of %+v: %v", got, err)
		}
		if !sameExactly(got, c) {
			t.Fatalf("decode(encodeCompact(x)) != x:\n got %+v\nwant %+v", c, got)
		}
		if payload[0] == compactTag {
			return // JSON cannot carry everything the compact form can (bytes that are not UTF-8)
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

// sameExactly compares envelopes field by field, data and metadata byte for
// byte (nil apart from empty), times as instants.
func sameExactly(a, b domain.Envelope) bool {
	if !a.Time.Equal(b.Time) || (a.Data == nil) != (b.Data == nil) || (a.Metadata == nil) != (b.Metadata == nil) {
		return false
	}
	a.Time, b.Time = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// TestCompactRoundTrip: the compact form gives back every field as it was.
func TestCompactRoundTrip(t *testing.T) {
	base := domain.Envelope{Stream: "execution-1", Version: 3, Position: 1 << 40, ID: uuid.MustParse("5b0c3f4d-8e21-4f57-9a43-6f1f3a522d7e"),
		Type: domain.TypeExecutionScheduled, SchemaVersion: 2, Time: time.Date(2026, 11, 21, 14, 0, 0, 123456789, time.UTC),
		Owner: domain.OwnerExecutor, CorrelationID: "c", CausationID: "d", Writer: "executor",
		Data: json.RawMessage(`{ "worker": "local-1" }`), Metadata: json.RawMessage(`{"k":1}`)}
	cases := map[string]func(e *domain.Envelope){
		"full":          func(*domain.Envelope) {},
		"no time":       func(e *domain.Envelope) { e.Time = time.Time{} },
		"nil data":      func(e *domain.Envelope) { e.Data, e.Metadata = nil, nil },
		"empty data":    func(e *domain.Envelope) { e.Data, e.Metadata = json.RawMessage{}, json.RawMessage{} },
		"before 1970":   func(e *domain.Envelope) { e.Time = time.Date(1969, 7, 20, 20, 17, 0, 5, time.UTC) },
		"bare minimum":  func(e *domain.Envelope) { *e = domain.Envelope{Stream: "s", Type: "t"} },
		"not ascii":     func(e *domain.Envelope) { e.Writer = "wörker ✓" },
		"negative vers": func(e *domain.Envelope) { e.SchemaVersion = -1 },
	}
	for name, change := range cases {
		env := base
		change(&env)
		m := EncodeEventCompact(&env)
		if m.UUID != env.ID.String() || m.Metadata.Get(MetaType) != env.Type || m.Metadata.Get(MetaStream) != env.Stream {
			t.Errorf("%s: message uuid %s metadata %v", name, m.UUID, m.Metadata)
		}
		got, err := DecodeEvent(m)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !sameExactly(env, got) {
			t.Errorf("%s: got %+v, want %+v", name, got, env)
		}
		// Every proper prefix and any trailing byte is refused.
		p := m.Payload
		for i := 0; i < len(p); i++ {
			if _, err := DecodeEvent(message.NewMessage("m", p[:i])); err == nil && i > 0 {
				t.Errorf("%s: a payload cut at %d of %d bytes was accepted", name, i, len(p))
				break
			}
		}
		if _, err := DecodeEvent(message.NewMessage("m", append(append([]byte{}, p...), 0))); err == nil {
			t.Errorf("%s: a payload with a trailing byte was accepted", name)
		}
	}
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
