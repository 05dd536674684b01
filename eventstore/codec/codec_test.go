package codec_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/internal/valuediff"
)

// everyType lists every Type* constant of the domain, written out by hand so
// that a new constant missing from the catalogue (or the reverse) is noticed.
var everyType = []string{
	domain.TypeActionDefined, domain.TypeActionPolicyChanged, domain.TypeActionPaused, domain.TypeActionResumed,
	domain.TypeExecutionRequested, domain.TypeExecutionRejected, domain.TypeExecutionScheduling,
	domain.TypeExecutionScheduled, domain.TypeExecutionRunning, domain.TypeExecutionCompleted,
	domain.TypeExecutionFailed, domain.TypeExecutionTimedOut, domain.TypeExecutionCancelled,
	domain.TypeExecutionCancelRequested, domain.TypeExecutionHandoffExpired, domain.TypeExecutionAbandoned,
	domain.TypeExecutionChildrenRequested,
	domain.TypeExecutionRunFailed, domain.TypeExecutionRetryScheduled, domain.TypeExecutionRequeued,
	domain.TypeQueueGranted, domain.TypeQueueActionChanged,
	domain.TypeWorkerRegistered, domain.TypeWorkerHeartbeat, domain.TypeWorkerDraining,
	domain.TypeWorkerStopped, domain.TypeWorkerLost,
	domain.TypeScheduleDefined, domain.TypeSchedulePaused, domain.TypeScheduleResumed, domain.TypeScheduleDeleted,
	domain.TypeCheckpointPart, domain.TypeCheckpointWritten,
	domain.TypeResourceDefined, domain.TypeResourceDeleted, domain.TypeResourceGranted,
}

// catalogueOwners is who may write each event: DESIGN.md for the execution
// events (checked against the handoff spec below), the API for action
// commands, the executor for grants and lost-worker verdicts, the worker for
// its own lifecycle.
var catalogueOwners = map[string][]domain.Owner{
	domain.TypeActionDefined:              {oAPI},
	domain.TypeActionPolicyChanged:        {oAPI},
	domain.TypeActionPaused:               {oAPI},
	domain.TypeActionResumed:              {oAPI},
	domain.TypeExecutionRequested:         {oExec},
	domain.TypeExecutionRejected:          {oExec},
	domain.TypeExecutionScheduling:        {oExec},
	domain.TypeExecutionScheduled:         {oExec},
	domain.TypeExecutionRunning:           {oWorker, oExec}, // the executor starts a with_items parent
	domain.TypeExecutionCompleted:         {oWorker, oExec},
	domain.TypeExecutionFailed:            {oWorker, oExec},
	domain.TypeExecutionTimedOut:          {oWorker},
	domain.TypeExecutionCancelled:         {oWorker, oExec},
	domain.TypeExecutionCancelRequested:   {oAPI, oExec}, // the executor for a cancelled parent's children
	domain.TypeExecutionHandoffExpired:    {oExec},
	domain.TypeExecutionAbandoned:         {oExec},
	domain.TypeExecutionChildrenRequested: {oExec},
	domain.TypeExecutionRunFailed:         {oWorker},
	domain.TypeExecutionRetryScheduled:    {oExec},
	domain.TypeExecutionRequeued:          {oExec},
	domain.TypeQueueGranted:               {oExec},
	domain.TypeQueueActionChanged:         {oAPI},
	domain.TypeWorkerRegistered:           {oWorker},
	domain.TypeWorkerHeartbeat:            {oWorker},
	domain.TypeWorkerDraining:             {oWorker},
	domain.TypeWorkerStopped:              {oWorker},
	domain.TypeWorkerLost:                 {oExec},
	domain.TypeScheduleDefined:            {oAPI},
	domain.TypeSchedulePaused:             {oAPI},
	domain.TypeScheduleResumed:            {oAPI},
	domain.TypeScheduleDeleted:            {oAPI},
	domain.TypeCheckpointPart:             {oExec},
	domain.TypeCheckpointWritten:          {oExec},
	domain.TypeResourceDefined:            {oAPI},
	domain.TypeResourceDeleted:            {oAPI},
	domain.TypeResourceGranted:            {oExec},
}

func sortedOwners(os []domain.Owner) []domain.Owner {
	out := slices.Clone(os)
	slices.Sort(out)
	return slices.Compact(out)
}

