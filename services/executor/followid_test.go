package executor

import (
	"testing"

	"github.com/google/uuid"
)

// TestFollowIDsNeverChange: the ids of an op's appends after its fence are
// derived from the fence's id, and whoever completes the op from the log (a
// restarted or newer executor) must derive the same ones, so one is pinned.
func TestFollowIDsNeverChange(t *testing.T) {
	fence := uuid.MustParse("826120c4-3cc2-52b1-8ab6-b59d6709724a")
	if got, want := followID(fence, "execution-x", 2, "execution.scheduled").String(), "db1317c0-3590-5489-b169-a8bd8d4de043"; got != want {
		t.Fatalf("followID = %s, want %s", got, want)
	}
}
