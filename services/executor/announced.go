// Announced action changes: on a store without atomic multi-stream
// appends, Commands announces an action change on its queue stream before
// writing it to the action stream, and nothing is granted from that queue
// meanwhile. If the change is still missing after two timed cycles, the
// executor writes it as prepared (same id, same writer: the API's own late
// append is then an idempotent replay).
//
// Writes: the announced action.* event on action-<ref>, at the version
// announced. When: every cycle, once the announcement is ripe.

package executor

import (
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/repository"
)

// decideAnnounced completes action changes announced on their queue stream
// (by Commands on a store without atomic multi-stream appends) whose action
// event is not in the log: it appends the announced event as it was
// prepared (same id, same writer), so if its writer's own append lands too,
// one of them is an idempotent replay of the other.
func (e *Executor) decideAnnounced(ops []op) []op {
	for _, ref := range sortedKeys(e.state.Announced) {
		an := e.state.Announced[ref]
		as := domain.ActionStream(ref)
		if e.busy(as) || !e.ripe("action "+ref) {
			continue
		}
		if spec, ok := codec.Events.Catalogue().Spec(an.Event.Type); !ok || spec.Stream != domain.StreamAction ||
			an.Event.ID == (uuid.UUID{}) || an.Event.Owner != domain.OwnerAPI {
			e.log.Error("cannot complete an announced action change: the announcement does not carry a usable event",
				"action", ref, "position", an.Position)
			continue
		}
		env := an.Event
		env.Stream, env.Version, env.Position, env.Time = "", 0, 0, time.Time{}
		e.awaiting[as] = an.ActionVersion
		ops = append(ops, op{what: "complete action change " + ref, count: &e.Stats.Repairs,
			appends: []eventstore.StreamAppend{{Stream: as, Expected: repository.Expected(int64(an.ActionVersion) - 1), Events: []domain.Envelope{env}}}})
	}
	return ops
}