func TestCatalogue(t *testing.T) {
	t.Parallel()
	want := slices.Sorted(slices.Values(everyType))
	if got := codec.Events.Catalogue().Types(); !slices.Equal(got, want) {
		t.Fatalf("Catalogue.Types() = %v\nwant %v", got, want)
	}
	for _, typ := range everyType {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			spec, ok := codec.Events.Catalogue().Spec(typ)
			if !ok {
				t.Fatalf("Spec(%q) not found", typ)
			}
			if spec.Type != typ || spec.SchemaVersion != 1 {
				t.Errorf("spec %q version %d, want %q version 1", spec.Type, spec.SchemaVersion, typ)
			}
			category, _, _ := strings.Cut(typ, ".")
			if spec.Stream != category {
				t.Errorf("stream category %q, want %q", spec.Stream, category)
			}
			if got, want := sortedOwners(spec.Owners), sortedOwners(catalogueOwners[typ]); !slices.Equal(got, want) {
				t.Errorf("owners %v, want %v", got, want)
			}
			if ev := exampleOf(t, typ); ev.EventType() != typ {
				t.Errorf("example of %q says it is %q", typ, ev.EventType())
			}
		})
	}
	if _, ok := codec.Events.Catalogue().Spec("execution.nope"); ok {
		t.Error("Spec of an unknown type found")
	}
}

// registryExamples holds one payload of every event type, every field set.
var registryExamples = []domain.Event{
	domain.ActionDefined{Policy: domain.Policy{
		Ref: "mail.send", Runner: "core.http", MaxConcurrent: 4, MaxQueueLength: 100, QueueTimeoutSeconds: 1.5,
		TimeoutSeconds: 60, ScheduledTimeoutSeconds: 5, MaxAttempts: 2, RateLimit: &domain.RateLimit{Count: 10, PerSeconds: 0.5},
		ConcurrencyKey: "tenant", OnLimit: domain.OnLimitReject,
	}},
	domain.ActionPolicyChanged{Policy: domain.Policy{Ref: "mail.send", Runner: "core.noop", MaxConcurrent: 1}},
	domain.ActionPaused{Reason: "maintenance"},
	domain.ActionResumed{},
	domain.ExecutionRequested{
		Action: "mail.send", Input: json.RawMessage(`{"to":["a@b.c"],"n":1.50,"html":"<b>&</b>"}`), ConcurrencyKey: "t1",
		Parent: "p-1", ItemIndex: 3, Items: 7, Concurrency: 2, IdempotencyKey: "k-1", RequestHash: "sha256:ab",
		Priority: 3, RunAt: "2026-01-02T15:04:05.5Z", DelayMillis: 0,
		WithItems: []json.RawMessage{json.RawMessage(`{"to":"x"}`), json.RawMessage(`2`), json.RawMessage(`"three"`)},
	},
	domain.ExecutionRejected{Reason: "queue full", Code: domain.RejectQueueFull},
	domain.ExecutionScheduling{ConcurrencyKey: "t1"},
	domain.ExecutionScheduled{
		Worker: "w1", Incarnation: "w1-i7", Attempt: 2, Action: "mail.send", Runner: "core.http",
		Input: json.RawMessage(`{"x":null}`), TimeoutMillis: 60000, ScheduledTimeoutMS: 5000, KeyField: "tenant", Runs: 3,
	},
	domain.ExecutionRunning{Worker: "w1", Attempt: 2},
	domain.ExecutionCompleted{Result: json.RawMessage(`[1,"two",{"three":3}]`)},
	domain.ExecutionFailed{Error: "exit status 1 — ünïcode", Code: domain.FailDrain, Result: json.RawMessage(`"stderr"`)},
	domain.ExecutionTimedOut{TimeoutMillis: 1500, Result: json.RawMessage(`{"stdout":"partial"}`)},
	domain.ExecutionCancelled{Reason: "client asked", Code: domain.CancelRequested, Result: json.RawMessage(`{"signal":"SIGINT"}`)},
	domain.ExecutionCancelRequested{Reason: "no longer needed"},
	domain.ExecutionHandoffExpired{Worker: "w1", Attempt: 1},
	domain.ExecutionAbandoned{Worker: "w2", Attempt: 3, Reason: "worker lost"},
	domain.ExecutionChildrenRequested{First: 5, Count: 3},
	domain.ExecutionRunFailed{Worker: "w1", Attempt: 2, Error: "boom", Code: "x", Result: json.RawMessage(`{"a":1}`), TimedOut: true, TimeoutMillis: 900},
	domain.ExecutionRetryScheduled{Attempt: 2, BackoffMillis: 4000, Action: "mail.send", ConcurrencyKey: "t1"},
	domain.ExecutionRequeued{Action: "mail.send", ConcurrencyKey: "t1", Priority: 1},
	domain.QueueGranted{Execution: "e-9", ConcurrencyKey: "t1", Seen: 77},
	domain.QueueActionChanged{ActionVersion: 4, Change: domain.TypeActionPaused},
	domain.WorkerRegistered{Slots: 8, Runners: []string{"core.noop", "core.shell"}, Host: "h1", PID: 4242, Incarnation: "i-1"},
	domain.WorkerHeartbeat{Incarnation: "i-1", InFlight: 3},
	domain.WorkerDraining{Incarnation: "i-1"},
	domain.WorkerStopped{Incarnation: "i-1"},
	domain.WorkerLost{Incarnation: "i-1", Reason: "lease expired", LastSeen: time.Date(2025, 1, 2, 3, 4, 5, 123456789, time.UTC)},
	domain.ScheduleDefined{Action: "a", Cron: "0 2 * * *", Timezone: "Europe/Paris", Input: json.RawMessage(`{"x":1}`)},
	domain.SchedulePaused{}, domain.ScheduleResumed{}, domain.ScheduleDeleted{},
	domain.CheckpointPart{Part: 2, Data: []byte("\x00gob\xff")},
	domain.CheckpointWritten{Position: 42, Parts: 3, Bytes: 1000, SHA256: strings.Repeat("ab", 32), Prev: domain.Hash{1, 2}, Format: "f", Keep: []string{"queue-a", "checkpoint-written"}, Live: 7},
	domain.ResourceDefined{ResourceLimit: domain.ResourceLimit{MaxConcurrent: 3, RateLimit: &domain.RateLimit{Count: 10, PerSeconds: 1}, KeyField: "tenant"}},
	domain.ResourceDeleted{},
	domain.ResourceGranted{Execution: "e-1", Key: "acme", Units: 2, Seen: 9},
}

