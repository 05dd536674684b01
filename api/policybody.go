package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"reflect"
	"strings"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
)

// policyBody is the body of POST /api/v1/actions and PUT …/policy: a
// wire.Policy decoded strictly, remembering which fields the client wrote
// as 0. In a policy a field left out takes its default; a field written
// as 0 is a value, and where 0 is out of range (max_concurrent: 0) it is
// refused instead of being taken for "default" (it used to become 1).
type policyBody struct {
	wire.Policy
	zeros []string // fields written explicitly as 0 whose range excludes 0
}

// zeroRanges names the policy fields whose range excludes 0, with the
// range a refusal states.
var zeroRanges = []struct{ field, rng string }{
	{"max_concurrent", "1..100000 (default 1)"},
	{"max_queue_length", "1..10000000 (default 10000)"},
	{"timeout_seconds", "above 0, at most 604800 (default 3600)"},
	{"scheduled_timeout_seconds", "above 0, at most 604800 (default 300)"},
	{"max_attempts", "1..100 (default 3)"},
}

// strictShape: a policy body's keys are wire.Policy's (see checkStrict).
func (*policyBody) strictShape() reflect.Type { return reflect.TypeFor[wire.Policy]() }

func (b *policyBody) UnmarshalJSON(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&b.Policy); err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	b.zeros = nil
	for _, z := range zeroRanges {
		if v, ok := fields[z.field]; ok && isZero(v) {
			b.zeros = append(b.zeros, z.field+" 0 is out of range "+z.rng+": leave it out for the default")
		}
	}
	return nil
}

// isZero reports whether the JSON number v is 0 (0, 0.0, -0, 0e5).
func isZero(v json.RawMessage) bool {
	var f float64
	return json.Unmarshal(v, &f) == nil && f == 0
}

// refused returns a 400 naming every field written as an out-of-range 0.
func (b *policyBody) refused() *Problem {
	if len(b.zeros) == 0 {
		return nil
	}
	return typed(typeInvalid, http.StatusBadRequest, "%v: %s", domain.ErrInvalidPolicy, strings.Join(b.zeros, "; "))
}
