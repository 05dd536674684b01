package projections

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// Violation is one place where the log breaks a rule.
type Violation struct {
	Position uint64 `json:"position"`
	Stream   string `json:"stream"`
	Type     string `json:"type"`
	Rule     string `json:"rule"` // decode, owner, handoff, transition, terminal, attempt, fifo, grant
	Detail   string `json:"detail"`
}

// AuditReport is what Audit found.
type AuditReport struct {
	Events     uint64         `json:"events"`
	Executions int            `json:"executions"`
	Ended      int            `json:"ended"`
	Open       []string       `json:"open,omitempty"` // executions with no terminal event yet
	Grants     int            `json:"grants"`
	ByStatus   map[string]int `json:"by_status"`
	Violations []Violation    `json:"violations"`
}

// OK reports whether no rule was broken.
func (r *AuditReport) OK() bool { return len(r.Violations) == 0 }

// MaxViolations bounds how many violations a report lists.
const MaxViolations = 10_000

// Audit folds the whole log and checks every event against the rules of
// DESIGN.md: each event decodes and is written by an owner its type allows;
// each execution event passes the handoff rule (owner, named worker, state,
// attempt) on the state before it, so an execution has at most one terminal
// event; every grant takes the head of its FIFO queue while the queue has a
// free slot (so the concurrency limit holds at every position) and the action
// is not paused; every execution.scheduling has its queue.granted. progress,
// if not nil, is called with the position reached now and then.
func Audit(ctx context.Context, store eventstore.Store, progress func(pos uint64)) (*AuditReport, error) {
	rep := &AuditReport{ByStatus: map[string]int{}}
	execs := map[string]*domain.Execution{}
	queues := domain.NewQueues()
	granted := map[string]bool{} // executions whose queue.granted has been seen
	add := func(env *domain.Envelope, rule, detail string) {
		if len(rep.Violations) < MaxViolations {
			rep.Violations = append(rep.Violations, Violation{Position: env.Position, Stream: env.Stream, Type: env.Type, Rule: rule, Detail: detail})
		}
	}
	from := uint64(0)
	for {
		batch, err := store.ReadAll(ctx, from, 4096)
		if err != nil {
			return rep, fmt.Errorf("audit: read from %d: %w", from, err)
		}
		if len(batch) == 0 {
			break
		}
		for i := range batch {
			env := &batch[i]
			from = env.Position + 1
			rep.Events++
			ev, err := domain.Catalogue.Decode(env)
			if err != nil {
				add(env, "decode", err.Error())
				continue
			}
			spec, _ := domain.Catalogue.Spec(env.Type)
			if !ownerAllowed(spec.Owners, env.Owner) {
				add(env, domain.RuleOwner, fmt.Sprintf("%s may not be written by %q", env.Type, env.Owner))
				continue
			}
			cat, id := domain.SplitStream(env.Stream)
			if cat != spec.Stream {
				add(env, "stream", fmt.Sprintf("%s belongs in a %s stream", env.Type, spec.Stream))
				continue
			}
			switch e := ev.(type) {
			case domain.QueueGranted:
				_, ref := domain.SplitStream(env.Stream)
				if err := queueCheck(queues, ref, e); err != nil {
					add(env, "grant", err.Error())
				}
				granted[e.Execution] = true
				rep.Grants++
			}
			if cat == domain.StreamExecution {
				x := execs[id]
				if x == nil {
					x = domain.NewExecution(id)
					execs[id] = x
				}
				if err := x.Validate(ev, env.Owner, env.Writer); err != nil {
					var re *domain.RuleError
					rule := "rule"
					if errors.As(err, &re) {
						rule = re.Rule
					}
					add(env, rule, err.Error())
					continue // a refused event is not folded: the rest is judged on the lawful history
				}
				if _, ok := ev.(domain.ExecutionScheduling); ok && !granted[id] {
					add(env, "grant", fmt.Sprintf("execution %s took a slot with no queue.granted before it", id))
				}
				x.Apply(ev, env.Version, env.Time)
			}
			queues.Apply(env, ev)
		}
		if progress != nil {
			progress(from)
		}
	}
	rep.Executions = len(execs)
	for id, x := range execs {
		rep.ByStatus[string(x.Status())]++
		if x.Status().Terminal() {
			rep.Ended++
		} else {
			rep.Open = append(rep.Open, id)
		}
	}
	sort.Strings(rep.Open)
	return rep, nil
}

func queueCheck(qs *domain.Queues, ref string, g domain.QueueGranted) error {
	q := qs.Get(ref)
	if q == nil {
		return fmt.Errorf("grant of %s: action %q has no queue", g.Execution, ref)
	}
	return q.CheckGrant(g.Execution, g.ConcurrencyKey)
}

func ownerAllowed(owners []domain.Owner, o domain.Owner) bool {
	for _, x := range owners {
		if x == o {
			return true
		}
	}
	return false
}