func exampleOf(t *testing.T, typ string) domain.Event {
	t.Helper()
	for _, ev := range registryExamples {
		if ev.EventType() == typ {
			return ev
		}
	}
	t.Fatalf("no example of %q", typ)
	return nil
}

func TestEncodeDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	if len(registryExamples) != len(everyType) {
		t.Fatalf("%d examples for %d types", len(registryExamples), len(everyType))
	}
	for _, ev := range registryExamples {
		t.Run(ev.EventType(), func(t *testing.T) {
			t.Parallel()
			id := uuid.New()
			env, err := codec.Events.Encode(id, ev, oExec, "exec-1")
			if err != nil {
				t.Fatalf("Encode: %v", err)
			}
			if env.ID != id || env.Type != ev.EventType() || env.SchemaVersion != 1 || env.Owner != oExec || env.Writer != "exec-1" {
				t.Errorf("envelope %+v does not carry id, type, version 1, owner and writer", env)
			}
			if !json.Valid(env.Data) {
				t.Fatalf("data %s is not JSON", env.Data)
			}
			env.Stream, env.Version, env.Position, env.Time = "s-1", 4, 99, t0
			got, err := codec.Events.Decode(&env)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if d := valuediff.Diff(got, ev); d != "" {
				t.Errorf("decode(encode(x)) differs from x at %s\n got %#v\nwant %#v", d, got, ev)
			}
			// Payloads whose JSON fields are already compact and free of
			// HTML characters come back identical.
			if ev.EventType() != domain.TypeExecutionRequested && !reflect.DeepEqual(got, ev) {
				t.Errorf("decode(encode(x)) != x\n got %#v\nwant %#v", got, ev)
			}
		})
	}
}

func TestDecodeRefusals(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		env  domain.Envelope
		want error
	}{
		{"unknown type", domain.Envelope{Type: "execution.teleported", SchemaVersion: 1, Data: []byte(`{}`)}, domain.ErrUnknownEventType},
		{"empty type", domain.Envelope{SchemaVersion: 1, Data: []byte(`{}`)}, domain.ErrUnknownEventType},
		{"unknown field", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`{"worker":"w1","attempt":1,"colour":"red"}`)}, codec.ErrDecode},
		{"wrong field type", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`{"attempt":"one"}`)}, codec.ErrDecode},
		{"not an object", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`[1]`)}, codec.ErrDecode},
		{"not JSON", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`{"worker":`)}, codec.ErrDecode},
		{"trailing value", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`{} {}`)}, codec.ErrDecode},
		{"trailing bracket", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`{"worker":"w1"}]`)}, codec.ErrDecode},
		{"trailing brace", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(`{}}`)}, codec.ErrDecode},
		{"trailing non-JSON space", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte("{}\u00a0")}, codec.ErrDecode},
		{"schema version above registered", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 2, Data: []byte(`{}`)}, domain.ErrSchemaVersion},
		{"schema version zero", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 0, Data: []byte(`{}`)}, domain.ErrSchemaVersion},
		{"schema version negative", domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: -1, Data: []byte(`{}`)}, domain.ErrSchemaVersion},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.env.Stream = "execution-e1"
			ev, err := codec.Events.Decode(&tc.env)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Decode = %v, %v; want %v", ev, err, tc.want)
			}
			if ev != nil {
				t.Errorf("Decode returned %#v with an error", ev)
			}
			if !strings.Contains(err.Error(), "execution-e1") && !errors.Is(tc.want, domain.ErrUnknownEventType) {
				t.Errorf("error %q does not name the stream", err)
			}
		})
	}
}

func TestDecodeLenientInputs(t *testing.T) {
	t.Parallel()
	for _, data := range []string{"", "{}", " {} \n", "null"} {
		env := domain.Envelope{Type: domain.TypeExecutionRunning, SchemaVersion: 1, Data: []byte(data)}
		ev, err := codec.Events.Decode(&env)
		if err != nil {
			t.Errorf("Decode(%q): %v", data, err)
			continue
		}
		if ev != (domain.ExecutionRunning{}) {
			t.Errorf("Decode(%q) = %#v, want the zero payload", data, ev)
		}
	}
}

