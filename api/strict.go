// Strict JSON: encoding/json matches object keys to fields without regard
// to case and lets a later duplicate key win. The API takes neither: a key
// must spell its field exactly, and no object (an execution's input
// included) may name a key twice, so what the log records is what the
// client meant, and every reader of it reads the same thing.
package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
// t without error) and reports the first key that spells a field of t in
// another case, and the first key named twice in one object, at any depth.
func checkStrict(raw []byte, t reflect.Type) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	err := strictValue(dec, t, "the body")
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// shape returns the type whose fields or elements the JSON of t holds, or
// nil when t's keys are not ours to check (a raw value, an interface, a
// type with its own decoder): then only duplicate keys are checked.
func shape(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() == reflect.Interface || reflect.PointerTo(t).Implements(unmarshalerType) {
		return nil
	}
	return t
}

func strictValue(dec *json.Decoder, t reflect.Type, where string) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	t = shape(t)
	switch tok {
	case json.Delim('{'):
		return strictObject(dec, t, where)
	case json.Delim('['):
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		for i := 0; dec.More(); i++ {
			if err := strictValue(dec, elem, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
		_, err := dec.Token() // ']'
		return err
	}
	return nil
}

func strictObject(dec *json.Decoder, t reflect.Type, where string) error {
	var fields map[string]reflect.Type
	var elem reflect.Type
	if t != nil {
		switch t.Kind() {
		case reflect.Struct:
			fields = fieldsOf(t)
		case reflect.Map:
			elem = t.Elem()
		}
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, _ := tok.(string)
		if seen[key] {
			return &strictError{msg: fmt.Sprintf("%s names the key %q twice", where, clip(key))}
		}
		seen[key] = true
		vt := elem
		if fields != nil {
			ft, ok := fields[key]
			if !ok {
				for name := range fields {
					if strings.EqualFold(name, key) {
						return &strictError{unknown: true, msg: fmt.Sprintf("unknown field %q in %s: keys are case-sensitive; did you mean %q?", clip(key), where, name)}
					}
				}
			}
			vt = ft
		}
		if err := strictValue(dec, vt, fmt.Sprintf("%q", clip(key))); err != nil {
			return err
		}
	}
	_, err := dec.Token() // '}'
	return err
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
