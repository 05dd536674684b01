package codec

// The encode plan: for an event type whose fields are all strings, integers,
// booleans and raw JSON, Encode writes the JSON itself, byte for byte what
// json.Marshal writes, and knows when decoding it gives back the very value
// encoded, so that Encode can remember the event instead of decoding it.

import (
	"bytes"
	"encoding"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

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