func TestEncodeUnknownType(t *testing.T) {
	t.Parallel()
	_, err := codec.New(domain.NewRegistry()).Encode(uuid.New(), domain.ActionResumed{}, oAPI, "")
	if !errors.Is(err, domain.ErrUnknownEventType) {
		t.Fatalf("Encode with an empty registry: %v, want ErrUnknownEventType", err)
	}
}

// ---- upcasting, with a registry of the test's own ----

// personV3 is the third schema of test.person: v1 had {"name","age"}, v2
// renamed name to full_name, v3 split full_name into given and family names.
type personV3 struct {
	GivenName  string `json:"given_name"`
	FamilyName string `json:"family_name"`
	Age        int    `json:"age"`
}

func (personV3) EventType() string { return "test.person" }

type otherV2 struct {
	N int `json:"n"`
}

func (otherV2) EventType() string { return "test.other" }

func renameNameToFullName(data json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	m["full_name"] = m["name"]
	delete(m, "name")
	return json.Marshal(m)
}

func splitFullName(data json.RawMessage) (json.RawMessage, error) {
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, err
	}
	full, _ := m["full_name"].(string)
	given, family, _ := strings.Cut(full, " ")
	delete(m, "full_name")
	m["given_name"], m["family_name"] = given, family
	return json.Marshal(m)
}

func personRegistry(t *testing.T) *domain.Registry {
	t.Helper()
	r := domain.NewRegistry()
	if err := r.Register(personV3{}, 3, "test", oAPI); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterUpcaster("test.person", 1, renameNameToFullName); err != nil {
		t.Fatal(err)
	}
	if err := r.RegisterUpcaster("test.person", 2, splitFullName); err != nil {
		t.Fatal(err)
	}
	if err := r.Register(otherV2{}, 2, "test", oAPI); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestUpcasting(t *testing.T) {
	t.Parallel()
	r := codec.New(personRegistry(t))
	want := personV3{GivenName: "Ada", FamilyName: "Lovelace", Age: 36}
	tests := []struct {
		version int
		data    string
	}{
		{1, `{"name":"Ada Lovelace","age":36}`},
		{2, `{"full_name":"Ada Lovelace","age":36}`},
		{3, `{"given_name":"Ada","family_name":"Lovelace","age":36}`},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("v%d", tc.version), func(t *testing.T) {
			t.Parallel()
			env := domain.Envelope{Stream: "test-1", Type: "test.person", SchemaVersion: tc.version, Data: []byte(tc.data)}
			ev, err := r.Decode(&env)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if ev != want {
				t.Fatalf("Decode = %#v, want %#v", ev, want)
			}
			data, err := r.Upcast(&env)
			if err != nil {
				t.Fatalf("Upcast: %v", err)
			}
			var got personV3
			if err := json.Unmarshal(data, &got); err != nil || got != want {
				t.Fatalf("Upcast = %s (%v), want the v3 shape", data, err)
			}
			if string(env.Data) != tc.data {
				t.Errorf("Upcast changed the stored data to %s", env.Data)
			}
		})
	}
	t.Run("encode writes the current version", func(t *testing.T) {
		t.Parallel()
		env, err := r.Encode(uuid.New(), want, oAPI, "")
		if err != nil || env.SchemaVersion != 3 {
			t.Fatalf("Encode = version %d, %v; want version 3", env.SchemaVersion, err)
		}
		if ev, err := r.Decode(&env); err != nil || ev != want {
			t.Fatalf("round trip = %#v, %v", ev, err)
		}
	})
	t.Run("version above the registered one", func(t *testing.T) {
		t.Parallel()
		env := domain.Envelope{Type: "test.person", SchemaVersion: 4, Data: []byte(`{}`)}
		if _, err := r.Decode(&env); !errors.Is(err, domain.ErrSchemaVersion) {
			t.Fatalf("Decode v4 = %v, want ErrSchemaVersion", err)
		}
	})
	t.Run("missing upcaster", func(t *testing.T) {
		t.Parallel()
		env := domain.Envelope{Type: "test.other", SchemaVersion: 1, Data: []byte(`{"n":1}`)}
		if _, err := r.Decode(&env); !errors.Is(err, domain.ErrSchemaVersion) {
			t.Fatalf("Decode v1 without an upcaster = %v, want ErrSchemaVersion", err)
		}
		env.SchemaVersion = 2
		if ev, err := r.Decode(&env); err != nil || ev != (otherV2{N: 1}) {
			t.Fatalf("Decode v2 = %#v, %v", ev, err)
		}
	})
	t.Run("a gap in the chain", func(t *testing.T) {
		t.Parallel()
		r := domain.NewRegistry()
		if err := r.Register(personV3{}, 3, "test", oAPI); err != nil {
			t.Fatal(err)
		}
		if err := r.RegisterUpcaster("test.person", 2, splitFullName); err != nil {
			t.Fatal(err)
		}
		env := domain.Envelope{Type: "test.person", SchemaVersion: 1, Data: []byte(`{"name":"Ada Lovelace"}`)}
		if _, err := codec.New(r).Decode(&env); !errors.Is(err, domain.ErrSchemaVersion) {
			t.Fatalf("Decode v1 with no 1→2 step = %v, want ErrSchemaVersion", err)
		}
	})
	t.Run("failing upcaster", func(t *testing.T) {
		t.Parallel()
		env := domain.Envelope{Type: "test.person", SchemaVersion: 1, Data: []byte(`[]`)}
		_, err := r.Decode(&env)
		var typeErr *json.UnmarshalTypeError
		if err == nil || !errors.As(err, &typeErr) {
			t.Fatalf("Decode with a failing upcaster = %v, want the upcaster's error wrapped", err)
		}
	})
	t.Run("upcast result still decoded strictly", func(t *testing.T) {
		t.Parallel()
		env := domain.Envelope{Type: "test.person", SchemaVersion: 1, Data: []byte(`{"name":"Ada Lovelace","nickname":"Ada"}`)}
		if _, err := r.Decode(&env); !errors.Is(err, codec.ErrDecode) {
			t.Fatalf("Decode of v1 data with an unknown field = %v, want ErrDecode", err)
		}
	})
}

