// Strict JSON: encoding/json matches object keys to fields without regard
// to case and lets a later duplicate key win. The API takes neither: a key
// must spell its field exactly, and no object (an execution's input
// included) may name a key twice, so what the log records is what the
// client meant, and every reader of it reads the same thing.
package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// strictError is a body that is valid JSON but not strict JSON.
type strictError struct {
	unknown bool // a key that matches a field only without regard to case
	msg     string
}

func (e *strictError) Error() string { return e.msg }

// checkStrict walks the JSON text raw (already decoded into a value of type
// t without error, so it is valid JSON) and reports the first key that
// spells a field of t in another case, and the first key named twice in one
// object, at any depth. It scans the bytes itself: a request's body costs
// no allocation here unless a key holds an escape.
func checkStrict(raw []byte, t reflect.Type) error {
	type frame struct {
		object bool
		fields map[string]reflect.Type // a struct's fields (nil: keys not ours to check)
		elem   reflect.Type            // a map's or a slice's element type
		keys   [][]byte                // the object's keys so far
		next   reflect.Type            // the type of the value after the last key
		key    []byte                  // the key this value is under (nil: the body, or an array's element)
		depth  int
	}
	where := func(key []byte, depth int) string { // formatted only for an error
		if depth == 0 {
			return "the body"
		}
		if key == nil {
			return "an array's element"
		}
		return fmt.Sprintf("%q", clip(string(key)))
	}
	var stack []frame
	open := func(t reflect.Type, object bool, key []byte) {
		f := frame{object: object, key: key, depth: len(stack)}
		if t = shape(t); t != nil {
			switch {
			case object && t.Kind() == reflect.Struct:
				f.fields = fieldsOf(t)
			case object && t.Kind() == reflect.Map, !object && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array):
				f.elem = t.Elem()
			}
		}
		stack = append(stack, f)
	}
	valueType := func() (reflect.Type, []byte) { // of a value about to start, and its key
		if len(stack) == 0 {
			return t, nil
		}
		f := &stack[len(stack)-1]
		if f.object {
			return f.next, f.keys[len(f.keys)-1]
		}
		return f.elem, nil
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '{', '[':
			vt, key := valueType()
			open(vt, c == '{', key)
		case '}', ']':
			stack = stack[:len(stack)-1]
		case '"':
			j := i + 1
			escaped := false
			for ; raw[j] != '"'; j++ {
				if raw[j] == '\\' {
					escaped = true
					j++
				}
			}
			str := raw[i+1 : j]
			i = j
			if len(stack) == 0 || !stack[len(stack)-1].object || !isKey(raw, j+1) {
				continue
			}
			if escaped {
				var k string
				if err := json.Unmarshal(raw[i-len(str)-1:j+1], &k); err != nil {
					return err
				}
				str = []byte(k)
			}
			f := &stack[len(stack)-1]
			for _, k := range f.keys {
				if bytes.Equal(k, str) {
					return &strictError{msg: fmt.Sprintf("%s names the key %q twice", where(f.key, f.depth), clip(string(str)))}
				}
			}
			f.keys = append(f.keys, str)
			f.next = f.elem
			if f.fields != nil {
				ft, ok := f.fields[string(str)]
				if !ok {
					for name := range f.fields {
						if strings.EqualFold(name, string(str)) {
							return &strictError{unknown: true, msg: fmt.Sprintf("unknown field %q in %s: keys are case-sensitive; did you mean %q?", clip(string(str)), where(f.key, f.depth), name)}
						}
					}
				}
				f.next = ft
			}
		}
	}
	return nil
}

// isKey reports whether the string that ended just before raw[i] is an
// object key: a ':' follows it (after blanks).
func isKey(raw []byte, i int) bool {
	for ; i < len(raw); i++ {
		switch raw[i] {
		case ' ', '\t', '\n', '\r':
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// strictShaper is a type with its own decoder whose keys are still those of
// another type's fields (policyBody decodes into a wire.Policy).
type strictShaper interface{ strictShape() reflect.Type }

var strictShaperType = reflect.TypeFor[strictShaper]()

// shape returns the type whose fields or elements the JSON of t holds, or
// nil when t's keys are not ours to check (a raw value, an interface, a
// type with its own decoder): then only duplicate keys are checked.
func shape(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface {
		return nil
	}
	if reflect.PointerTo(t).Implements(strictShaperType) {
		return shape(reflect.Zero(reflect.PointerTo(t)).Interface().(strictShaper).strictShape())
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	return t
}

var fieldCache sync.Map // reflect.Type → map[string]reflect.Type

// fieldsOf returns the JSON names of struct t's fields (embedded structs'
// fields included) and their types.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	m := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			if st := shape(f.Type); st != nil && st.Kind() == reflect.Struct {
				for k, v := range fieldsOf(st) {
					m[k] = v
				}
				continue
			}
		}
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		m[name] = f.Type
	}
	fieldCache.Store(t, m)
	return m
}
