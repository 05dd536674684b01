package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// decodeJSON reads one JSON value from r's body into dst: at most max bytes
// (413 beyond), UTF-8 (JSON's encoding: raw values such as an execution's
// input are kept and served as they came), no unknown fields, keys spelled
// in their field's exact case, no key twice in one object at any depth
// (checkStrict), nothing after the value. The Content-Type was checked
// before any route ran (guard: JSON, or no body and no type). An empty body
// is allowed only when optional is true (dst is left as it is).
func decodeJSON(w http.ResponseWriter, r *http.Request, max int64, dst any, optional bool) *Problem {
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, max))
	if err != nil {
		return jsonProblem(err, max)
	}
	if !utf8.Valid(raw) {
		return typed(typeInvalidJSON, http.StatusBadRequest, "the request body is not UTF-8")
	}
	if tooDeep(raw, MaxJSONDepth) {
		return typed(typeInvalidJSON, http.StatusBadRequest, "the request body nests arrays and objects more than %d levels deep", MaxJSONDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	err = dec.Decode(dst)
	if errors.Is(err, io.EOF) {
		if optional {
			return nil
		}
		return typed(typeInvalidJSON, http.StatusBadRequest, "the request body is empty: a JSON object is required")
	}
	if err != nil {
		return jsonProblem(err, max)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return typed(typeInvalidJSON, http.StatusBadRequest, "the body holds more than one JSON value")
	}
	var strict *strictError
	if err := checkStrict(raw, reflect.TypeOf(dst)); errors.As(err, &strict) {
		if strict.unknown {
			return typed(typeUnknownField, http.StatusBadRequest, "%s", strict.msg)
		}
		return typed(typeInvalidJSON, http.StatusBadRequest, "%s", strict.msg)
	} else if err != nil {
		return jsonProblem(err, max)
	}
	return nil
}

// MaxJSONDepth bounds how deeply a request body's arrays and objects nest
// (an execution's input included): deeper bodies get 400 and nothing is
// stored. Every reader of the log decodes what was accepted, so a bound
// here keeps a hostile body from costing each of them.
const MaxJSONDepth = 64

// tooDeep reports whether the JSON text raw nests arrays and objects more
// than limit levels deep (brackets inside strings do not count). It does not
// validate: the decoder does that.
func tooDeep(raw []byte, limit int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '[' || c == '{':
			if depth++; depth > limit {
				return true
			}
		case c == ']' || c == '}':
			depth--
		}
	}
	return false
}

func jsonProblem(err error, max int64) *Problem {
	var (
		tooLarge *http.MaxBytesError
		syntax   *json.SyntaxError
		typeErr  *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &tooLarge):
		return typed(typeTooLarge, http.StatusRequestEntityTooLarge, "the request body is larger than %d bytes", max)
	case errors.As(err, &syntax):
		return typed(typeInvalidJSON, http.StatusBadRequest, "malformed JSON at byte %d: %v", syntax.Offset, err)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "the body"
		}
		return typed(typeInvalidJSON, http.StatusBadRequest, "%s must be %s, not JSON %s", field, typeName(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return typed(typeInvalidJSON, http.StatusBadRequest, "malformed JSON: the body ends in the middle of a value")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return typed(typeUnknownField, http.StatusBadRequest, "unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return typed(typeInvalidJSON, http.StatusBadRequest, "malformed JSON: %v", err)
	}
}

func typeName(kind string) string {
	switch kind {
	case "int", "int64", "uint64", "float64":
		return "a number"
	case "string":
		return "a string"
	case "bool":
		return "true or false"
	case "struct", "map":
		return "an object"
	case "slice":
		return "an array"
	}
	return kind
}

// Limits on identifiers in paths, queries and headers.
const (
	maxIDLen         = 100
	maxStreamLen     = 200
	maxIdemKeyLen    = 200
	defaultPageLimit = 100
	maxPageLimit     = 1000
)

// checkToken validates an id-like value: 1..max printable, non-space runes.
func checkToken(what, v string, max int) *Problem {
	if v == "" {
		return typed(typeInvalid, http.StatusBadRequest, "%s is empty", what)
	}
	if len(v) > max {
		return typed(typeInvalid, http.StatusBadRequest, "%s is %d bytes long; the limit is %d", what, len(v), max)
	}
	for _, r := range v {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return typed(typeInvalid, http.StatusBadRequest, "%s holds a space or control character", what)
		}
	}
	return nil
}

// queryUint reads an optional non-negative integer query parameter.
func queryUint(r *http.Request, name string, def uint64) (uint64, *Problem) {
	s := r.URL.Query().Get(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, typed(typeInvalid, http.StatusBadRequest, "query parameter %s=%q is not a non-negative integer", name, clip(s))
	}
	return n, nil
}

// queryLimit reads ?limit=, 1..maxPageLimit, default def.
func queryLimit(r *http.Request, def int) (int, *Problem) {
	n, p := queryUint(r, "limit", uint64(def))
	if p != nil {
		return 0, p
	}
	if n < 1 || n > maxPageLimit {
		return 0, typed(typeInvalid, http.StatusBadRequest, "limit=%d is out of range 1..%d", n, maxPageLimit)
	}
	return int(n), nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// queryOnly rejects query parameters the route does not know, so a typo
// (?stauts=) is an error instead of a silently ignored filter.
func queryOnly(r *http.Request, known ...string) *Problem {
	for k := range r.URL.Query() {
		ok := false
		for _, n := range known {
			ok = ok || k == n
		}
		if !ok {
			return typed(typeInvalid, http.StatusBadRequest, "unknown query parameter %q (this route takes: %s)", clip(k), fmt.Sprint(known))
		}
	}
	return nil
}
