package projections

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/eventstore"

	"github.com/turnstile/turnstile/domain"
)

// StateSnapshot is a State's whole content after the event at Next-1:
// RestoreState of it folds every later event exactly as the State it was
// taken from would. Lists are sorted, so equal states give equal snapshots.
type StateSnapshot struct {
	Next       uint64
	Queues     QueuesSnapshot
	Executions []domain.ExecutionSnapshot // live ones the queues do not keep (see State), by id
	Workers    []WorkerStateSnapshot      // by id
	Actions    []ActionStateSnapshot      // by ref
	Attention  []string
	Fanouts    []FanoutSnapshot // by parent id
	// The single-stream path's partial writes (see State.Unscheduled and
	// State.Announced).
	Unscheduled []UnscheduledSnapshot // by execution id
	Announced   []AnnouncedSnapshot   // by action ref
	Schedules   []ScheduleSnapshot    // by ref

	// Every action's statistics (by ref), counted from position StatsFrom
	// (0: the whole log; see State.StatsFrom). StatsKept is true in every
	// snapshot this build writes: a snapshot or checkpoint of a build
	// before it decodes with StatsKept false and no statistics, which then
	// count from its Next. The fields are tagged "added": the type's
	// fingerprint without them is the older build's, whose snapshots and
	// checkpoints still decode (snapshotfile.go).
	Stats     []StatsSnapshot `snapshot:"added"`
	StatsFrom uint64          `snapshot:"added"`
	StatsKept bool            `snapshot:"added"`
	// Every resource (by name); none in a snapshot of a build before resources.
	Resources []domain.ResourceSnapshot `snapshot:"added"`
}

// The large lists of a snapshot (every waiter, every execution record) are
// written after the rest of it, in pieces (see bulky).

func (sn *StateSnapshot) withoutBulk() any {
	c := *sn
	c.Queues.Queues = slices.Clone(sn.Queues.Queues)
	for i := range c.Queues.Queues {
		q := &c.Queues.Queues[i]
		q.Keys = slices.Clone(q.Keys)
		for j := range q.Keys {
			q.Keys[j].Waiting = domain.Waiters{}
		}
	}
	return &c
}

