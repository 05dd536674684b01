// Package codec turns events into the bytes the log holds and back: Encode
// writes an event's JSON at its current schema version, Decode upcasts and
// strictly unmarshals it, and both keep what they did for the other readers
// of the process, so that an event is decoded once however many folds read it.
// A Codec is handed the event catalogue it serves (domain.NewCatalogue).
package codec

import (
	"bytes"
	"encoding"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

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

// A plan lists the fields of an event type whose JSON round trip can be
// exact: nil when some field's cannot (see plan.appendJSON).
type plan []planField

type planField struct {
	index     int
	kind      fieldKind
	omitEmpty bool
	key       []byte // `"name":`
}

type fieldKind uint8

const (
	fieldScalar   fieldKind = iota // a bool or an integer
	fieldString                    // exact when valid UTF-8
	fieldRaw                       // json.RawMessage: exact when canonical (see canonicalJSON)
	fieldRawSlice                  // []json.RawMessage: exact when each element is
)

var (
	rawType      = reflect.TypeFor[json.RawMessage]()
	rawSliceType = reflect.TypeFor[[]json.RawMessage]()
)

// planOf returns the plan of struct type t, or nil when a field is of
// another kind, unexported, embedded, left out of JSON ("-"), or shares its
// JSON name with another (JSON drops both, and matches names without case).
func planOf(t reflect.Type) plan {
	if customJSON(t) {
		return nil
	}
	names := map[string]bool{}
	p := plan{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		if !f.IsExported() || f.Anonymous || tag == "-" || names[strings.ToLower(name)] ||
			slices.Contains(strings.Split(opts, ","), "string") || (f.Type != rawType && customJSON(f.Type)) {
			return nil
		}
		names[strings.ToLower(name)] = true
		key, err := json.Marshal(name)
		if err != nil {
			return nil
		}
		pf := planField{index: i, omitEmpty: slices.Contains(strings.Split(opts, ","), "omitempty"), key: append(key, ':')}
		switch {
		case f.Type == rawType:
			pf.kind = fieldRaw
		case f.Type == rawSliceType:
			pf.kind = fieldRawSlice
		case f.Type.Kind() == reflect.String:
			pf.kind = fieldString
		case f.Type.Kind() == reflect.Bool, f.Type.Kind() >= reflect.Int && f.Type.Kind() <= reflect.Uint64:
			pf.kind = fieldScalar
		default:
			return nil
		}
		p = append(p, pf)
	}
	return p
}

// customJSON reports whether t (or *t) has JSON or text methods of its own.
func customJSON(t reflect.Type) bool {
	for _, i := range []reflect.Type{
		reflect.TypeFor[json.Marshaler](), reflect.TypeFor[json.Unmarshaler](),
		reflect.TypeFor[encoding.TextMarshaler](), reflect.TypeFor[encoding.TextUnmarshaler](),
	} {
		if t.Implements(i) || reflect.PointerTo(t).Implements(i) {
			return true
		}
	}
	return false
}

// appendJSON appends to dst the JSON that json.Marshal writes for the
// struct v, byte for byte, and reports true, when decoding that JSON gives
// back v itself: its strings are valid UTF-8 (JSON would replace other
// bytes), its raw JSON is already in the form json.Marshal writes it
// (compact, HTML characters escaped), and no raw JSON or list of it is empty
// but for a nil one that JSON leaves out (omitempty). Otherwise it reports
// false, and what it appended is to be dropped. It costs a fraction of
// json.Marshal.
func (p plan) appendJSON(dst []byte, v reflect.Value) ([]byte, bool) {
	dst = append(dst, '{')
	first := true
	for _, f := range p {
		fv := v.Field(f.index)
		if f.omitEmpty && fv.IsZero() && f.kind != fieldRaw && f.kind != fieldRawSlice {
			continue
		}
		start := len(dst)
		if !first {
			dst = append(dst, ',')
		}
		dst = append(dst, f.key...)
		switch f.kind {
		case fieldString:
			var ok bool
			if dst, ok = appendJSONString(dst, fv.String()); !ok {
				return dst, false
			}
		case fieldScalar:
			switch k := fv.Kind(); {
			case k == reflect.Bool:
				dst = strconv.AppendBool(dst, fv.Bool())
			case k >= reflect.Int && k <= reflect.Int64:
				dst = strconv.AppendInt(dst, fv.Int(), 10)
			default:
				dst = strconv.AppendUint(dst, fv.Uint(), 10)
			}
		case fieldRaw:
			b := fv.Bytes()
			if !exactRaw(b, fv.IsNil(), f.omitEmpty) {
				return dst, false
			}
			if len(b) == 0 {
				dst = dst[:start] // left out (omitempty)
				continue
			}
			dst = append(dst, b...)
		case fieldRawSlice:
			if fv.Len() == 0 {
				if !fv.IsNil() || !f.omitEmpty {
					return dst, false
				}
				dst = dst[:start]
				continue
			}
			dst = append(dst, '[')
			for i := 0; i < fv.Len(); i++ {
				e := fv.Index(i).Bytes()
				if len(e) == 0 || !canonicalJSON(e) {
					return dst, false
				}
				if i > 0 {
					dst = append(dst, ',')
				}
				dst = append(dst, e...)
			}
			dst = append(dst, ']')
		}
		first = false
	}
	return append(dst, '}'), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as encoding/json writes a string (HTML
// characters, control characters, U+2028 and U+2029 escaped); false if s is
// not valid UTF-8 (which encoding/json would change).
func appendJSONString(dst []byte, s string) ([]byte, bool) {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		b := s[i]
		if b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		c, size := utf8.DecodeRuneInString(s[i:])
		if c == utf8.RuneError && size == 1 {
			return dst, false
		}
		if c == '\u2028' || c == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[c&0xF])
			start = i + size
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), true
}

func exactRaw(b []byte, isNil, omitEmpty bool) bool {
	if len(b) == 0 {
		return isNil && omitEmpty
	}
	return canonicalJSON(b)
}

var scratch = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

var compactBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// canonicalJSON reports whether b is valid JSON exactly as json.Marshal
// writes a json.RawMessage: compact, with no '<', '>', '&', U+2028 or
// U+2029 (which it escapes).
func canonicalJSON(b []byte) bool {
	if bytes.ContainsAny(b, "<>&\u2028\u2029") {
		return false
	}
	buf := compactBufs.Get().(*bytes.Buffer)
	defer compactBufs.Put(buf)
	buf.Reset()
	return json.Compact(buf, b) == nil && bytes.Equal(buf.Bytes(), b)
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

// memoSets × memoWays is how many decoded events a Codec remembers:
// enough for the folds of one process to read an event within some ten
// thousand events of each other (each reads the log as it commits).
const (
	memoBits = 14
	memoSets = 1 << memoBits
	memoWays = 2
)

// memo remembers recently decoded events by id in a set-associative table:
// an id's set is picked by a hash of it, and a new event pushes the older
// of the set's two out. A look-up reads one set, where a map of that size
// cost two misses of the processor's cache and a probe.
type memo struct {
	mu    sync.Mutex
	slots []memoSlot // memoSets × memoWays, allocated on first use
}

type memoSlot struct {
	id     uuid.UUID
	typ    string
	schema int
	data   []byte
	ev     domain.Event
}

// memoSet returns the index of the first slot of id's set.
func memoSet(id uuid.UUID) int {
	h := binary.LittleEndian.Uint64(id[:8]) ^ binary.LittleEndian.Uint64(id[8:])*0x9e3779b97f4a7c15
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	return int(h>>(64-memoBits)) * memoWays
}

func (m *memo) get(env *domain.Envelope) (domain.Event, bool) {
	if env.ID == (uuid.UUID{}) {
		return nil, false
	}
	i := memoSet(env.ID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		return nil, false
	}
	for w := range memoWays {
		e := &m.slots[i+w]
		if e.id == env.ID {
			if e.typ != env.Type || e.schema != env.SchemaVersion || !bytes.Equal(e.data, env.Data) {
				return nil, false
			}
			return e.ev, true
		}
	}
	return nil, false
}

func (m *memo) put(env *domain.Envelope, ev domain.Event) {
	if env.ID == (uuid.UUID{}) {
		return
	}
	// A copy: the caller may reuse its buffer.
	e := memoSlot{id: env.ID, typ: env.Type, schema: env.SchemaVersion, data: bytes.Clone(env.Data), ev: ev}
	i := memoSet(env.ID)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.slots == nil {
		m.slots = make([]memoSlot, memoSets*memoWays)
	}
	set := m.slots[i : i+memoWays]
	for w := range set {
		if set[w].id == env.ID {
			set[w] = e
			return
		}
	}
	copy(set[1:], set[:len(set)-1]) // the oldest leaves
	set[0] = e
}

// forget drops everything remembered.
func (m *memo) forget() {
	m.mu.Lock()
	m.slots = nil
	m.mu.Unlock()
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