type ptrEvent struct{}

func (*ptrEvent) EventType() string { return "test.ptr" }

type emptyName struct{}

func (emptyName) EventType() string { return "" }

func TestRegisterErrors(t *testing.T) {
	t.Parallel()
	r := personRegistry(t)
	versionOne := domain.NewRegistry()
	if err := versionOne.Register(domain.ExecutionRunning{}, 1, domain.StreamExecution, oWorker); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		err  error
	}{
		{"duplicate type", r.Register(personV3{}, 1, "test", oAPI)},
		{"version zero", domain.NewRegistry().Register(personV3{}, 0, "test", oAPI)},
		{"no owner", domain.NewRegistry().Register(personV3{}, 1, "test")},
		{"pointer payload", domain.NewRegistry().Register(&ptrEvent{}, 1, "test", oAPI)},
		{"empty name", domain.NewRegistry().Register(emptyName{}, 1, "test", oAPI)},
		{"duplicate upcaster", r.RegisterUpcaster("test.person", 1, renameNameToFullName)},
		{"upcaster from 0", r.RegisterUpcaster("test.person", 0, renameNameToFullName)},
		{"upcaster from the current version", r.RegisterUpcaster("test.person", 3, renameNameToFullName)},
		{"upcaster for a version-1 type", versionOne.RegisterUpcaster(domain.TypeExecutionRunning, 1, renameNameToFullName)},
		{"upcaster added to the sealed catalogue", domain.NewCatalogue().RegisterUpcaster(domain.TypeExecutionRunning, 1, renameNameToFullName)},
		{"type added to the sealed catalogue", domain.NewCatalogue().Register(personV3{}, 1, "test", oAPI)},
	}
	for _, tc := range tests {
		if tc.err == nil {
			t.Errorf("%s: accepted", tc.name)
		}
	}
	if err := r.RegisterUpcaster("test.nope", 1, renameNameToFullName); !errors.Is(err, domain.ErrUnknownEventType) {
		t.Errorf("upcaster for an unknown type: %v, want ErrUnknownEventType", err)
	}
	// The refused duplicate did not replace the original registration.
	if spec, _ := r.Spec("test.person"); spec.SchemaVersion != 3 {
		t.Errorf("after a refused duplicate, version %d, want 3", spec.SchemaVersion)
	}
	if got := r.Types(); !slices.Equal(got, []string{"test.other", "test.person"}) {
		t.Errorf("Types() = %v", got)
	}
}

func TestStreams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		stream, category, id string
	}{
		{domain.ActionStream("mail.send"), domain.StreamAction, "mail.send"},
		{domain.ExecutionStream("6f1c-x"), domain.StreamExecution, "6f1c-x"},
		{domain.QueueStream("a-b"), domain.StreamQueue, "a-b"},
		{domain.WorkerStream("w1"), domain.StreamWorker, "w1"},
		{"execution-", "", "execution-"},
		{"executions-1", "", "executions-1"},
		{"other-1", "", "other-1"},
		{"", "", ""},
	}
	for _, tc := range tests {
		c, id := domain.SplitStream(tc.stream)
		if c != tc.category || id != tc.id {
			t.Errorf("SplitStream(%q) = %q, %q; want %q, %q", tc.stream, c, id, tc.category, tc.id)
		}
	}
}

func TestOwnerValid(t *testing.T) {
	t.Parallel()
	for o, want := range map[domain.Owner]bool{oAPI: true, oExec: true, oWorker: true, "": false, "admin": false} {
		if o.Valid() != want {
			t.Errorf("Owner(%q).Valid() = %v", o, !want)
		}
	}
}

