package runner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
)

// decodeStrict decodes input into dst (a pointer to a struct) and is stricter
// than encoding/json: input must be exactly one JSON object (surrounding white
// space aside), every key must be one of fields, spelled exactly (encoding/json
// would match keys case-insensitively), and no key may appear twice. A JSON
// null for a field leaves it at its zero value.
func decodeStrict(input []byte, dst any, fields ...string) error {
	dec := json.NewDecoder(bytes.NewReader(input))
	tok, err := dec.Token()
	if errors.Is(err, io.EOF) {
		return errors.New("empty input, want a JSON object")
	}
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return errors.New("want a JSON object")
	}
	seen := make(map[string]bool, len(fields))
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		key, ok := tok.(string)
		if !ok {
			return errors.New("malformed object key")
		}
		if !slices.Contains(fields, key) {
			return fmt.Errorf("unknown field %q", key)
		}
		if seen[key] {
			return fmt.Errorf("duplicate field %q", key)
		}
		seen[key] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON object")
	}

	full := json.NewDecoder(bytes.NewReader(input))
	full.DisallowUnknownFields()
	if err := full.Decode(dst); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return fmt.Errorf("field %q: got a JSON %s, want %s", ute.Field, ute.Value, ute.Type)
		}
		return err
	}
	return nil
}
