package repository

import (
	"context"

	"github.com/turnstile/turnstile/domain"
)

type principalKey struct{}

// WithPrincipal returns ctx carrying p: every event this package (and the
// command side) writes under that context records p in its metadata
// (domain.PrincipalMetadata). The API sets it for each authenticated call.
func WithPrincipal(ctx context.Context, p domain.Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal ctx carries (the zero Principal: none,
// an anonymous caller or a process acting on its own).
func PrincipalFrom(ctx context.Context) domain.Principal {
	p, _ := ctx.Value(principalKey{}).(domain.Principal)
	return p
}