// ---- fuzzing ----

// FuzzDecode decodes arbitrary data as any catalogue type (or an unknown
// one) at any schema version: Decode must not panic, must refuse with one of
// the registry's sentinels, and whatever it accepts must be valid JSON that
// survives encode → decode unchanged.
func FuzzDecode(f *testing.F) {
	types := codec.Events.Catalogue().Types()
	for i, ev := range registryExamples {
		env, err := codec.Events.Encode(uuid.Nil, ev, oExec, "")
		if err != nil {
			f.Fatal(err)
		}
		idx := uint(slices.Index(types, ev.EventType()))
		f.Add(idx, 1, []byte(env.Data))
		if i%4 == 0 {
			f.Add(idx, 2, []byte(env.Data))
			f.Add(idx, 1, append([]byte(env.Data), ']'))
		}
	}
	f.Add(uint(0), 1, []byte(`{"policy":{"ref":"a","rate_limit":null}}`))
	f.Add(uint(len(types)), 1, []byte(`{}`))
	f.Add(uint(3), 1, []byte(``))
	f.Add(uint(7), 1, []byte(`null`))
	f.Add(uint(9), 0, []byte(`{"worker":"w"}`))
	f.Add(uint(4), 1, []byte(`{"input": {"a" : 1 , "b":"<>"}}`))
	f.Add(uint(21), 1, []byte(`{"last_seen":"2025-01-02T03:04:05+00:00"}`))

	f.Fuzz(func(t *testing.T, typeIndex uint, version int, data []byte) {
		typ := "fuzz.unknown"
		if i := typeIndex % uint(len(types)+1); int(i) < len(types) {
			typ = types[i]
		}
		env := domain.Envelope{Stream: "fuzz-1", Type: typ, SchemaVersion: version, Data: data}
		ev, err := codec.Events.Decode(&env)
		if err != nil {
			if !errors.Is(err, domain.ErrUnknownEventType) && !errors.Is(err, domain.ErrSchemaVersion) && !errors.Is(err, codec.ErrDecode) {
				t.Fatalf("Decode error %v matches none of the registry's sentinels", err)
			}
			if ev != nil {
				t.Fatalf("Decode returned %#v with an error", ev)
			}
			return
		}
		if typ == "fuzz.unknown" || version != 1 {
			t.Fatalf("decoded %q at version %d", typ, version)
		}
		if ev.EventType() != typ {
			t.Fatalf("decoded a %q as %q", typ, ev.EventType())
		}
		if len(data) != 0 && !json.Valid(data) {
			t.Fatalf("accepted data that is not JSON: %q", data)
		}
		env2, err := codec.Events.Encode(uuid.Nil, ev, oExec, "")
		if err != nil {
			t.Fatalf("decoded %#v does not encode: %v", ev, err)
		}
		ev2, err := codec.Events.Decode(&env2)
		if err != nil {
			t.Fatalf("re-decode of %s: %v", env2.Data, err)
		}
		if d := valuediff.Diff(ev2, ev); d != "" {
			t.Fatalf("decode(encode(x)) differs from x at %s\n got %#v\nwant %#v", d, ev2, ev)
		}
		// After one encode the value is canonical: a second round trip is exact.
		env3, err := codec.Events.Encode(uuid.Nil, ev2, oExec, "")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(env3.Data, env2.Data) {
			t.Fatalf("encoding is not stable: %s then %s", env2.Data, env3.Data)
		}
	})
}

