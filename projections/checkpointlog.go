package projections

// Checkpoints in the log (docs/checkpoints.md): a
// State's snapshot written into the log as the checkpoint.part events of
// checkpoint-<C> and one checkpoint.written in checkpoint-written, and read
// back so that a fold starts at C instead of position 0.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// CheckpointFormat names the encoding of the checkpoints this build writes
// and reads: the snapshot files' (gob, the large lists in pieces) without
// their trailer. A checkpoint of another format, or written by a build
// whose snapshot types differ, does not decode (ErrSnapshotMismatch).
const CheckpointFormat = snapshotMagic + "; gob"

// checkpointChunk is the raw bytes of one part: its base64 in JSON stays
// within domain.MaxCheckpointPart.
const checkpointChunk = (domain.MaxCheckpointPart - 1024) / 4 * 3

// checkpointPartsPerAppend bounds one append of parts: about 1 MiB, within
// every backend's limit on one append (KurrentDB's default is 1 MiB).
const checkpointPartsPerAppend = 2

// EncodeCheckpoint returns a checkpoint's content: the encoding of sn.
// Equal states give equal bytes within one process; another process may
// number gob's types otherwise, so compare checkpoints of two processes
// through DecodeCheckpoint.
func EncodeCheckpoint(sn *StateSnapshot) ([]byte, error) {
	var b bytes.Buffer
	h := snapshotHeader{Magic: snapshotMagic, Types: typeFingerprint(reflect.TypeOf(sn)), Next: sn.Next}
	if err := encodeSnapshot(&b, h, sn); err != nil {
		return nil, fmt.Errorf("encode checkpoint at %d: %w", sn.Next, err)
	}
	return b.Bytes(), nil
}

// DecodeCheckpoint decodes a checkpoint's content; errors wrap
// ErrSnapshotMismatch.
func DecodeCheckpoint(content []byte) (*StateSnapshot, error) {
	var sn StateSnapshot
	br := bufio.NewReader(bytes.NewReader(content))
	h, err := decodeSnapshot(br, &sn)
	if err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	if n, _ := br.Discard(1); n > 0 {
		return nil, fmt.Errorf("decode checkpoint: %w: bytes after the snapshot", ErrSnapshotMismatch)
	}
	if h.Next != sn.Next {
		return nil, fmt.Errorf("decode checkpoint: %w: header at %d, state at %d", ErrSnapshotMismatch, h.Next, sn.Next)
	}
	return &sn, nil
}

// CheckpointKeep returns the streams that may get appends after a
// checkpoint of sn besides its live executions': every action, queue,
// schedule, resource and worker stream the fold knows (a stopped worker's id may
// register again), and the checkpoint markers' stream. Sorted.
func CheckpointKeep(sn *StateSnapshot) []string {
	keep := []string{domain.CheckpointMarkers}
	for _, a := range sn.Actions {
		keep = append(keep, domain.ActionStream(a.Ref))
	}
	for _, q := range sn.Queues.Queues {
		keep = append(keep, domain.QueueStream(q.Ref))
	}
	for _, s := range sn.Schedules {
		keep = append(keep, domain.ScheduleStream(s.Ref))
	}
	for _, r := range sn.Resources {
		keep = append(keep, domain.ResourceStream(r.Name))
	}
	for _, w := range sn.Workers {
		keep = append(keep, domain.WorkerStream(w.Worker.ID))
	}
	slices.Sort(keep)
	return slices.Compact(keep)
}

// LiveStreams returns the streams of the executions live in sn (waiting in
// a queue or further on), sorted.
func LiveStreams(sn *StateSnapshot) []string {
	st := RestoreState(sn)
	ids := st.LiveIDs()
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = domain.ExecutionStream(id)
	}
	return out
}

// checkpointNS derives the ids of a checkpoint's events from its position
// and content, so that writing the same checkpoint again is an idempotent
// replay.
var checkpointNS = uuid.MustParse("6d1f3f0e-1c4b-4c55-9d0b-7a1e0c2f5a91")

