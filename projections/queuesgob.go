package projections

// How the queues of a StateSnapshot travel in gob: the domain's snapshot
// values say what a queue holds, not how it is written, so its waiters go in
// their binary layout (waitersbin.go) through a gob form of their own.

import (
	"bytes"
	"encoding/gob"
	"time"

	"github.com/turnstile/turnstile/domain"
)

// QueuesSnapshot is the queues of a StateSnapshot: the domain's snapshot of
// them, which gob encodes with each queue's waiters in their binary layout.
type QueuesSnapshot struct {
	domain.QueuesSnapshot
}

// queuesGob is QueuesSnapshot as gob writes it.
type queuesGob struct {
	Queues  []queueGob
	Pending []domain.Rejection
	Changed []string
}

// queueGob is a domain.QueueSnapshot, field for field.
type queueGob struct {
	Ref             string
	Policy          domain.Policy
	Defined, Paused bool
	Version         int64
	Keys            []keyQueueGob
	Grants          []time.Time
	RateSpan        time.Duration
	RateMax         int
	LastKey         string
	HasLast         bool
}

// keyQueueGob is a domain.KeyQueueSnapshot, its waiters in their layout.
type keyQueueGob struct {
	Key     string
	Waiting []byte
	Active  []string
	Skips   uint8
}

// GobEncode writes qs in gob, each queue's waiters in their binary layout.
func (qs QueuesSnapshot) GobEncode() ([]byte, error) {
	g := queuesGob{Queues: make([]queueGob, len(qs.Queues)), Pending: qs.Pending, Changed: qs.Changed}
	for i, q := range qs.Queues {
		g.Queues[i] = queueGob{Ref: q.Ref, Policy: q.Policy, Defined: q.Defined, Paused: q.Paused, Version: q.Version,
			Keys: make([]keyQueueGob, len(q.Keys)), Grants: q.Grants, RateSpan: q.RateSpan, RateMax: q.RateMax, LastKey: q.LastKey, HasLast: q.HasLast}
		for j, k := range q.Keys {
			w, err := marshalWaiters(k.Waiting)
			if err != nil {
				return nil, err
			}
			g.Queues[i].Keys[j] = keyQueueGob{Key: k.Key, Waiting: w, Active: k.Active, Skips: k.Skips}
		}
	}
	var b bytes.Buffer
	err := gob.NewEncoder(&b).Encode(g)
	return b.Bytes(), err
}

// GobDecode reads what GobEncode wrote.
func (qs *QueuesSnapshot) GobDecode(data []byte) error {
	var g queuesGob
	if err := gob.NewDecoder(bytes.NewReader(data)).Decode(&g); err != nil {
		return err
	}
	out := domain.QueuesSnapshot{Pending: g.Pending, Changed: g.Changed}
	if g.Queues != nil {
		out.Queues = make([]domain.QueueSnapshot, len(g.Queues))
	}
	for i, q := range g.Queues {
		out.Queues[i] = domain.QueueSnapshot{Ref: q.Ref, Policy: q.Policy, Defined: q.Defined, Paused: q.Paused, Version: q.Version,
			Grants: q.Grants, RateSpan: q.RateSpan, RateMax: q.RateMax, LastKey: q.LastKey, HasLast: q.HasLast}
		if q.Keys != nil {
			out.Queues[i].Keys = make([]domain.KeyQueueSnapshot, len(q.Keys))
		}
		for j, k := range q.Keys {
			ws, err := unmarshalWaiters(k.Waiting)
			if err != nil {
				return err
			}
			out.Queues[i].Keys[j] = domain.KeyQueueSnapshot{Key: k.Key, Waiting: ws, Active: k.Active, Skips: k.Skips}
		}
	}
	qs.QueuesSnapshot = out
	return nil
}
