package bus

import (
	"encoding/json"
	"fmt"
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

// TestBatchRoundTrip: a batch gives back its events in order, each exactly;
// its UUID depends on the events alone; a batch cut short, or with a
// trailing byte, is refused; a batch of one is the event's own message.
func TestBatchRoundTrip(t *testing.T) {
	var envs []*domain.Envelope
	for i := range 5 {
		envs = append(envs, &domain.Envelope{Stream: fmt.Sprintf("execution-%d", i), Version: uint64(i), Position: uint64(100 + i),
			ID: uuid.NewSHA1(uuid.NameSpaceOID, []byte{byte(i)}), Type: domain.TypeExecutionScheduled, SchemaVersion: 1,
			Time: time.Date(2026, 11, 21, 14, 0, i, 0, time.UTC), Owner: domain.OwnerExecutor, Writer: "executor",
			Data: json.RawMessage(fmt.Sprintf(`{"worker":"w","attempt":%d}`, i))})
	}
	envs[2].Data, envs[3].Time = nil, time.Time{}
	m := EncodeEvents(envs)
	if m.Metadata.Get(MetaCount) != "5" || m.Metadata.Get(MetaPosition) != "100" {
		t.Errorf("metadata %v", m.Metadata)
	}
	got, err := DecodeEvents(m)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(envs) {
		t.Fatalf("%d events back, want %d", len(got), len(envs))
	}
	for i := range envs {
		if !sameExactly(*envs[i], got[i]) {
			t.Errorf("event %d: got %+v, want %+v", i, got[i], *envs[i])
		}
	}
	if again := EncodeEvents(envs); again.UUID != m.UUID {
		t.Errorf("the same events gave UUIDs %s and %s", m.UUID, again.UUID)
	}
	if other := EncodeEvents(envs[1:]); other.UUID == m.UUID {
		t.Errorf("other events gave the same UUID %s", m.UUID)
	}
	for i := 0; i < len(m.Payload); i++ {
		if _, err := DecodeEvents(message.NewMessage("m", m.Payload[:i])); err == nil {
			t.Fatalf("a batch cut at %d of %d bytes was accepted", i, len(m.Payload))
		}
	}
	if _, err := DecodeEvents(message.NewMessage("m", append(append([]byte{}, m.Payload...), 0))); err == nil {
		t.Error("a batch with a trailing byte was accepted")
	}
	one := EncodeEvents(envs[:1])
	if want := EncodeEventCompact(envs[0]); one.UUID != want.UUID || string(one.Payload) != string(want.Payload) {
		t.Errorf("a batch of one is %s %x, want the event's message %s %x", one.UUID, one.Payload, want.UUID, want.Payload)
	}
	if got, err := DecodeEvents(one); err != nil || len(got) != 1 || !sameExactly(got[0], *envs[0]) {
		t.Errorf("a batch of one decodes to %+v, %v", got, err)
	}
}

// FuzzDecodeEvents feeds any payload to the batch decoder: no panic, and
// what it accepts encodes back to a message that decodes to the same events.
func FuzzDecodeEvents(f *testing.F) {
	a := domain.Envelope{Stream: "execution-1", Type: domain.TypeExecutionScheduled, ID: uuid.MustParse("5b0c3f4d-8e21-4f57-9a43-6f1f3a522d7e"), Data: json.RawMessage(`{}`)}
	b := domain.Envelope{Stream: "execution-2", Type: domain.TypeExecutionCancelRequested, Position: 9}
	f.Add([]byte(EncodeEvents([]*domain.Envelope{&a, &b}).Payload))
	f.Add([]byte(EncodeEvents([]*domain.Envelope{&a}).Payload))
	f.Add([]byte{batchTag, 2, 0, 0})
	f.Add([]byte{batchTag, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, payload []byte) {
		got, err := DecodeEvents(message.NewMessage("m", payload))
		if err != nil {
			return
		}
		if len(got) == 0 || len(got) > MaxBatch {
			t.Fatalf("accepted %d events", len(got))
		}
		ptrs := make([]*domain.Envelope, len(got))
		for i := range got {
			if got[i].Type == "" || got[i].Stream == "" {
				t.Fatalf("accepted an event with no type or stream: %+v", got[i])
			}
			ptrs[i] = &got[i]
		}
		again, err := DecodeEvents(EncodeEvents(ptrs))
		if err != nil || len(again) != len(got) {
			t.Fatalf("re-decode: %d events, %v", len(again), err)
		}
		for i := range got {
			if !sameExactly(got[i], again[i]) {
				t.Fatalf("event %d: decode(encode(x)) != x:\n got %+v\nwant %+v", i, again[i], got[i])
			}
		}
	})
}
