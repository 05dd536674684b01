package node

import (
	"context"

	"github.com/turnstile/turnstile/eventstore/archive"
)

// archiveStatus answers GET /api/v1/log's archived_segments from the
// archive serve --archive reads.
type archiveStatus struct{ h archive.History }

// ArchivedSegments counts the archive's segments, after reading the
// directory again if the live log was trimmed past what it had seen.
func (s archiveStatus) ArchivedSegments(ctx context.Context) (int, error) {
	if err := s.h.Fresh(ctx); err != nil {
		return 0, err
	}
	return len(s.h.Archive.Segments()), nil
}