func (sn *StateSnapshot) writeBulk(emit func([]byte) error) error {
	for _, q := range sn.Queues.Queues {
		for _, k := range q.Keys {
			if err := encodeWaiters(k.Waiting, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

func (sn *StateSnapshot) readBulk(next func() ([]byte, error)) error {
	for _, q := range sn.Queues.Queues {
		for j := range q.Keys {
			ws, err := decodeWaiters(next)
			if err != nil {
				return err
			}
			q.Keys[j].Waiting = ws
		}
	}
	return nil
}

func (sn *ViewsSnapshot) withoutBulk() any {
	c := *sn
	c.State = *sn.State.withoutBulk().(*StateSnapshot)
	c.Executions = ExecutionRecords{}
	return &c
}

func (sn *ViewsSnapshot) writeBulk(emit func([]byte) error) error {
	if err := sn.State.writeBulk(emit); err != nil {
		return err
	}
	return sn.Executions.encodeChunks(emit)
}

func (sn *ViewsSnapshot) readBulk(next func() ([]byte, error)) error {
	if err := sn.State.readBulk(next); err != nil {
		return err
	}
	return sn.Executions.decodeChunks(next)
}

// WorkerStateSnapshot is a WorkerState.
type WorkerStateSnapshot struct {
	Worker   domain.WorkerSnapshot
	InFlight []string
}

// ActionStateSnapshot is one action of a State.
type ActionStateSnapshot struct {
	Ref    string
	Action domain.ActionSnapshot
}

// FanoutSnapshot is a Fanout.
type FanoutSnapshot struct {
	Parent                   string
	Requested, Ended, Failed int
	Live                     []string
	Announce                 uuid.UUID
}

// UnscheduledSnapshot is one entry of State.Unscheduled: a granted
// execution without its handoff, and the id of its queue.granted.
type UnscheduledSnapshot struct {
	Execution string
	Grant     uuid.UUID
}

// AnnouncedSnapshot is one entry of State.Announced.
type AnnouncedSnapshot struct {
	Ref          string
	Announcement Announcement
}

// Snapshot returns the state's content. It may be encoded while s goes on
// folding: what it shares with s is never changed in place.
func (s *State) Snapshot() *StateSnapshot {
	sn := &StateSnapshot{Next: s.Next, Queues: QueuesSnapshot{s.Queues.Snapshot()}, Attention: slices.Sorted(maps.Keys(s.Attention)),
		Stats: s.snapshotStats(), StatsFrom: s.statsFrom, StatsKept: true, Resources: s.Resources.Snapshot()}
	for _, id := range s.WorkerIDs() {
		w := s.Workers[id]
		sn.Workers = append(sn.Workers, WorkerStateSnapshot{Worker: w.Snapshot(), InFlight: slices.Sorted(maps.Keys(w.InFlight))})
	}
	for _, ref := range slices.Sorted(maps.Keys(s.Schedules)) {
		sn.Schedules = append(sn.Schedules, ScheduleSnapshot{Ref: ref, Schedule: *s.Schedules[ref]})
	}
	for _, ref := range slices.Sorted(maps.Keys(s.Actions)) {
		sn.Actions = append(sn.Actions, ActionStateSnapshot{Ref: ref, Action: s.Actions[ref].Snapshot()})
	}
	for _, id := range slices.Sorted(maps.Keys(s.Fanouts)) {
		f := s.Fanouts[id]
		sn.Fanouts = append(sn.Fanouts, FanoutSnapshot{Parent: id, Requested: f.Requested,
			Ended: f.Ended, Failed: f.Failed, Live: slices.Sorted(maps.Keys(f.Live)), Announce: f.Announce})
	}
	for _, id := range slices.Sorted(maps.Keys(s.Unscheduled)) {
		sn.Unscheduled = append(sn.Unscheduled, UnscheduledSnapshot{Execution: id, Grant: s.Unscheduled[id]})
	}
	for _, ref := range slices.Sorted(maps.Keys(s.Announced)) {
		sn.Announced = append(sn.Announced, AnnouncedSnapshot{Ref: ref, Announcement: s.Announced[ref]})
	}
	sn.Executions = make([]domain.ExecutionSnapshot, 0, len(s.live))
	for _, id := range slices.Sorted(maps.Keys(s.live)) {
		sn.Executions = append(sn.Executions, s.live[id].Snapshot())
	}
	return sn
}

// RestoreState returns the State sn describes.
func RestoreState(sn *StateSnapshot) *State {
	s := NewState()
	s.live = make(map[string]*domain.Execution, len(sn.Executions))
	for _, x := range sn.Executions {
		s.live[x.ID] = domain.RestoreExecution(x)
		s.trackDeferred(x.ID, s.live[x.ID])
	}
	s.Next, s.Queues = sn.Next, domain.RestoreQueues(sn.Queues.QueuesSnapshot)
	for _, w := range sn.Workers {
		s.Workers[w.Worker.ID] = &WorkerState{Worker: domain.RestoreWorker(w.Worker), InFlight: setOf(w.InFlight)}
	}
	for _, a := range sn.Actions {
		s.Actions[a.Ref] = domain.RestoreAction(a.Action)
	}
	for _, sc := range sn.Schedules {
		c := sc.Schedule
		s.Schedules[sc.Ref] = &c
	}
	s.Attention = setOf(sn.Attention)
	for _, f := range sn.Fanouts {
		s.Fanouts[f.Parent] = &Fanout{Requested: f.Requested, Ended: f.Ended, Failed: f.Failed, Live: setOf(f.Live), Announce: f.Announce}
	}
	for _, u := range sn.Unscheduled {
		s.Unscheduled[u.Execution] = u.Grant
	}
	for _, a := range sn.Announced {
		s.Announced[a.Ref] = a.Announcement
	}
	s.restoreStats(sn.Stats)
	s.statsFrom = sn.statsFrom()
	s.Resources = domain.RestoreResources(sn.Resources)
	return s
}

// ViewsSnapshot is a Views' whole content: its State (which holds the live
// executions and every action's statistics), and every execution in
// request order with the position of its last event. The feed of changes
// is not kept: after a restore, feeds that ask for older changes are served
// by a scan, as after the change ring wraps.
type ViewsSnapshot struct {
	State      StateSnapshot
	Executions ExecutionRecords // in request order
	// Stats is the statistics as a build before State kept them wrote them
	// (by ref); this build leaves it empty and reads it from such a file.
	Stats []StatsSnapshot
}

// ExecutionRecordSnapshot is one execution of the read model: what lists
// filter on, and its final state once it has ended (a live one's is in the
// State).
type ExecutionRecordSnapshot struct {
	ID       string
	Final    []byte // an ended one's: the JSON of its final state (nil while it lives)
	Action   string
	Parent   string
	Status   domain.Status
	Position uint64
}

// StatsSnapshot is one action's statistics.
type StatsSnapshot struct {
	Ref                                  string
	Position                             uint64
	Enqueued, Granted, Completed, Failed uint64
	TimedOut, Rejected, Cancelled        uint64
	Waits                                []float64
	WaitNext                             int
}

// Snapshot returns the read model's content. It may be encoded while v goes
// on folding: what it shares with v is never changed in place. It holds the
// read lock while it copies (about 0.1 s per million executions).
func (v *Views) Snapshot() *ViewsSnapshot {
	sn, _ := v.snapshot()
	return sn
}

// snapshot returns the snapshot and the id of the event at its position-1.
func (v *Views) snapshot() (*ViewsSnapshot, string) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	kept := v.kept()
	sn := &ViewsSnapshot{State: *v.st.Snapshot(), Executions: ExecutionRecords{ids: kept, recs: make([]execRecord, len(kept))}}
	for i, id := range kept {
		// (A copy of each record: what they point to is never changed.)
		sn.Executions.recs[i] = *v.execs.Get(id)
		sn.Executions.recs[i].seq = i
	}
	return sn, v.lastID
}

// RestoreViews returns the read model sn describes, keeping every execution
// in it (call Retain to bound it again). The read model keeps sn's records
// themselves; restoring sn again copies them.
func RestoreViews(sn *ViewsSnapshot) *Views { return restoreViews(sn, changeRingSize) }

// restoreViews is RestoreViews with a ring of ringSize recent changes.
func restoreViews(sn *ViewsSnapshot, ringSize int) *Views {
	v := newViews(ringSize)
	n := sn.Executions.Len()
	v.order = make([]string, 0, n)
	v.execs = newRecIndex(&v.order, n)
	v.st = RestoreState(&sn.State)
	recs := sn.Executions.take()
	// The retained ended executions, oldest end first: an ended record's
	// position is its terminal event's.
	type endedAt struct {
		pos uint64
		id  string
	}
	var ended []endedAt
	for i, id := range sn.Executions.ids {
		rec := &recs[i]
		rec.action, rec.seq = v.intern(rec.action), i
		if own, ok := v.st.Queues.WaiterID(id); ok {
			id = own // one copy of a waiter's id, not two
		}
		v.order = append(v.order, id)
		v.execs.Put(id, rec, 0)
		v.byRef[rec.action] = append(v.byRef[rec.action], i)
		if rec.final != nil {
			ended = append(ended, endedAt{rec.pos, id})
		}
	}
	slices.SortStableFunc(ended, func(a, b endedAt) int { return cmp.Compare(a.pos, b.pos) })
	v.ended = make([]string, len(ended))
	for i, e := range ended {
		v.ended[i] = e.id
	}
	v.changes.floor = v.st.Next
	if !sn.State.StatsKept { // an older build's file: its statistics are the read model's, counted as it counted them
		v.st.restoreStats(sn.Stats)
		v.st.statsFrom = 0
	}
	return v
}

// viewsSnapshotName is the read model's snapshot file.
const viewsSnapshotName = "views"

// LoadViews returns the read model restored from its snapshot in files when
// there is one that matches store's log, and an empty one otherwise (saying
// why on log). Either way the caller then folds the log from Next().
func LoadViews(ctx context.Context, files SnapshotFiles, store eventstore.Store, log *slog.Logger) *Views {
	return ReadViews(files)(ctx, store, log)
}

// LoadViewsNamed is LoadViews of the snapshot saved under name (see
// SnapshotFor), for a read model other than the API's.
func LoadViewsNamed(ctx context.Context, files SnapshotFiles, name string, store eventstore.Store, log *slog.Logger) *Views {
	return readViews(files, name)(ctx, store, log)
}

// ReadViews starts decoding the read model's snapshot in files in the
// background (it needs no log, so it can overlap opening one) and returns
// the function that waits for it and checks it against store: LoadViews in
// two steps.
func ReadViews(files SnapshotFiles) func(ctx context.Context, store eventstore.Store, log *slog.Logger) *Views {
	return readViews(files, viewsSnapshotName)
}

func readViews(files SnapshotFiles, name string) func(ctx context.Context, store eventstore.Store, log *slog.Logger) *Views {
	type read struct {
		sn   ViewsSnapshot
		info SnapshotInfo
		ok   bool
		err  error
		took time.Duration
	}
	done := make(chan *read, 1)
	go func() {
		start := time.Now()
		r := &read{}
		r.info, r.ok, r.err = files.Read(name, &r.sn)
		r.took = time.Since(start)
		done <- r
	}()
	return func(ctx context.Context, store eventstore.Store, log *slog.Logger) *Views {
		r := <-done
		if r.err == nil && r.ok {
			r.err = r.info.Check(ctx, store)
		}
		switch {
		case r.err != nil:
			log.Warn("not using the read model's snapshot: folding the log from the beginning", "snapshot", name, "err", r.err)
		case r.ok:
			start := time.Now()
			v := RestoreViews(&r.sn)
			log.Info("read model resumed from a snapshot", "snapshot", name, "position", r.sn.State.Next, "executions", r.sn.Executions.Len(),
				"read", r.took, "restored", time.Since(start))
			return v
		}
		return NewViews()
	}
}

// SaveSnapshot saves the read model as it is now into files (nothing when it
// has folded no event). The copy is taken under the read lock; the encoding
// and the write are not.
func (v *Views) SaveSnapshot(files SnapshotFiles) error {
	return v.SnapshotFor(files, viewsSnapshotName)()
}

// SnapshotFor copies the read model as it is now (under the read lock) and
// returns the function that encodes the copy and saves it under name into
// files (nothing when the read model has folded no event). LoadViewsNamed
// loads it.
func (v *Views) SnapshotFor(files SnapshotFiles, name string) (save func() error) {
	sn, lastID := v.snapshot()
	return func() error {
		if lastID == "" {
			return nil
		}
		return files.Save(name, sn.State.Next, lastID, sn)
	}
}

// KeepSnapshots saves a snapshot into files whenever the read model has
// folded every more events since the last one, until ctx ends. Failures are
// logged and retried at the next batch.
func (v *Views) KeepSnapshots(ctx context.Context, files SnapshotFiles, every uint64, log *slog.Logger) {
	last := v.Next()
	for {
		select {
		case <-ctx.Done():
			return
		case <-v.Changed():
		}
		if next := v.Next(); next-last >= every {
			start := time.Now()
			if err := v.SaveSnapshot(files); err != nil {
				log.Warn("cannot save the read model's snapshot", "err", err)
				continue
			}
			last = next
			log.Debug("saved the read model's snapshot", "position", next, "took", time.Since(start))
		}
	}
}

func setOf(keys []string) map[string]struct{} {
	m := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		m[k] = struct{}{}
	}
	return m
}

// ScheduleSnapshot is one schedule in a StateSnapshot.
type ScheduleSnapshot struct {
	Ref      string
	Schedule domain.Schedule
}
