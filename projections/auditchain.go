package projections

import (
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// RuleChain: every event carries the hash the chain gives it, NextHash of
// the hash before it (eventstore.NextHash), on a store that keeps the chain.
// An event changed, dropped, added or moved breaks it at the first place it
// touches; `turnstile verify` checks the same and digests published earlier.
const RuleChain = "chain"

// auditChain follows the hash chain through the log.
type auditChain struct {
	on   bool // the store keeps the chain
	c    eventstore.Chainer
	prev domain.Hash
}

func newAuditChain(store eventstore.Store) *auditChain {
	return &auditChain{on: eventstore.KeepsChain(store)}
}

// check says what is wrong with env's hash ("" if nothing). After a
// mismatch it follows the hash env carries, so each place of damage is
// reported once, not every event after it.
func (a *auditChain) check(env *domain.Envelope) string {
	if !a.on {
		return ""
	}
	want := a.c.Next(a.prev, env)
	a.prev = env.Hash
	if env.Hash == want {
		return ""
	}
	return fmt.Sprintf("the event carries hash %s, the chain gives %s: it, or the event before it, was changed, dropped, added or moved", env.Hash, want)
}

// unverifiedReader is a log that checks what it serves and refuses what
// does not verify (archive.History): Unverified reads it without that
// check, for the audit, which checks the chain itself.
type unverifiedReader interface {
	Unverified() eventstore.Store
}
