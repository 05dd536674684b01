// Package codec turns events into the bytes the log holds and back: Encode
// writes an event's JSON at its current schema version, Decode upcasts and
// strictly unmarshals it, and both keep what they did for the other readers
// of the process, so that an event is decoded once however many folds read it.
// A Codec is handed the event catalogue it serves (domain.NewCatalogue).
package codec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
)

// Codec encodes and decodes the events of one catalogue.
type Codec struct {
	cat   *domain.Registry
	types map[string]*entry
	memo  memo
}

// entry is what a Codec knows of one event type.
type entry struct {
	spec domain.EventSpec
	// plan, if not nil, writes the JSON of a value and tells whether
	// decoding it gives back that very value (see plan.appendJSON).
	plan plan
}

// ErrDecode: event data does not decode.
var ErrDecode = errors.New("event data does not decode")

// Events is the codec of turnstile's catalogue that the parts of a process
// share, so that they share what it remembers.
var Events = New(domain.NewCatalogue())

// New returns a codec of the event types in cat, as cat has them now: cat
// is read once, so register everything before (domain.NewCatalogue is
// sealed). Upcasters are looked up in cat as events need them.
func New(cat *domain.Registry) *Codec {
	c := &Codec{cat: cat, types: map[string]*entry{}}
	for _, typ := range cat.Types() {
		spec, _ := cat.Spec(typ)
		c.types[typ] = &entry{spec: spec, plan: planOf(spec.Payload)}
	}
	return c
}

// Catalogue returns the catalogue c serves.
func (c *Codec) Catalogue() *domain.Registry { return c.cat }

// Encode builds an envelope for ev at the current schema version, with the
// given id, owner and writer. The store fills stream position and time.
func (c *Codec) Encode(id uuid.UUID, ev domain.Event, owner domain.Owner, writer string) (domain.Envelope, error) {
	t, ok := c.types[ev.EventType()]
	if !ok {
		return domain.Envelope{}, fmt.Errorf("encode %q: %w", ev.EventType(), domain.ErrUnknownEventType)
	}
	spec := &t.spec
	var data []byte
	exact := false
	if t.plan != nil {
		bp := scratch.Get().(*[]byte)
		*bp, exact = t.plan.appendJSON((*bp)[:0], reflect.ValueOf(ev))
		if exact {
			data = bytes.Clone(*bp) // at its size
		}
		if cap(*bp) <= 64<<10 {
			scratch.Put(bp)
		}
	}
	if !exact {
		var err error
		if data, err = json.Marshal(ev); err != nil {
			return domain.Envelope{}, fmt.Errorf("encode %q: %w", spec.Type, err)
		}
	}
	env := domain.Envelope{ID: id, Type: spec.Type, SchemaVersion: spec.SchemaVersion, Owner: owner, Writer: writer, Data: data}
	if exact {
		c.memo.put(&env, ev) // what Decode would give: nothing to decode
	}
	return env, nil
}

// Remember decodes env as Decode does and keeps the result for the readers
// of this process (see Decode): a writer calls it for the events it is
// about to append, so that its own goroutine pays for the decoding, not
// the folds that read the log one event after another. It returns Decode's
// error.
func (c *Codec) Remember(env *domain.Envelope) error {
	_, err := c.Decode(env)
	return err
}

// Upcast returns env's data at the registered schema version, applying the
// upcaster chain from env.SchemaVersion.
func (c *Codec) Upcast(env *domain.Envelope) (json.RawMessage, error) {
	t, ok := c.types[env.Type]
	if !ok {
		return nil, fmt.Errorf("decode %q at %s@%d: %w", env.Type, env.Stream, env.Version, domain.ErrUnknownEventType)
	}
	data := env.Data
	if env.SchemaVersion > t.spec.SchemaVersion || env.SchemaVersion < 1 {
		return nil, fmt.Errorf("decode %q at %s@%d: version %d, this build reads up to %d: %w",
			env.Type, env.Stream, env.Version, env.SchemaVersion, t.spec.SchemaVersion, domain.ErrSchemaVersion)
	}
	for v := env.SchemaVersion; v < t.spec.SchemaVersion; v++ {
		up, ok := c.cat.Upcaster(env.Type, v)
		if !ok {
			return nil, fmt.Errorf("decode %q at %s@%d: no upcaster from version %d: %w", env.Type, env.Stream, env.Version, v, domain.ErrSchemaVersion)
		}
		var err error
		if data, err = up(data); err != nil {
			return nil, fmt.Errorf("decode %q at %s@%d: upcast from version %d: %w", env.Type, env.Stream, env.Version, v, err)
		}
	}
	return data, nil
}

// Decode returns env's payload as its registered Go type, upcast to the
// current schema version. Unknown fields in stored data are refused, so an
// event that does not match its schema is reported, not half-read.
//
// Decode remembers what it decoded recently, by event id: an event that
// several folds of one process read (the executor's, the read model's, the
// forwarder's, a worker's), or that Encode prepared, is decoded once. A
// remembered event is returned only for the same type, schema version and
// data, byte for byte, so the result is the same as decoding again. The
// returned event is shared: callers must not modify what its fields refer to.
func (c *Codec) Decode(env *domain.Envelope) (domain.Event, error) {
	if ev, ok := c.memo.get(env); ok {
		return ev, nil
	}
	data, err := c.Upcast(env)
	if err != nil {
		return nil, err
	}
	p := reflect.New(c.types[env.Type].spec.Payload)
	if err := strictUnmarshal(data, p.Interface()); err != nil {
		return nil, fmt.Errorf("decode %q at %s@%d: %w: %w", env.Type, env.Stream, env.Version, ErrDecode, err)
	}
	ev := p.Elem().Interface().(domain.Event)
	c.memo.put(env, ev)
	return ev, nil
}

func strictUnmarshal(data []byte, v any) error {
	if len(data) == 0 {
		data = []byte("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	// dec.More would miss a stray ']' or '}' after the value.
	if len(bytes.Trim(data[dec.InputOffset():], " \t\r\n")) != 0 {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}
