package repository

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
		// Since session 6, ids on the stream of an execution named by a
		// UUIDv7 carry its timestamp (domain.LocalEventID).
		{"local-1", "execution-019aa3f2-7c10-7d2e-9c4b-5b1e2f3a4d5c", 3, "execution.succeeded", "019aa3f2-7c10-8082-b5b2-2cebedc97184"},
	} {
		if got := EventID(c.writer, c.stream, c.version, c.typ).String(); got != c.want {
			t.Errorf("EventID(%q, %q, %d, %q) = %s, want %s", c.writer, c.stream, c.version, c.typ, got, c.want)
		}
	}
}
