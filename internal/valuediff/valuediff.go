// Package valuediff compares decoded event payloads for tests: JSON as
// values, times as instants, nil and empty slices alike.
package valuediff

import (
	"bytes"
	"encoding/json"
	"reflect"
	"time"
)

var rawMessageType = reflect.TypeFor[json.RawMessage]()
var timeType = reflect.TypeFor[time.Time]()

// Diff compares two decoded payloads: json.RawMessage fields as JSON
// (whitespace and escaping aside), time.Time fields as instants, nil and
// empty slices alike, everything else with reflect.DeepEqual semantics. It
// returns a description of the first difference, or "" when they are the same.
func Diff(a, b any) string {
	return diffValue("", reflect.ValueOf(a), reflect.ValueOf(b))
}

func diffValue(path string, a, b reflect.Value) string {
	if a.IsValid() != b.IsValid() {
		return path + ": one side is missing"
	}
	if !a.IsValid() {
		return ""
	}
	if a.Type() != b.Type() {
		return path + ": types " + a.Type().String() + " and " + b.Type().String()
	}
	switch {
	case a.Type() == rawMessageType:
		if !SameJSON(a.Bytes(), b.Bytes()) {
			return path + ": JSON " + string(a.Bytes()) + " and " + string(b.Bytes())
		}
		return ""
	case a.Type() == timeType:
		ta, tb := a.Interface().(time.Time), b.Interface().(time.Time)
		if !ta.Equal(tb) {
			return path + ": times " + ta.String() + " and " + tb.String()
		}
		return ""
	}
	switch a.Kind() {
	case reflect.Struct:
		for i := range a.NumField() {
			if d := diffValue(path+"."+a.Type().Field(i).Name, a.Field(i), b.Field(i)); d != "" {
				return d
			}
		}
		return ""
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			if a.IsNil() != b.IsNil() {
				return path + ": nil and non-nil"
			}
			return ""
		}
		return diffValue(path, a.Elem(), b.Elem())
	case reflect.Slice:
		// nil and empty are the same list in JSON (omitempty drops both).
		if a.Len() != b.Len() {
			return path + ": slices differ in length"
		}
		for i := range a.Len() {
			if d := diffValue(path+"[]", a.Index(i), b.Index(i)); d != "" {
				return d
			}
		}
		return ""
	}
	if !reflect.DeepEqual(a.Interface(), b.Interface()) {
		return path + ": values differ"
	}
	return ""
}

// SameJSON reports whether two JSON texts are the same value; numbers are
// compared by their text, so no precision is lost.
func SameJSON(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	decode := func(p []byte) (any, bool) {
		dec := json.NewDecoder(bytes.NewReader(p))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, false
		}
		return v, true
	}
	va, oka := decode(a)
	vb, okb := decode(b)
	if !oka || !okb {
		return bytes.Equal(a, b)
	}
	return reflect.DeepEqual(va, vb)
}
