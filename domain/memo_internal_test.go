package domain

import "testing"

// TestHotEventsNeedNoDecoding: the events of every execution's lifecycle
// are remembered by Encode without decoding (their types have a plan).
func TestHotEventsNeedNoDecoding(t *testing.T) {
	for _, typ := range []string{TypeExecutionRequested, TypeQueueGranted, TypeExecutionScheduling, TypeExecutionScheduled,
		TypeExecutionRunning, TypeExecutionCompleted, TypeExecutionFailed, TypeWorkerHeartbeat} {
		if Catalogue.specs[typ].plan == nil {
			t.Errorf("%s: no plan, so every Encode of it is decoded again", typ)
		}
	}
}
