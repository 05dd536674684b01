package domain

import (
	"fmt"
	"strconv"
)

// Checkpoints in the log (docs/checkpoints.md): the
// executor writes its fold's whole state as of a position C into the log, so
// that every fold can start at C instead of position 0 and the log before C
// can leave for the archive. A checkpoint is the checkpoint.part events of
// the stream checkpoint-<C> (C in decimal), then one checkpoint.written
// event in the stream checkpoint-written, which names it. A checkpoint
// whose checkpoint.written is not in the log does not exist (a crash in
// the middle of its parts leaves parts that nothing reads).

// Checkpoint event names and stream category.
const (
	TypeCheckpointPart    = "checkpoint.part"
	TypeCheckpointWritten = "checkpoint.written"

	StreamCheckpoint = "checkpoint"

	// CheckpointMarkers is the stream of every checkpoint.written, oldest
	// first: the newest checkpoint is its last event.
	CheckpointMarkers = StreamCheckpoint + "-written"

	// MaxCheckpointPart bounds one checkpoint.part's JSON data (bytes).
	MaxCheckpointPart = 512 << 10
)

// CheckpointStream names the stream of the parts of the checkpoint at c.
func CheckpointStream(c uint64) string { return StreamCheckpoint + "-" + strconv.FormatUint(c, 10) }

// CheckpointAt returns the position of the checkpoint whose parts stream
// is stream, and whether stream is one.
func CheckpointAt(stream string) (uint64, bool) {
	cat, id := SplitStream(stream)
	if cat != StreamCheckpoint {
		return 0, false
	}
	c, err := strconv.ParseUint(id, 10, 64)
	return c, err == nil
}

// CheckpointPart is one piece of a checkpoint's content, in order (Part
// counts from 0). Data is bytes of the content's encoding (its JSON is
// base64), so that a part's JSON stays within MaxCheckpointPart.
type CheckpointPart struct {
	Part int    `json:"part"`
	Data []byte `json:"data"`
}

// CheckpointWritten completes the checkpoint at Position: the fold of every
// event before Position is the content of its Parts parts (the stream
// CheckpointStream(Position)), whose bytes, concatenated, have the SHA-256
// SHA256.
//
// Prev is the chain hash of the event at Position-1 (zero when the store
// keeps no chain). Keep names the streams that may still get appends after
// Position besides the executions live in the checkpoint (every action,
// queue, schedule and worker stream the fold knows, and CheckpointMarkers);
// Live counts those executions, whose streams are kept too. Format names
// the content's encoding.
type CheckpointWritten struct {
	Position uint64   `json:"position"`
	Parts    int      `json:"parts"`
	Bytes    int64    `json:"bytes"`
	SHA256   string   `json:"sha256"`
	Prev     Hash     `json:"prev"`
	Format   string   `json:"format"`
	Keep     []string `json:"keep"`
	Live     int      `json:"live"`
}

func (CheckpointPart) EventType() string    { return TypeCheckpointPart }
func (CheckpointWritten) EventType() string { return TypeCheckpointWritten }

// Validate checks what a reader needs of a checkpoint.written.
func (c CheckpointWritten) Validate() error {
	switch {
	case c.Parts < 1:
		return fmt.Errorf("checkpoint at %d: %d parts", c.Position, c.Parts)
	case len(c.SHA256) != 64:
		return fmt.Errorf("checkpoint at %d: sha256 %q is not 64 hex digits", c.Position, c.SHA256)
	case c.Format == "":
		return fmt.Errorf("checkpoint at %d: no format", c.Position)
	}
	return nil
}