// TestDecodeRemembers: Decode gives what decoding the envelope gives,
// whatever it remembers: an event id seen before with other data, another
// type or another schema version is decoded afresh, and a caller reusing
// its data buffer after Remember does not change what is remembered.
func TestDecodeRemembers(t *testing.T) {
	t.Parallel()
	r := codec.New(personRegistry(t))
	id := uuid.New()
	ada := domain.Envelope{ID: id, Stream: "test-1", Type: "test.person", SchemaVersion: 3, Data: []byte(`{"given_name":"Ada","family_name":"Lovelace","age":36}`)}
	if err := r.Remember(&ada); err != nil {
		t.Fatal(err)
	}
	want := personV3{GivenName: "Ada", FamilyName: "Lovelace", Age: 36}
	if ev, err := r.Decode(&ada); err != nil || ev != want {
		t.Fatalf("Decode after Remember = %#v, %v", ev, err)
	}
	// The same id with other data, or read at another version: decoded afresh.
	other := ada
	other.Data = []byte(`{"given_name":"Grace","family_name":"Hopper","age":85}`)
	if ev, err := r.Decode(&other); err != nil || ev != (personV3{GivenName: "Grace", FamilyName: "Hopper", Age: 85}) {
		t.Fatalf("Decode of the same id with other data = %#v, %v", ev, err)
	}
	v1 := ada
	v1.SchemaVersion, v1.Data = 1, []byte(`{"name":"Ada Lovelace","age":36}`)
	if ev, err := r.Decode(&v1); err != nil || ev != want {
		t.Fatalf("Decode v1 = %#v, %v", ev, err)
	}
	bad := ada
	bad.Data = []byte(`{"given_name":"Ada","family_name":"Lovelace","age":36,"extra":1}`)
	if _, err := r.Decode(&bad); !errors.Is(err, codec.ErrDecode) {
		t.Fatalf("Decode of the same id with an unknown field = %v, want ErrDecode", err)
	}
	wrongType := ada
	wrongType.Type = "test.other"
	wrongType.SchemaVersion = 2
	if _, err := r.Decode(&wrongType); !errors.Is(err, codec.ErrDecode) {
		t.Fatalf("Decode of the same id as another type = %v, want ErrDecode", err)
	}
	// A writer that reuses its buffer: the memo kept its own copy.
	buf := []byte(`{"given_name":"Alan","family_name":"Turing","age":41}`)
	alan := domain.Envelope{ID: uuid.New(), Type: "test.person", SchemaVersion: 3, Data: buf}
	if err := r.Remember(&alan); err != nil {
		t.Fatal(err)
	}
	copy(buf, `{"given_name":"Anne","family_name":"Turing","age":41}`)
	if ev, err := r.Decode(&alan); err != nil || ev != (personV3{GivenName: "Anne", FamilyName: "Turing", Age: 41}) {
		t.Fatalf("Decode after the buffer changed = %#v, %v", ev, err)
	}
	// Many more events than it keeps: still right, old or new.
	for i := 0; i < 40_000; i++ {
		env := domain.Envelope{ID: uuid.New(), Type: "test.person", SchemaVersion: 3, Data: fmt.Appendf(nil, `{"given_name":"n%d","age":%d}`, i, i)}
		if ev, err := r.Decode(&env); err != nil || ev != (personV3{GivenName: fmt.Sprintf("n%d", i), Age: i}) {
			t.Fatalf("Decode #%d = %#v, %v", i, ev, err)
		}
	}
	if ev, err := r.Decode(&ada); err != nil || ev != want {
		t.Fatalf("Decode of a forgotten event = %#v, %v", ev, err)
	}
}

// TestEncodeRemembersExactly: for every event type of the catalogue, Encode
// writes what json.Marshal writes, byte for byte, and what Decode gives for
// an event Encode prepared (remembered, for the types
// whose JSON round trip is exact) equals decoding its data afresh, for
// values with awkward strings (HTML characters, line separators, bytes that
// are not UTF-8) and extreme integers.
func TestEncodeRemembersExactly(t *testing.T) {
	t.Parallel()
	strs := []string{"", "plain", `<a href="x">&amp;</a>`, "line\u2028sep\u2029", "\x00\x1f\"\\", "caf\xe9", "\xff\xfe", "日本語"}
	ints := []int64{0, 1, -1, 1<<53 + 1, -1 << 63, 1<<63 - 1}
	raws := []json.RawMessage{nil, {}, json.RawMessage(`null`), json.RawMessage(`{"a":1,"b":[true,null]}`),
		json.RawMessage(`{ "a" : 1 }`), json.RawMessage(`"<b>&"`), json.RawMessage("\"\u2028\""), json.RawMessage(`1e3`), json.RawMessage(`"\u00e9"`)}
	lists := [][]json.RawMessage{nil, {}, {json.RawMessage(`1`), json.RawMessage(`{"x":"y"}`)}, {nil}, {json.RawMessage(` 2`)}, {json.RawMessage(`"&"`)}}
	for i, typ := range codec.Events.Catalogue().Types() {
		for round := 0; round < 3*len(raws); round++ {
			ev := fillEvent(t, typ, func(k reflect.Kind, field int) any {
				switch k {
				case reflect.String:
					return strs[(round+field)%len(strs)]
				case reflect.Bool:
					return (round+field)%2 == 0
				case reflect.Slice:
					return raws[(round+field)%len(raws)]
				case reflect.Array:
					return lists[(round+field)%len(lists)]
				default:
					return ints[(round+field+i)%len(ints)]
				}
			})
			env, err := codec.Events.Encode(uuid.New(), ev, oExec, "w")
			if err != nil {
				continue // refused to encode: nothing remembered either
			}
			if want, err := json.Marshal(ev); err != nil || !bytes.Equal(env.Data, want) {
				t.Fatalf("%s round %d: Encode wrote %s, json.Marshal %s (%v)", typ, round, env.Data, want, err)
			}
			got, err := codec.Events.Decode(&env)
			fresh := env
			fresh.ID = uuid.New()
			want, werr := codec.Events.Decode(&fresh)
			if (err == nil) != (werr == nil) || !reflect.DeepEqual(got, want) {
				t.Fatalf("%s round %d: Decode of the encoded event = %#v, %v; decoded afresh %#v, %v", typ, round, got, err, want, werr)
			}
		}
	}
}