func checkpointID(c uint64, sum string, what string) uuid.UUID {
	return uuid.NewSHA1(checkpointNS, []byte(strconv.FormatUint(c, 10)+"/"+sum+"/"+what))
}

// WriteCheckpoint writes the checkpoint of sn into store: its parts, then
// its checkpoint.written (prev is the chain hash of the event at sn.Next-1,
// writer the executor's name), which it returns. Written again with the
// same state it is an idempotent replay; a checkpoint at the same position
// with another content fails with eventstore.ErrWrongExpectedVersion. crash,
// if not nil, is called between the parts and the marker (crash points).
func WriteCheckpoint(ctx context.Context, store eventstore.Store, sn *StateSnapshot, prev domain.Hash, writer string, crash func()) (domain.CheckpointWritten, error) {
	content, err := EncodeCheckpoint(sn)
	if err != nil {
		return domain.CheckpointWritten{}, err
	}
	c := sn.Next
	sum := sha256.Sum256(content)
	m := domain.CheckpointWritten{Position: c, Bytes: int64(len(content)), SHA256: hex.EncodeToString(sum[:]),
		Prev: prev, Format: CheckpointFormat, Keep: CheckpointKeep(sn), Live: countLive(sn)}
	stream := domain.CheckpointStream(c)
	var batch []domain.Envelope
	expected := eventstore.NoStream
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		r, err := store.Append(ctx, stream, expected, batch...)
		if err != nil {
			return fmt.Errorf("write checkpoint at %d: parts: %w", c, err)
		}
		expected, batch = eventstore.Exact(r.Version), batch[:0]
		return nil
	}
	for off := 0; off < len(content) || m.Parts == 0; off += checkpointChunk {
		part := domain.CheckpointPart{Part: m.Parts, Data: content[off:min(off+checkpointChunk, len(content))]}
		env, err := codec.Events.Encode(checkpointID(c, m.SHA256, strconv.Itoa(m.Parts)), part, domain.OwnerExecutor, writer)
		if err != nil {
			return m, err
		}
		batch = append(batch, env)
		m.Parts++
		if len(batch) == checkpointPartsPerAppend {
			if err := flush(); err != nil {
				return m, err
			}
		}
	}
	if err := flush(); err != nil {
		return m, err
	}
	if crash != nil {
		crash()
	}
	env, err := codec.Events.Encode(checkpointID(c, m.SHA256, "written"), m, domain.OwnerExecutor, writer)
	if err != nil {
		return m, err
	}
	if _, err := store.Append(ctx, domain.CheckpointMarkers, eventstore.Any, env); err != nil {
		return m, fmt.Errorf("write checkpoint at %d: marker: %w", c, err)
	}
	return m, nil
}

func countLive(sn *StateSnapshot) int {
	n := len(sn.Executions)
	for _, q := range sn.Queues.Queues {
		for _, k := range q.Keys {
			n += k.Waiting.Len()
		}
	}
	return n
}

// Checkpoint is a checkpoint.written event of the live log: the marker,
// and the position and log time of its event.
type Checkpoint struct {
	domain.CheckpointWritten
	At   uint64    // the marker event's position
	Time time.Time // its log time
}

// CheckpointMarkers lists the checkpoints the live log holds, oldest first
// (none: an empty list).
func CheckpointMarkers(ctx context.Context, store eventstore.Store) ([]Checkpoint, error) {
	var out []Checkpoint
	for from := uint64(0); ; {
		evs, err := store.ReadStream(ctx, domain.CheckpointMarkers, from, 1000)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read checkpoints: %w", err)
		}
		for i := range evs {
			ev, err := codec.Events.Decode(&evs[i])
			if err != nil {
				return nil, fmt.Errorf("read checkpoints: version %d: %w", evs[i].Version, err)
			}
			if m, ok := ev.(domain.CheckpointWritten); ok {
				out = append(out, Checkpoint{CheckpointWritten: m, At: evs[i].Position, Time: evs[i].Time})
			}
		}
		if len(evs) < 1000 {
			return out, nil
		}
		from = evs[len(evs)-1].Version + 1
	}
}

