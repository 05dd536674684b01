package projections

import (
	"fmt"

	"github.com/turnstile/turnstile/domain"
)

// RulePrincipal is the audit's rule about who acted: an event's metadata,
// when it records a principal, names a valid one, and a client's
// cancellation request is for an execution its principal requested (a
// with_items child counts as its parent's).
const RulePrincipal = "principal"

// auditPrincipals follows who requested each execution and counts the
// events each principal asked for.
type auditPrincipals struct {
	requester map[string]string // execution id → the principal that requested it ("": none recorded)
	counts    map[string]int
	unknown   map[string]bool // executions requested before an audit's checkpoint (and their children): not judged
}

func newAuditPrincipals() *auditPrincipals {
	return &auditPrincipals{requester: map[string]string{}, counts: map[string]int{}, unknown: map[string]bool{}}
}

// check judges env (a decoded event of category cat and stream id id) by
// RulePrincipal and records it; it returns the principal's name ("" for
// none) and what is wrong ("" for nothing).
func (a *auditPrincipals) check(env *domain.Envelope, ev domain.Event, cat, id string) (name, detail string) {
	p, ok, err := domain.PrincipalOf(env)
	if err != nil {
		return "", fmt.Sprintf("the metadata does not name a valid principal: %v", err)
	}
	if ok {
		a.counts[p.Name]++
	}
	if cat != domain.StreamExecution {
		return p.Name, ""
	}
	switch e := ev.(type) {
	case domain.ExecutionRequested:
		by := p.Name
		if e.Parent != "" && !ok {
			by = a.requester[e.Parent]
			if a.unknown[e.Parent] {
				a.unknown[id] = true
			}
		}
		a.requester[id] = by
	case domain.ExecutionCancelRequested:
		if ok && p.OwnExecutionsOnly() && a.requester[id] != p.Name && !a.unknown[id] {
			by := a.requester[id]
			if by == "" {
				by = "no recorded principal"
			}
			return p.Name, fmt.Sprintf("client %s asked to cancel execution %s, requested by %s", p.Name, id, by)
		}
	}
	return p.Name, ""
}
