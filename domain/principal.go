package domain

import (
	"encoding/json"
	"fmt"
)

// Principal is who asked for an event through the API: the name of the
// bearer token and its role. The log keeps it in the event's metadata
// (PrincipalMetadata), so the audit and the replay can say who did what.
// The zero Principal is an anonymous caller (a server with no tokens).
type Principal struct {
	Name string `json:"principal"`
	Role string `json:"role,omitempty"`
}

// MaxPrincipalLen bounds a principal's name.
const MaxPrincipalLen = 64

// ValidatePrincipalName checks a token's name: 1..MaxPrincipalLen bytes of
// ASCII letters, digits, '.', '_' and '-'.
func ValidatePrincipalName(name string) error {
	if name == "" || len(name) > MaxPrincipalLen {
		return fmt.Errorf("a principal's name must be 1..%d bytes, not %d", MaxPrincipalLen, len(name))
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("principal name %q: only letters, digits, '.', '_' and '-' are allowed", name)
		}
	}
	return nil
}

// PrincipalMetadata is the metadata of an event written for p: nil for the
// anonymous caller.
func PrincipalMetadata(p Principal) json.RawMessage {
	if p.Name == "" {
		return nil
	}
	b, _ := json.Marshal(p) // a struct of two strings always encodes
	return b
}

// PrincipalOf reads the principal an event's metadata records. ok is false
// when it records none; err is set when the metadata is not a JSON object or
// names an invalid principal.
func PrincipalOf(env *Envelope) (p Principal, ok bool, err error) {
	if len(env.Metadata) == 0 {
		return Principal{}, false, nil
	}
	var m struct {
		Principal *string `json:"principal"`
		Role      string  `json:"role"`
	}
	if err := json.Unmarshal(env.Metadata, &m); err != nil {
		return Principal{}, false, fmt.Errorf("metadata: %w", err)
	}
	if m.Principal == nil {
		return Principal{}, false, nil
	}
	if err := ValidatePrincipalName(*m.Principal); err != nil {
		return Principal{}, false, err
	}
	return Principal{Name: *m.Principal, Role: m.Role}, true, nil
}

// OwnExecutionsOnly reports whether p may cancel only the executions it
// requested (a client's token); an admin cancels any.
func (p Principal) OwnExecutionsOnly() bool { return p.Role == "client" }
