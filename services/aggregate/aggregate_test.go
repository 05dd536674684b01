package aggregate

import "testing"

// TestEventIDsNeverChange: the ids derived from a decision are part of the
// log's contract (a restarted or newer executor must derive the same ones
// to complete or replay a write idempotently), so they are pinned here.
func TestEventIDsNeverChange(t *testing.T) {
	for _, c := range []struct {
		writer, stream string
		version        int64
		typ, want      string
	}{
		{"executor", "queue-bench.1", 41, "queue.granted", "826120c4-3cc2-52b1-8ab6-b59d6709724a"},
		{"local-1", "execution-x", -1, "execution.running", "0f248a98-9eb9-5b0d-a824-3dba1953c756"},
	} {
		if got := EventID(c.writer, c.stream, c.version, c.typ).String(); got != c.want {
			t.Errorf("EventID(%q, %q, %d, %q) = %s, want %s", c.writer, c.stream, c.version, c.typ, got, c.want)
		}
	}
}
