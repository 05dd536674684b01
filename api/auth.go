package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/services/repository"
)

// Role is what a token may do.
type Role string

// Roles, from the most to the least powerful. admin may do everything.
const (
	RoleAdmin  Role = "admin"  // everything
	RoleClient Role = "client" // request, cancel its own executions, read
	RoleReader Role = "reader" // read, feeds, replay
	RoleWorker Role = "worker" // what a remote worker needs: read actions, executions and workers
)

// Sets of roles that routes accept.
var (
	adminOnly   = []Role{RoleAdmin}
	clients     = []Role{RoleAdmin, RoleClient}
	readers     = []Role{RoleAdmin, RoleClient, RoleReader}
	auditors    = []Role{RoleAdmin, RoleReader}
	everyone    = []Role{RoleAdmin, RoleClient, RoleReader, RoleWorker}
	publicRoute []Role // nil: no token needed
)

// Principal is who a bearer token speaks for: its name, its role and its
// scope. Every event written for a call records the name and the role
// (domain.Principal in the event's metadata).
type Principal struct {
	Name string
	Role Role
	// Scope, if not empty, lists the action ref prefixes the token may
	// request, define, change and see; an empty Scope is every action.
	Scope []string
}

// InScope reports whether action ref is within p's scope.
func (p *Principal) InScope(ref string) bool {
	if p == nil || len(p.Scope) == 0 {
		return true
	}
	for _, prefix := range p.Scope {
		if strings.HasPrefix(ref, prefix) {
			return true
		}
	}
	return false
}

// Scoped reports whether p is limited to some actions.
func (p *Principal) Scoped() bool { return p != nil && len(p.Scope) > 0 }

func (p *Principal) domain() domain.Principal {
	return domain.Principal{Name: p.Name, Role: string(p.Role)}
}

// Tokens holds the configured bearer tokens, by the SHA-256 of the secret:
// the secrets themselves are not kept.
type Tokens struct {
	byHash map[[32]byte]*Principal
	byName map[string]*Principal
	// ticketKey signs feed tickets; it is derived from every token's hash,
	// so servers configured with the same tokens accept each other's tickets.
	ticketKey []byte
}

// ParseTokens reads token specs (from --token flags, the comma-separated
// TURNSTILE_TOKENS, or a token file):
//
//	ROLE:SECRET                      the old form: named ROLE-<first 8 hex digits of SHA-256(SECRET)>
//	ROLE:NAME:SECRET[:scope=PREFIX]… a named token; each scope=PREFIX (repeatable) is an
//	                                 action ref prefix it is limited to
//
// Secrets must be at least 16 bytes and, in the named form, hold no ':'.
// Names (1..64 letters, digits, '.', '_', '-') must be unique. Errors never
// show a secret.
func ParseTokens(specs []string) (*Tokens, error) {
	t := &Tokens{byHash: map[[32]byte]*Principal{}, byName: map[string]*Principal{}}
	seen := map[string]bool{}
	for _, spec := range specs {
		spec = strings.TrimSpace(spec)
		if spec == "" || seen[spec] { // the same spec twice (a flag and the environment) is one token
			continue
		}
		seen[spec] = true
		parts := strings.Split(spec, ":")
		if len(parts) < 2 {
			return nil, errors.New("a token must be ROLE:SECRET or ROLE:NAME:SECRET[:scope=PREFIX]")
		}
		p := &Principal{Role: Role(parts[0])}
		switch p.Role {
		case RoleAdmin, RoleClient, RoleReader, RoleWorker:
		default:
			shown := fmt.Sprintf(" %q", parts[0])
			if len(parts[0]) > 10 { // perhaps a secret given without its role: never echo it
				shown = ""
			}
			return nil, fmt.Errorf("unknown role%s: use admin, client, reader or worker (ROLE:NAME:SECRET)", shown)
		}
		var secret string
		if len(parts) == 2 {
			secret = parts[1]
		} else {
			p.Name, secret = parts[1], parts[2]
			if err := domain.ValidatePrincipalName(p.Name); err != nil {
				return nil, fmt.Errorf("the %s token's name: %w", p.Role, err)
			}
			for _, opt := range parts[3:] {
				prefix, ok := strings.CutPrefix(opt, "scope=")
				if !ok {
					// never echo what may be the rest of a secret that holds ':'
					what := "after the secret"
					if key, _, isOpt := strings.Cut(opt, "="); isOpt && domain.ValidatePrincipalName(key) == nil {
						what = fmt.Sprintf("%q", key+"=")
					}
					return nil, fmt.Errorf("token %s: unknown option %s: only scope=PREFIX is known, and a secret may not hold ':'", p.Name, what)
				}
				if err := validScopePrefix(prefix); err != nil {
					return nil, fmt.Errorf("token %s: %w", p.Name, err)
				}
				p.Scope = append(p.Scope, prefix)
			}
		}
		if len(secret) < 16 {
			return nil, fmt.Errorf("the %s token is %d bytes; use at least 16", p.Role, len(secret))
		}
		h := sha256.Sum256([]byte(secret))
		if p.Name == "" {
			p.Name = string(p.Role) + "-" + hex.EncodeToString(h[:4])
		}
		if _, dup := t.byName[p.Name]; dup {
			return nil, fmt.Errorf("two tokens are named %q; names must be unique", p.Name)
		}
		if _, dup := t.byHash[h]; dup {
			return nil, fmt.Errorf("token %s: the same secret is configured twice", p.Name)
		}
		t.byHash[h], t.byName[p.Name] = p, p
	}
	t.ticketKey = ticketKey(t.byHash)
	return t, nil
}

