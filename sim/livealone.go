// With Config.Archive, at the end of a run the live log alone (without the
// archive) must still answer for itself (docs/log-over-months.md): it
// audits clean from its checkpoint (projections.AuditLive), and a read
// model started from its newest checkpoint shows every action's statistics
// as the rebuild of the whole history does.

package sim

import (
	"bytes"
	"encoding/json"
	"fmt"

	"github.com/turnstile/turnstile/projections"
)

// checkLiveAlone checks the trimmed live log against rebuilt, the read
// model of the whole history.
func (w *world) checkLiveAlone(rebuilt *projections.Views) error {
	rep, err := projections.AuditLive(w.ctx, w.mem, nil)
	if err != nil {
		return fmt.Errorf("audit of the live log alone: %w", err)
	}
	if !rep.OK() {
		v := rep.Violations[0]
		return fmt.Errorf("audit of the live log alone from the checkpoint at %d: %d violations, the first %s at %d: %s", rep.From.Checkpoint, len(rep.Violations), v.Rule, v.Position, v.Detail)
	}
	first, _, err := w.mem.Start(w.ctx)
	if err != nil {
		return err
	}
	sn, m, ok, err := projections.LatestCheckpoint(w.ctx, w.mem, first, nil)
	if err != nil || !ok {
		return fmt.Errorf("the live log from %d has no checkpoint a read model can start from: %v", first, err)
	}
	v := projections.ViewsFromCheckpoint(sn)
	if err := v.CatchUp(w.ctx, w.mem); err != nil {
		return err
	}
	got, _ := json.Marshal(v.AllStats())
	want, _ := json.Marshal(rebuilt.AllStats())
	if !bytes.Equal(got, want) {
		return fmt.Errorf("queue_stats of a read model started from the checkpoint at %d:\n%s\nof the whole history:\n%s", m.Position, got, want)
	}
	w.tracef("the live log alone audits clean from the checkpoint at %d; the read model from the checkpoint at %d has the whole history's statistics", rep.From.Checkpoint, m.Position)
	return nil
}
