// A decision as appends: an op is one stream append or several (the fence
// first), each at the expected version the fold shows, with event ids that
// derive from what is decided, so a decision taken twice writes nothing
// twice. A staged stream is awaited: no later decision touches it until
// the fold shows the write, or its failure is settled.

package executor

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/services/repository"
)

// op is one decision of the executor: one atomic append, or, on a store
// without atomic multi-stream appends, appends to one stream at a time in
// the order given, the first being the fence (see seqKind).
type op struct {
	what     string
	appends  []eventstore.StreamAppend
	count    *atomic.Int64
	n        int  // how many decisions count adds (0 means 1)
	takeBack bool // it takes executions back from a worker (or declares one lost)
	grants   bool // it grants slots or hands executions to workers
	seq      seqKind
	key      int // index of the append whose landing makes the decision count
}

// seqKind says how an op's appends are written one stream at a time. The
// first append is always the fence: if it fails, nothing else is written.
type seqKind uint8

const (
	// seqChain: in order, stopping at the first failure.
	seqChain seqKind = iota
	// seqEach: after the fence, every append whatever the others did (they
	// are independent: each grant's handoff).
	seqEach
	// seqChainPastRaces: in order, going on past an append that lost a race
	// (its stream was written by someone else: a child another executor
	// requested) and stopping at any other failure.
	seqChainPastRaces
)

func (e *Executor) busy(stream string) bool {
	_, ok := e.awaiting[stream]
	return ok
}

// stage builds one stream's part of an op and marks the stream awaited.
// Its events' ids derive from this executor, the stream and the version.
func (e *Executor) stage(stream string, version int64, events ...domain.Event) eventstore.StreamAppend {
	return e.stageIDs(stream, version, func(i int, typ string) uuid.UUID {
		return repository.EventID(e.cfg.Name, stream, version+1+int64(i), typ)
	}, events...)
}

// stageAfter is stage for an append that follows the fence event fence:
// its ids derive from fence's id, so whoever completes it from the log
// (this executor after a restart, or another) writes the same ids.
func (e *Executor) stageAfter(fence uuid.UUID, stream string, version int64, events ...domain.Event) eventstore.StreamAppend {
	return e.stageIDs(stream, version, func(i int, typ string) uuid.UUID { return followID(fence, stream, i, typ) }, events...)
}

// followID is the id of the i-th event of type typ that an op writes to
// stream after its fence event fence.
func followID(fence uuid.UUID, stream string, i int, typ string) uuid.UUID {
	// The bytes of fmt's "%s/%d/%s", without fmt: ids must never change.
	var buf [128]byte
	b := strconv.AppendInt(append(append(buf[:0], stream...), '/'), int64(i), 10)
	return domain.LocalEventID(domain.DeriveID(fence, append(append(b, '/'), typ...)), stream)
}

func (e *Executor) stageIDs(stream string, version int64, id func(i int, typ string) uuid.UUID, events ...domain.Event) eventstore.StreamAppend {
	a := eventstore.StreamAppend{Stream: stream, Expected: repository.Expected(version)}
	for i, ev := range events {
		env, err := codec.Events.Encode(id(i, ev.EventType()), ev, domain.OwnerExecutor, e.cfg.Name)
		if err != nil {
			panic(fmt.Sprintf("executor: encode %s: %v", ev.EventType(), err)) // our own events always encode
		}
		a.Events = append(a.Events, env)
	}
	e.awaiting[stream] = uint64(version + int64(len(events)))
	return a
}
