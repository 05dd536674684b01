package eventstore_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

func chainEvent() domain.Envelope {
	return domain.Envelope{
		Stream: "execution-1", Version: 3, Position: 42,
		ID:   uuid.MustParse("6f1c2b1e-0d4e-4f59-9a51-1a7f3c2d9e01"),
		Type: "execution.completed", SchemaVersion: 1,
		Time:  time.Date(2026, 11, 26, 8, 0, 0, 123456000, time.UTC),
		Owner: domain.OwnerWorker, CorrelationID: "c", CausationID: "d", Writer: "w1",
		Data: json.RawMessage(`{"ok":true}`), Metadata: json.RawMessage(`{"principal":"p"}`),
	}
}

// Every field the encoding names changes the hash, and so does the hash
// before; the same event after the same hash gives the same hash.
func TestNextHashCoversEveryField(t *testing.T) {
	base := chainEvent()
	var prev domain.Hash
	h0 := eventstore.NextHash(prev, &base)
	var c eventstore.Chainer
	if c.Next(prev, &base) != h0 || c.Next(prev, &base) != h0 {
		t.Fatal("a reused Chainer gives another hash")
	}
	changes := map[string]func(*domain.Envelope){
		"stream":      func(e *domain.Envelope) { e.Stream = "execution-2" },
		"version":     func(e *domain.Envelope) { e.Version++ },
		"position":    func(e *domain.Envelope) { e.Position++ },
		"id":          func(e *domain.Envelope) { e.ID[15]++ },
		"type":        func(e *domain.Envelope) { e.Type = "execution.failed" },
		"schema":      func(e *domain.Envelope) { e.SchemaVersion = 2 },
		"time":        func(e *domain.Envelope) { e.Time = e.Time.Add(time.Microsecond) },
		"owner":       func(e *domain.Envelope) { e.Owner = domain.OwnerExecutor },
		"correlation": func(e *domain.Envelope) { e.CorrelationID = "" },
		"causation":   func(e *domain.Envelope) { e.CausationID = "e" },
		"writer":      func(e *domain.Envelope) { e.Writer = "w2" },
		"data":        func(e *domain.Envelope) { e.Data = json.RawMessage(`{"ok":false}`) },
		"metadata":    func(e *domain.Envelope) { e.Metadata = nil },
		// moving a byte from one field to the next must not collide
		"boundary": func(e *domain.Envelope) { e.CorrelationID, e.CausationID = "cd", "" },
	}
	for name, change := range changes {
		e := chainEvent()
		change(&e)
		if eventstore.NextHash(prev, &e) == h0 {
			t.Errorf("changing the %s leaves the hash unchanged", name)
		}
	}
	prev[0] = 1
	if eventstore.NextHash(prev, &base) == h0 {
		t.Error("the hash before does not change the hash")
	}
	// The stored hash itself is not part of the encoding.
	withHash := chainEvent()
	withHash.Hash = h0
	if eventstore.NextHash(domain.Hash{}, &withHash) != h0 {
		t.Error("an event's own Hash field changes its hash")
	}
	// nil and empty data hash alike (stores differ in which they give back)
	a, b := chainEvent(), chainEvent()
	a.Metadata, b.Metadata = nil, json.RawMessage{}
	if eventstore.NextHash(domain.Hash{}, &a) != eventstore.NextHash(domain.Hash{}, &b) {
		t.Error("nil and empty metadata hash differently")
	}
}

// The hash is pinned: changing the encoding breaks every chain ever
// published, so it must be a deliberate act that also changes this value.
func TestNextHashIsPinned(t *testing.T) {
	e := chainEvent()
	got := eventstore.NextHash(domain.Hash{}, &e).String()
	const want = "de831325e61bca15556da8709ad5aa1afeb22808c693d2426b2e43a61a7975d6"
	if got != want {
		t.Fatalf("chain hash of the fixed event = %s, pinned %s", got, want)
	}
}

func TestHashText(t *testing.T) {
	e := chainEvent()
	h := eventstore.NextHash(domain.Hash{}, &e)
	b, err := json.Marshal(struct {
		H domain.Hash `json:"h"`
	}{h})
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		H domain.Hash `json:"h"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.H != h {
		t.Fatalf("round trip %s: %v %v", b, back.H, err)
	}
	if _, err := domain.ParseHash("xyz"); err == nil {
		t.Error("ParseHash accepts 3 letters")
	}
	// An envelope without a hash has no "hash" field in its JSON.
	e.Hash = domain.Hash{}
	j, _ := json.Marshal(e)
	if contains(j, `"hash"`) {
		t.Errorf("an unchained event's JSON names a hash: %s", j)
	}
}

func contains(b []byte, s string) bool {
	for i := 0; i+len(s) <= len(b); i++ {
		if string(b[i:i+len(s)]) == s {
			return true
		}
	}
	return false
}
