package domain

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
)

// The event catalogue: every event type's stable name, schema version,
// owners, stream and upcasters. It says what the log may hold; how an event
// becomes bytes and back is the codec's business (eventstore/codec), which
// is handed a catalogue.

// Event is a typed event payload. EventType returns its stable name, such as
// "execution.scheduled"; names are explicit constants, never derived from Go types.
type Event interface {
	EventType() string
}

// Upcaster rewrites the JSON data of one event type from one schema version to
// the next (from → from+1).
type Upcaster func(data json.RawMessage) (json.RawMessage, error)

// EventSpec describes one event type in a Registry.
type EventSpec struct {
	Type          string       // stable name
	SchemaVersion int          // the version events are written at and read as
	Owners        []Owner      // who may write it
	Stream        string       // stream category it lives in: "execution", "queue", "action", "worker", "schedule", "checkpoint" or "resource"
	Payload       reflect.Type // the Go type of its payload, a struct
}

// Registry is an event catalogue: it maps stable event names to payload
// types, schema versions, owners and upcasters. Build one with NewRegistry
// and Register; NewCatalogue builds turnstile's.
type Registry struct {
	specs     map[string]*EventSpec
	upcasters map[upcastKey]Upcaster
	sealed    bool
}

type upcastKey struct {
	typ  string
	from int
}

// Errors from Registry, and from the codecs reading events with one.
var (
	ErrUnknownEventType = errors.New("unknown event type")
	ErrSchemaVersion    = errors.New("unsupported schema version")
	ErrSealed           = errors.New("catalogue is sealed")
)

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{specs: map[string]*EventSpec{}, upcasters: map[upcastKey]Upcaster{}}
}

// Register adds an event type. example is a zero value of its payload type, a
// struct value; decoding returns values of that type. It fails if the name
// is taken, the version is below 1, no owner is given, or r is sealed.
func (r *Registry) Register(example Event, schemaVersion int, stream string, owners ...Owner) error {
	typ := example.EventType()
	if r.sealed {
		return fmt.Errorf("register %q: %w", typ, ErrSealed)
	}
	if typ == "" {
		return fmt.Errorf("register %T: empty event type", example)
	}
	if _, dup := r.specs[typ]; dup {
		return fmt.Errorf("register %q: already registered", typ)
	}
	if schemaVersion < 1 {
		return fmt.Errorf("register %q: schema version %d < 1", typ, schemaVersion)
	}
	if len(owners) == 0 {
		return fmt.Errorf("register %q: no owner", typ)
	}
	rt := reflect.TypeOf(example)
	if rt.Kind() != reflect.Struct {
		return fmt.Errorf("register %q: payload %T must be a struct value", typ, example)
	}
	r.specs[typ] = &EventSpec{Type: typ, SchemaVersion: schemaVersion, Owners: owners, Stream: stream, Payload: rt}
	return nil
}

// RegisterUpcaster adds the step that turns data of schema version from into
// from+1 for the given type. Steps chain until the registered version.
func (r *Registry) RegisterUpcaster(typ string, from int, up Upcaster) error {
	if r.sealed {
		return fmt.Errorf("upcaster for %q: %w", typ, ErrSealed)
	}
	spec, ok := r.specs[typ]
	if !ok {
		return fmt.Errorf("upcaster for %q: %w", typ, ErrUnknownEventType)
	}
	if from < 1 || from >= spec.SchemaVersion {
		return fmt.Errorf("upcaster for %q from version %d: must be in 1..%d", typ, from, spec.SchemaVersion-1)
	}
	k := upcastKey{typ, from}
	if _, dup := r.upcasters[k]; dup {
		return fmt.Errorf("upcaster for %q from version %d: already registered", typ, from)
	}
	r.upcasters[k] = up
	return nil
}

// Seal makes r refuse any further registration, so that what was read
// from it stays true.
func (r *Registry) Seal() { r.sealed = true }

// Spec returns the description of an event type.
func (r *Registry) Spec(typ string) (EventSpec, bool) {
	s, ok := r.specs[typ]
	if !ok {
		return EventSpec{}, false
	}
	return *s, true
}

// Upcaster returns the step from schema version from to from+1 of typ.
func (r *Registry) Upcaster(typ string, from int) (Upcaster, bool) {
	up, ok := r.upcasters[upcastKey{typ, from}]
	return up, ok
}

// Types lists the registered event types, sorted.
func (r *Registry) Types() []string {
	out := make([]string, 0, len(r.specs))
	for t := range r.specs {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}
