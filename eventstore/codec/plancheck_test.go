package codec

import (
	"reflect"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

// TestPlansOfLifecycleEvents: every event of an execution's lifecycle,
// with the policies' fields (priority, run_at, retries, the grant's seen
// position), keeps an encode plan, so its encoding stays the fast, exact
// one the executor remembers instead of decoding (a *time.Time run_at lost
// it: the lifecycle benchmark fell by about 15 %).
func TestPlansOfLifecycleEvents(t *testing.T) {
	for _, v := range []any{domain.ExecutionRequested{}, domain.QueueGranted{}, domain.ExecutionScheduling{},
		domain.ExecutionScheduled{}, domain.ExecutionRunning{}, domain.ExecutionCompleted{}, domain.ExecutionFailed{},
		domain.ExecutionRunFailed{}, domain.ExecutionRetryScheduled{}, domain.ExecutionRequeued{}} {
		if planOf(reflect.TypeOf(v)) == nil {
			t.Errorf("%T has no encode plan", v)
		}
	}
}