// fillEvent returns a value of event type typ whose string, bool, integer,
// raw JSON (reflect.Slice) and list of raw JSON (reflect.Array) fields (not
// those of nested values) come from pick.
func fillEvent(t *testing.T, typ string, pick func(k reflect.Kind, field int) any) domain.Event {
	t.Helper()
	env := domain.Envelope{Type: typ, SchemaVersion: mustSpec(t, typ).SchemaVersion, Data: []byte(`{}`)}
	zero, err := codec.Events.Decode(&env)
	if err != nil {
		t.Fatalf("%s: a zero value does not decode: %v", typ, err)
	}
	v := reflect.New(reflect.TypeOf(zero)).Elem()
	for f := 0; f < v.NumField(); f++ {
		fv := v.Field(f)
		if !fv.CanSet() {
			continue
		}
		switch k := fv.Kind(); k {
		case reflect.String:
			fv.SetString(pick(k, f).(string))
		case reflect.Bool:
			fv.SetBool(pick(k, f).(bool))
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
			n := pick(k, f).(int64)
			if fv.OverflowInt(n) {
				n = 7
			}
			fv.SetInt(n)
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			n := pick(k, f).(int64)
			if n < 0 || fv.OverflowUint(uint64(n)) {
				n = 7
			}
			fv.SetUint(uint64(n))
		case reflect.Slice:
			switch fv.Type() {
			case reflect.TypeFor[json.RawMessage]():
				fv.Set(reflect.ValueOf(pick(reflect.Slice, f)))
			case reflect.TypeFor[[]json.RawMessage]():
				fv.Set(reflect.ValueOf(pick(reflect.Array, f)))
			}
		}
	}
	return v.Interface().(domain.Event)
}

func mustSpec(t *testing.T, typ string) domain.EventSpec {
	t.Helper()
	s, ok := codec.Events.Catalogue().Spec(typ)
	if !ok {
		t.Fatalf("no spec for %s", typ)
	}
	return s
}

// FuzzEncode: Encode writes what json.Marshal writes for any strings and raw
// JSON, and decoding it (remembered or not) gives what decoding afresh does.
func FuzzEncode(f *testing.F) {
	f.Add("w1", "inc", `{"a":[1,"<&>"]}`, int64(3))
	f.Add("caf\xe9", "\u2028\x7f\x00", ` {"a" : 1}`, int64(-1))
	f.Add("", "", "", int64(0))
	f.Fuzz(func(t *testing.T, a, b, raw string, n int64) {
		evs := []domain.Event{
			domain.ExecutionScheduled{Worker: a, Incarnation: b, Attempt: int(n), Action: b + a, Runner: a, Input: json.RawMessage(raw), TimeoutMillis: n},
			domain.QueueGranted{Execution: a, ConcurrencyKey: b},
			domain.ExecutionRequested{Action: a, Input: json.RawMessage(raw), WithItems: []json.RawMessage{json.RawMessage(raw), json.RawMessage(b)}, RequestHash: b},
			domain.ExecutionCompleted{Result: json.RawMessage(raw)},
		}
		for _, ev := range evs {
			want, merr := json.Marshal(ev)
			env, err := codec.Events.Encode(uuid.New(), ev, oExec, "w")
			if (err == nil) != (merr == nil) || (err == nil && !bytes.Equal(env.Data, want)) {
				t.Fatalf("%T: Encode wrote %q (%v), json.Marshal %q (%v)", ev, env.Data, err, want, merr)
			}
			if err != nil {
				continue
			}
			got, gerr := codec.Events.Decode(&env)
			fresh := env
			fresh.ID = uuid.New()
			again, aerr := codec.Events.Decode(&fresh)
			if (gerr == nil) != (aerr == nil) || !reflect.DeepEqual(got, again) {
				t.Fatalf("%T: Decode after Encode = %#v (%v), afresh %#v (%v)", ev, got, gerr, again, aerr)
			}
		}
	})
}

const (
	oAPI    = domain.OwnerAPI
	oExec   = domain.OwnerExecutor
	oWorker = domain.OwnerWorker
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

// BenchmarkEncodeDecode encodes a handoff and decodes it, remembered (as
// every fold of a process but the first reads it) and afresh.
func BenchmarkEncodeDecode(b *testing.B) {
	ev := domain.ExecutionScheduled{Worker: "w1", Incarnation: "i1", Attempt: 1, Action: "act", Runner: "core.noop",
		Input: json.RawMessage(`{"n":1}`), TimeoutMillis: 1000}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := codec.Events.Encode(uuid.New(), ev, oExec, "e"); err != nil {
				b.Fatal(err)
			}
		}
	})
	env, err := codec.Events.Encode(uuid.New(), ev, oExec, "e")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("decode-remembered", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := codec.Events.Decode(&env); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		fresh := env
		for b.Loop() {
			fresh.ID = uuid.UUID{}
			if _, err := codec.Events.Decode(&fresh); err != nil {
				b.Fatal(err)
			}
		}
	})
}
