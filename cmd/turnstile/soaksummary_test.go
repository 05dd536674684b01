package main

import (
	"strings"
	"testing"
)

// TestSoakSummaryLabels: a missed target is printed as MISSED and, when the
// run does not enforce it, as informational; never bare under a pass.
func TestSoakSummaryLabels(t *testing.T) {
	lines := soakTargetLines(false, 27.5, 100, 127, 30, 0.01)
	if !strings.Contains(lines[0], "27.5%") || !strings.Contains(lines[0], "MISSED") || !strings.Contains(lines[0], "informational") {
		t.Errorf("missed, not enforced: %q", lines[0])
	}
	if !strings.Contains(lines[1], ": met (informational") {
		t.Errorf("met, not enforced: %q", lines[1])
	}
	lines = soakTargetLines(true, 2, 100, 102, 3, 2)
	if !strings.Contains(lines[0], "met (enforced)") || !strings.Contains(lines[1], "MISSED (enforced)") {
		t.Errorf("enforced: %q", lines)
	}
}
