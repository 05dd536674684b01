package api

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
)

// Role is what a token may do.
type Role string

// Roles, from the most to the least powerful. admin may do everything.
const (
	RoleAdmin  Role = "admin"  // everything
	RoleClient Role = "client" // request, cancel, read
	RoleReader Role = "reader" // read, feeds, replay
	RoleWorker Role = "worker" // what a remote worker needs: read actions, executions and workers
)

// Sets of roles that routes accept.
var (
	adminOnly   = []Role{RoleAdmin}
	clients     = []Role{RoleAdmin, RoleClient}
	readers     = []Role{RoleAdmin, RoleClient, RoleReader}
	everyone    = []Role{RoleAdmin, RoleClient, RoleReader, RoleWorker}
	publicRoute []Role // nil: no token needed
)

// Tokens holds the configured bearer tokens, by the SHA-256 of the secret:
// the secrets themselves are not kept.
type Tokens struct {
	byHash map[[32]byte]Role
}

// ParseTokens reads "ROLE:SECRET" specs (from --token flags or the
// comma-separated TURNSTILE_TOKENS). Secrets must be at least 16 bytes.
func ParseTokens(specs []string) (*Tokens, error) {
	t := &Tokens{byHash: map[[32]byte]Role{}}
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		role, secret, ok := strings.Cut(spec, ":")
		if !ok {
			return nil, errors.New("a token must be ROLE:SECRET")
		}
		switch Role(role) {
		case RoleAdmin, RoleClient, RoleReader, RoleWorker:
		default:
			return nil, fmt.Errorf("unknown role %q: use admin, client, reader or worker", role)
		}
		if len(secret) < 16 {
			return nil, fmt.Errorf("the %s token is %d bytes; use at least 16", role, len(secret))
		}
		t.byHash[sha256.Sum256([]byte(secret))] = Role(role)
	}
	return t, nil
}

// Empty reports whether no token is configured (anonymous access).
func (t *Tokens) Empty() bool { return t == nil || len(t.byHash) == 0 }

// role returns the role of a presented secret.
func (t *Tokens) role(secret string) (Role, bool) {
	h := sha256.Sum256([]byte(secret))
	for k, r := range t.byHash { // constant time per entry; tokens are few
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
			return r, true
		}
	}
	return "", false
}

// authorize checks the bearer token of r against the roles a route accepts.
// With no tokens configured every request is allowed (the server then
// listens on loopback only).
func (t *Tokens) authorize(r *http.Request, allowed []Role) *Problem {
	if allowed == nil || t.Empty() || (len(allowed) == 1 && allowed[0] == RoleSession) {
		return nil // public, anonymous, or a worker session's route (it checks the session itself)
	}
	auth := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(auth, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return typed(typeUnauthorized, http.StatusUnauthorized, "this route needs a bearer token (Authorization: Bearer <token>) with one of the roles %v", allowed)
	}
	role, ok := t.role(strings.TrimSpace(secret))
	if !ok {
		return typed(typeUnauthorized, http.StatusUnauthorized, "the bearer token is not valid")
	}
	for _, a := range allowed {
		if a == role {
			return nil
		}
	}
	return typed(typeForbidden, http.StatusForbidden, "role %s may not do this; it needs one of %v", role, allowed)
}

// CheckListenAddress refuses a non-loopback address when no token is
// configured: anonymous access is for local use only.
func CheckListenAddress(addr string, tokens *Tokens) error {
	if !tokens.Empty() {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("refusing to listen on %q without tokens: anonymous access is only allowed on a loopback address (configure --token ROLE:SECRET or TURNSTILE_TOKENS)", addr)
}
