package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
)

// strictInput marks the built-in runners whose input is decoded strictly
// (core.sleep, core.fail, core.shell, core.http): inputFields names every
// top-level field they read; any other field is refused.
type strictInput interface{ inputFields() []string }

func (sleepRunner) inputFields() []string { return []string{"seconds"} }
func (failRunner) inputFields() []string  { return []string{"message"} }
func (*shellRunner) inputFields() []string {
	return []string{"command", "args", "env", "dir"}
}
func (*httpRunner) inputFields() []string {
	return []string{"method", "url", "path", "headers", "body", "fail_on_status"}
}

// RunKeyed is RunWith for an action whose policy names keyField as its
// concurrency_key (empty: none). The input field keyField names is the
// action's, there to pick its queue: a built-in runner that decodes its
// input strictly ignores it (it still refuses every other unknown field),
// unless keyField is one of the runner's own fields, which it then reads
// and checks as usual. core.noop and core.echo see the input unchanged (the
// one ignores it, the other returns it whole), and so does every runner that
// is not built in: the field is its to read.
// The key fields of the keyed resources the action needs (more) are
// ignored the same way.
func RunKeyed(ctx context.Context, r Runner, config, input json.RawMessage, keyField string, more ...string) (json.RawMessage, error) {
	if s, ok := r.(strictInput); ok {
		if keyField != "" && !slices.Contains(s.inputFields(), keyField) {
			input = withoutField(input, keyField)
		}
		for _, f := range more {
			if f != "" && !slices.Contains(s.inputFields(), f) {
				input = withoutField(input, f)
			}
		}
	}
	return RunWith(ctx, r, config, input)
}

// withoutField returns input without its top-level field name (every
// occurrence), the other fields as they were, in their order (a repeated
// one stays repeated, for the runner to refuse). Input that is not one JSON
// object, or has no such field, is returned unchanged, for the runner to
// judge.
func withoutField(input json.RawMessage, name string) json.RawMessage {
	trimmed := bytes.TrimSpace(input)
	if len(trimmed) == 0 || trimmed[0] != '{' ||
		!bytes.Contains(trimmed, []byte(name)) && !bytes.ContainsRune(trimmed, '\\') {
		return input // cannot hold the field, not even spelled with escapes
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if _, err := dec.Token(); err != nil { // the opening '{'
		return input
	}
	out := make([]byte, 0, len(trimmed))
	out = append(out, '{')
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return input
		}
		key, ok := tok.(string)
		if !ok {
			return input
		}
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return input
		}
		if key == name {
			found = true
			continue
		}
		if len(out) > 1 {
			out = append(out, ',')
		}
		k, _ := json.Marshal(key) // a string always marshals
		out = append(out, k...)
		out = append(out, ':')
		out = append(out, val...)
	}
	if _, err := dec.Token(); err != nil { // the closing '}'
		return input
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return input // trailing data: the runner refuses it
	}
	if !found {
		return input
	}
	return append(out, '}')
}
