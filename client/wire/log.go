package wire

// LogStatus is GET /api/v1/log: where the log stands, and the digest that
// lets anyone prove later (turnstile verify --digest POSITION:HASH) that no
// event up to its position was changed, dropped, added or moved.
type LogStatus struct {
	// Head is the position the next event will take.
	Head uint64 `json:"head"`
	// FirstLivePosition is the live log's first position (0 until an
	// archive trims it).
	FirstLivePosition uint64 `json:"first_live_position"`
	// ArchivedSegments is the number of archive segments (0 without an
	// archive).
	ArchivedSegments int `json:"archived_segments"`
	// Digest is the hash chain at the log's last event: null on an empty
	// log and from a store that keeps no chain (KurrentDB).
	Digest *LogDigest `json:"digest"`
}

// LogDigest is one link of the log's hash chain: the hash (64 lower-case
// hex digits) of the event at Position.
type LogDigest struct {
	Position uint64 `json:"position"`
	Hash     string `json:"hash"`
}