// ReadCheckpoint reads the content of the checkpoint m names and checks it
// against m (parts in order, size, SHA-256) before decoding it.
func ReadCheckpoint(ctx context.Context, store eventstore.Store, m domain.CheckpointWritten) (*StateSnapshot, error) {
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshotMismatch, err)
	}
	if m.Format != CheckpointFormat {
		return nil, fmt.Errorf("checkpoint at %d: %w: format %q", m.Position, ErrSnapshotMismatch, m.Format)
	}
	content := make([]byte, 0, m.Bytes)
	stream := domain.CheckpointStream(m.Position)
	for part := 0; part < m.Parts; {
		evs, err := store.ReadStream(ctx, stream, uint64(part), 32)
		if errors.Is(err, eventstore.ErrStreamNotFound) {
			return nil, fmt.Errorf("checkpoint at %d: %w: its parts are not in the live log", m.Position, ErrSnapshotMismatch)
		}
		if err != nil {
			return nil, fmt.Errorf("checkpoint at %d: read parts: %w", m.Position, err)
		}
		if len(evs) == 0 {
			return nil, fmt.Errorf("checkpoint at %d: %w: %d of %d parts in the log", m.Position, ErrSnapshotMismatch, part, m.Parts)
		}
		for i := range evs {
			ev, err := codec.Events.Decode(&evs[i])
			if err != nil {
				return nil, fmt.Errorf("checkpoint at %d: %w: part %d: %v", m.Position, ErrSnapshotMismatch, part, err)
			}
			p, ok := ev.(domain.CheckpointPart)
			if !ok || p.Part != part {
				return nil, fmt.Errorf("checkpoint at %d: %w: version %d is not part %d", m.Position, ErrSnapshotMismatch, evs[i].Version, part)
			}
			content = append(content, p.Data...)
			if part++; part == m.Parts {
				break
			}
		}
	}
	sum := sha256.Sum256(content)
	if int64(len(content)) != m.Bytes || hex.EncodeToString(sum[:]) != m.SHA256 {
		return nil, fmt.Errorf("checkpoint at %d: %w: its parts do not have the size and SHA-256 its marker names", m.Position, ErrSnapshotMismatch)
	}
	sn, err := DecodeCheckpoint(content)
	if err != nil {
		return nil, fmt.Errorf("checkpoint at %d: %w", m.Position, err)
	}
	if sn.Next != m.Position {
		return nil, fmt.Errorf("checkpoint at %d: %w: the state is at %d", m.Position, ErrSnapshotMismatch, sn.Next)
	}
	return sn, nil
}

// LatestCheckpoint returns the newest checkpoint in store's live log at or
// after position atLeast that reads and decodes, with its marker; ok is
// false when there is none. Checkpoints that cannot be used (their parts
// missing, damaged, or of another build: ErrSnapshotMismatch) are passed
// over, and warn, if not nil, hears why; a failed read of the log is
// returned.
func LatestCheckpoint(ctx context.Context, store eventstore.Store, atLeast uint64, warn func(m domain.CheckpointWritten, err error)) (sn *StateSnapshot, m Checkpoint, ok bool, err error) {
	ms, err := CheckpointMarkers(ctx, store)
	if err != nil {
		return nil, m, false, err
	}
	for i := len(ms) - 1; i >= 0 && ms[i].Position >= atLeast; i-- {
		sn, err := ReadCheckpoint(ctx, store, ms[i].CheckpointWritten)
		if err == nil {
			return sn, ms[i], true, nil
		}
		if !errors.Is(err, ErrSnapshotMismatch) {
			return nil, m, false, err
		}
		if warn != nil {
			warn(ms[i].CheckpointWritten, err)
		}
	}
	return nil, m, false, nil
}
