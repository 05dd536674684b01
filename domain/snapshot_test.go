package domain

import (
	"reflect"
	"testing"
)

// TestSnapshotsCoverEveryField fails when an aggregate gains a field that its
// snapshot does not carry: a restored fold would then silently differ.
func TestSnapshotsCoverEveryField(t *testing.T) {
	for _, c := range []struct {
		agg, snap any
		extra     int // fields of the aggregate its snapshot derives instead of storing
	}{
		{Execution{}, ExecutionSnapshot{}, 0},
		{Worker{}, WorkerSnapshot{}, 0},
		{Action{}, ActionSnapshot{}, 0},
		// Queue's gHead is folded into Grants (only live grants are kept);
		// where is the Queues' map, shared; activeN is the sum of the keys'
		// active sets.
		{Queue{}, QueueSnapshot{}, 3},
		// KeyQueue's waiting fifo is one list, its active set another; its
		// ref is its Queue's.
		{KeyQueue{}, KeyQueueSnapshot{}, 1},
		// A waiter's request holds a WaiterRequest and, when it is not
		// UTC, the time (at, hasAt). TestWaitingExecutionIsTheFoldsAggregate
		// and TestWaitersBinaryCoversEveryField check what they carry.
		{request{}, WaiterRequest{}, 2},
		{slot{}, WaiterSnapshot{}, 0},
		// Queues' where is derived from the key queues.
		{Queues{}, QueuesSnapshot{}, 1},
	} {
		a, s := reflect.TypeOf(c.agg), reflect.TypeOf(c.snap)
		if a.NumField() != s.NumField()+c.extra {
			t.Errorf("%s has %d fields, %s carries %d (+%d derived): add the new field to the snapshot",
				a.Name(), a.NumField(), s.Name(), s.NumField(), c.extra)
		}
	}
}
