// The simulated clients' steps: requests (with priorities, delays, keys
// and with_items), cancellations through the command side, and policy changes.

package sim

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"

	"github.com/turnstile/turnstile/services/command"
)

func (w *world) request() {
	w.reqSeq++
	ref := w.refs[w.rng.IntN(len(w.refs))]
	in := fmt.Sprintf(`{"n":%d,"customer":"c%d"}`, w.reqSeq, w.rng.IntN(3))
	r := command.Request{Action: ref, Input: json.RawMessage(in), IdempotencyKey: fmt.Sprintf("req-%d", w.reqSeq)}
	if w.chance(0.08) {
		n := 2 + w.rng.IntN(4)
		for i := range n {
			r.WithItems = append(r.WithItems, json.RawMessage(fmt.Sprintf(`{"item":%d}`, i)))
		}
		r.Concurrency = 1 + w.rng.IntN(2)
	}
	if r.WithItems == nil {
		r.Priority = w.rng.IntN(domain.MaxPriority + 1) // 0: the default
		if w.chance(0.1) {
			r.DelaySeconds = float64(w.rng.IntN(20))
		}
	}
	if w.chance(0.02) {
		r.Action = "undefined.action" // rejected by the executor
	}
	w.send(r)
}

// send requests r; an error leaves its outcome unknown, and the client
// sends it again later with the same idempotency key.
func (w *world) send(r command.Request) {
	id, created, err := w.cmds.Request(w.ctx, r)
	w.tracef("request %s %s: %s created=%v err=%v", r.IdempotencyKey, r.Action, short(id), created, err)
	if err != nil {
		w.retries = append(w.retries, r)
		return
	}
	w.countArchived(id, created)
	if created && w.cfg.Archive {
		w.sent = append(w.sent, r)
	}
	if created || !containsID(w.known, id) {
		w.known = append(w.known, id)
	}
}

func containsID(ids []string, id string) bool {
	for i := len(ids) - 1; i >= 0; i-- {
		if ids[i] == id {
			return true
		}
	}
	return false
}

func (w *world) policy() {
	ref := w.refs[w.rng.IntN(len(w.refs))]
	var err error
	var what string
	switch w.rng.IntN(3) {
	case 0:
		what = "pause"
		_, err = w.cmds.Pause(w.ctx, ref, "simulated operator")
	case 1:
		what = "resume"
		_, err = w.cmds.Resume(w.ctx, ref)
	default:
		a, lerr := w.cmds.LoadAction(w.ctx, ref)
		if lerr != nil {
			err = lerr
			break
		}
		p := a.Policy()
		p.MaxConcurrent = 1 + w.rng.IntN(4)
		what = fmt.Sprintf("max_concurrent %d", p.MaxConcurrent)
		if p.ConcurrencyKey != "" { // the total limit and cancel_in_progress come and go, from the same draw
			p.MaxConcurrentTotal = p.MaxConcurrent % 3
			p.OnLimit = domain.OnLimitQueue
			if p.MaxConcurrent%2 == 1 {
				p.OnLimit = domain.OnLimitCancelInProgress
			}
			what += fmt.Sprintf(" max_concurrent_total %d on_limit %s", p.MaxConcurrentTotal, p.OnLimit)
		}
		_, err = w.cmds.ChangePolicy(w.ctx, p)
	}
	w.tracef("policy %s %s: %v", ref, what, err)
}

// ---- executors ----

// resend is a client sending a request it sent long ago, whose answer it
// lost: with the same idempotency key, it must find the execution (in the
// live log or, once archived, in the archive) and never create it again.
func (w *world) resend() error {
	r := w.sent[w.rng.IntN(len(w.sent))]
	id, created, err := w.cmds.Request(w.ctx, r)
	w.tracef("resend %s %s: %s created=%v err=%v", r.IdempotencyKey, r.Action, short(id), created, err)
	switch {
	case err == nil && created:
		return fmt.Errorf("a late retry of request %s created execution %s again", r.IdempotencyKey, short(id))
	case errors.Is(err, command.ErrIdempotencyMismatch):
		return fmt.Errorf("a late retry of request %s, the same request, was refused as another: %v", r.IdempotencyKey, err)
	}
	if err == nil {
		w.countArchived(id, created)
	}
	return nil
}

// countArchived counts a retry answered from the archive (Result.ArchivedRetries).
func (w *world) countArchived(id string, created bool) {
	if created || !w.cfg.Archive {
		return
	}
	if _, err := w.mem.ReadStream(w.ctx, domain.ExecutionStream(id), 0, 1); errors.Is(err, eventstore.ErrStreamNotFound) {
		w.res.ArchivedRetries++
	}
}