// validScopePrefix checks a scope's action ref prefix: not empty, and made
// of what a ref may hold.
func validScopePrefix(prefix string) error {
	if prefix == "" {
		return errors.New("scope= needs an action ref prefix (e.g. scope=billing.)")
	}
	// A prefix is valid when some ref starts with it: prefix+"x" is a ref.
	if err := domain.ValidateRef(prefix + "x"); err != nil {
		return fmt.Errorf("scope %q is no action ref prefix: %w", clip(prefix), err)
	}
	return nil
}

// Empty reports whether no token is configured (anonymous access).
func (t *Tokens) Empty() bool { return t == nil || len(t.byHash) == 0 }

// Names returns the configured tokens' principals (no secrets), for a
// start-up log line.
func (t *Tokens) Names() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, len(t.byName))
	for n, p := range t.byName {
		out = append(out, string(p.Role)+":"+n)
	}
	return out
}

// principal returns the principal of a presented secret.
func (t *Tokens) principal(secret string) (*Principal, bool) {
	h := sha256.Sum256([]byte(secret))
	var found *Principal
	for k, p := range t.byHash { // constant time per entry; tokens are few
		if subtle.ConstantTimeCompare(k[:], h[:]) == 1 {
			found = p
		}
	}
	return found, found != nil
}

// authorize checks the bearer token of r (or, where ticketOK, a feed
// ticket in ?ticket=) against the roles a route accepts and returns its
// principal. With no tokens configured every request is allowed, as the
// anonymous principal nil (the server then listens on loopback only).
func (t *Tokens) authorize(r *http.Request, allowed []Role, ticketOK bool) (*Principal, *Problem) {
	if allowed == nil || t.Empty() || (len(allowed) == 1 && allowed[0] == RoleSession) {
		return nil, nil // public, anonymous, or a worker session's route (it checks the session itself)
	}
	var (
		p  *Principal
		ok bool
	)
	if ticket := r.URL.Query().Get("ticket"); ticket != "" && ticketOK {
		var prob *Problem
		if p, prob = t.redeemTicket(ticket); prob != nil {
			return nil, prob
		}
	} else {
		auth := r.Header.Get("Authorization")
		scheme, secret, found := strings.Cut(auth, " ")
		if !found || !strings.EqualFold(scheme, "Bearer") || secret == "" {
			return nil, typed(typeUnauthorized, http.StatusUnauthorized, "this route needs a bearer token (Authorization: Bearer <token>) with one of the roles %v", allowed)
		}
		if p, ok = t.principal(strings.TrimSpace(secret)); !ok {
			return nil, typed(typeUnauthorized, http.StatusUnauthorized, "the bearer token is not valid")
		}
	}
	for _, a := range allowed {
		if a == p.Role {
			return p, nil
		}
	}
	return nil, typed(typeForbidden, http.StatusForbidden, "role %s may not do this; it needs one of %v", p.Role, allowed)
}

type principalKey struct{}

// withPrincipal returns r's context carrying p, for the handlers
// (principalOf) and the command side (repository.WithPrincipal: the events
// it writes record p).
func withPrincipal(ctx context.Context, p *Principal) context.Context {
	if p == nil {
		return ctx
	}
	return repository.WithPrincipal(context.WithValue(ctx, principalKey{}, p), p.domain())
}

// principalOf returns the principal of r (nil: anonymous, everything in scope).
func principalOf(r *http.Request) *Principal {
	p, _ := r.Context().Value(principalKey{}).(*Principal)
	return p
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
