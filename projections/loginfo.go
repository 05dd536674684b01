package projections

import (
	"context"
	"fmt"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
)

// LogInfo is where the log stands (GET /api/v1/log).
type LogInfo struct {
	// Head is the position the next event will take.
	Head uint64
	// FirstLivePosition is the live log's first position: 0 unless the
	// store trimmed an archived prefix (eventstore.Trimmer).
	FirstLivePosition uint64
	// Digest is the chain hash of the log's last event, and its position;
	// nil when the log is empty or its store keeps no chain (KurrentDB:
	// there `turnstile verify` computes the chain instead).
	Digest *LogDigest
}

// LogDigest is one link of the hash chain: the hash of the event at
// Position (eventstore.NextHash).
type LogDigest struct {
	Position uint64
	Hash     domain.Hash
}

// Log returns where the log stands: its head, the live log's start, and the
// digest of its last event. A trimmed live log with no event left still
// has a digest: the hash before its start.
func (q *Queries) Log(ctx context.Context) (LogInfo, error) {
	var info LogInfo
	var prev domain.Hash
	if t, ok := q.store.(eventstore.Trimmer); ok {
		first, h, err := t.Start(ctx)
		if err != nil {
			return info, storeError(err)
		}
		info.FirstLivePosition, prev = first, h
	}
	head, err := q.store.Head(ctx)
	if err != nil {
		return info, storeError(err)
	}
	info.Head = head
	if !eventstore.KeepsChain(q.store) {
		return info, nil
	}
	switch {
	case head > info.FirstLivePosition:
		evs, err := q.store.ReadAll(ctx, head-1, 1)
		if err != nil {
			return info, storeError(err)
		}
		if len(evs) != 1 {
			return info, fmt.Errorf("the log's last event (position %d) could not be read", head-1)
		}
		info.Digest = &LogDigest{Position: evs[0].Position, Hash: evs[0].Hash}
	case info.FirstLivePosition > 0:
		info.Digest = &LogDigest{Position: info.FirstLivePosition - 1, Hash: prev}
	}
	return info, nil
}
