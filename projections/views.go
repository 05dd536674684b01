package projections

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/turnstile/turnstile/domain"

	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/codec"
)

// Views is the read model the API serves: every execution (ended ones too),
// every action with its queue and statistics, and every worker, folded from
// the log. One goroutine folds (Apply, or Run); any number read. Two Views
// that applied the same events are equal (Compare), however the events were
// batched: the fold is a pure function of the log.
type Views struct {
	mu      sync.RWMutex
	st      *State
	execs   *recIndex        // by id; a record's id is order[rec.seq]
	order   []string         // execution ids in request order
	byRef   map[string][]int // per action, indexes into order
	changes changeRing
	wake    chan struct{}
	skipped uint64 // events that did not decode (see Apply)
	onLag   func(time.Duration)
	lastID  string            // id of the event at st.Next-1, for snapshots
	refs    map[string]string // interned action refs

	// Retention (see Retain): the retained ended executions, oldest end
	// first (ended[endedHead:]), and how many entries of order are holes
	// left by evicted ones.
	retain     int
	holding    bool   // HoldFrom was called:
	holdFrom   uint64 // ended executions whose last event is at or past it are kept
	ended      []string
	endedHead  int
	holes      int
	evictedAll uint64
}

// execRecord is one execution of the read model: what List filters on, and
// where its state is. While it lives, its aggregate is the fold's (State;
// for a mere waiter, its queue's slot). Once it has ended it never changes
// again, and the record keeps its final state as JSON in one pointer-free
// allocation (half the memory, next to nothing for the garbage collector to
// scan, and quick to snapshot).
type execRecord struct {
	final  []byte // the JSON of its final domain.ExecutionState, once ended (nil while it lives)
	action string // interned
	parent string
	pos    uint64     // position of its last event
	seq    int        // index in Views.order
	status statusCode // (a byte, not a string: a million records)
}

// statusCode is a domain.Status as its index in domain.AllStatuses.
type statusCode uint8

var statusCodes = func() map[domain.Status]statusCode {
	m := map[domain.Status]statusCode{}
	for i, st := range domain.AllStatuses {
		m[st] = statusCode(i)
	}
	return m
}()

// codeOf returns st's code; ok is false for a status the domain does not know.
func codeOf(st domain.Status) (c statusCode, ok bool) {
	c, ok = statusCodes[st]
	return c, ok
}

func (c statusCode) status() domain.Status { return domain.AllStatuses[c] }

// mustCode returns the code of a status an aggregate is in.
func mustCode(st domain.Status) statusCode {
	c, ok := codeOf(st)
	if !ok {
		panic(fmt.Sprintf("views: an execution is in unknown state %q", st))
	}
	return c
}

// stateOf returns execution id's state as the API shows it.
func (v *Views) stateOf(id string, r *execRecord) domain.ExecutionState {
	if r.final == nil {
		x := v.st.Execution(id)
		if x == nil {
			// The record and the fold change together: a record without
			// a final state is an execution the fold has live.
			panic(fmt.Sprintf("views: live execution %s is not in the fold", id))
		}
		return x.State()
	}
	var st domain.ExecutionState
	if err := json.Unmarshal(r.final, &st); err != nil {
		// Only this package writes final, from a domain.ExecutionState.
		panic(fmt.Sprintf("views: a final execution state does not decode: %v", err))
	}
	return st
}

// freeze keeps the final state of x, which has ended.
func (r *execRecord) freeze(x *domain.Execution) {
	b, err := json.Marshal(x.State())
	if err != nil {
		panic(fmt.Sprintf("views: an execution state does not encode: %v", err))
	}
	r.final, r.status = b, mustCode(x.Status())
}

// Retain bounds the memory the read model takes as executions end: it keeps
// the n most recently ended executions (and every live one) and forgets the
// older ended ones, which then are only in the log (List skips them; the
// API serves a single one by folding its stream). 0, the default, keeps
// every execution. The choice is deterministic (the order of the terminal
// events in the log), so two read models with the same n that folded the
// same log compare equal. Set it before the first Apply; a smaller n later
// takes effect at once.
func (v *Views) Retain(n int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.retain = max(n, 0)
	v.evictOverflow()
}

// HoldFrom keeps every ended execution whose last event is at position pos
// or later, whatever the retention, until a later HoldFrom moves pos on: a
// reader that writes the executions changed since pos (the SQL tables'
// projector) must still find them. Those the retention already asked to
// forget and are below pos now are forgotten at once.
func (v *Views) HoldFrom(pos uint64) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.holding, v.holdFrom = true, pos
	v.evictOverflow()
}

// Retention returns the n of Retain.
func (v *Views) Retention() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.retain
}

// Evicted returns how many ended executions the read model has forgotten.
func (v *Views) Evicted() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.evictedAll
}

// hasEnded records that execution id has ended, and forgets the oldest ended
// execution beyond the retention.
func (v *Views) hasEnded(id string) {
	v.ended = append(v.ended, id)
	v.evictOverflow()
}

func (v *Views) evictOverflow() {
	if v.retain == 0 {
		return
	}
	v.forgetEnded(v.retain, math.MaxUint64)
}

// forgetEnded forgets ended executions, oldest first, while more than keep
// are remembered; it stops at the first one whose last event is at or after
// before, or that HoldFrom holds (the ones after it ended later still).
func (v *Views) forgetEnded(keep int, before uint64) {
	for len(v.ended)-v.endedHead > keep {
		id := v.ended[v.endedHead]
		rec := v.execs.Get(id)
		if rec != nil && (rec.pos >= before || v.holding && rec.pos >= v.holdFrom) {
			break
		}
		v.ended[v.endedHead] = ""
		v.endedHead++
		if rec != nil {
			v.execs.Remove(id)
			v.order[rec.seq] = ""
			v.holes++
			v.evictedAll++
		}
	}
	if v.endedHead > 1024 && v.endedHead*2 > len(v.ended) {
		n := copy(v.ended, v.ended[v.endedHead:])
		clear(v.ended[n:])
		v.ended, v.endedHead = v.ended[:n], 0
	}
	if v.holes > 1024 && v.holes*2 > len(v.order) {
		v.compactOrder()
	}
}

// compactOrder drops the holes from order, renumbering the records.
func (v *Views) compactOrder() {
	// Find the records while they are at their places (execs finds them
	// through order), then renumber.
	order := make([]string, 0, len(v.order)-v.holes)
	recs := make([]*execRecord, 0, len(v.order)-v.holes)
	for _, id := range v.order {
		if id != "" {
			order, recs = append(order, id), append(recs, v.execs.Get(id))
		}
	}
	clear(v.byRef)
	for i, rec := range recs {
		rec.seq = i
		v.byRef[rec.action] = append(v.byRef[rec.action], i)
	}
	v.order, v.holes = order, 0
}

// NewViews returns the read model of an empty log.
func NewViews() *Views { return newViews(changeRingSize) }

func newViews(ringSize int) *Views {
	v := &Views{
		st:      NewState(),
		refs:    map[string]string{},
		byRef:   map[string][]int{},
		changes: newChangeRing(ringSize),
		wake:    make(chan struct{}),
	}
	v.execs = newRecIndex(&v.order, 0)
	return v
}

// Next returns the position after the last applied event.
func (v *Views) Next() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.st.Next
}

// Changed returns a channel closed at the next applied batch.
func (v *Views) Changed() <-chan struct{} {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.wake
}

// Apply folds a batch of events in log order. Events at positions already
// applied are skipped. An event that does not decode (a malformed event, or
// a type or schema version this build does not know) is passed over and
// counted (Skipped): one poisoned event must not stop the read model of
// every action. The audit reports it. Apply never fails; the error is for
// folds that may one day refuse a batch.
func (v *Views) Apply(batch []domain.Envelope) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	defer v.broadcast()
	for i := range batch {
		env := &batch[i]
		if env.Position < v.st.Next {
			continue
		}
		if env.Type == domain.TypeCheckpointPart { // changes nothing: not decoded (up to 512 KiB)
			v.st.Next = env.Position + 1
			v.lastID = env.ID.String()
			continue
		}
		ev, err := codec.Events.Decode(env)
		if err != nil {
			v.skipped++
			v.st.Next = env.Position + 1
			v.lastID = env.ID.String()
			continue
		}
		v.apply(env, ev)
		v.lastID = env.ID.String()
	}
	if v.onLag != nil && len(batch) > 0 && !batch[0].Time.IsZero() {
		v.onLag(time.Since(batch[0].Time))
	}
	return nil
}

// Refusal says whether the queue of action ref, as the views last folded it,
// would refuse a request with input at time now, and why (see
// domain.Queue.Refusal): "" when it would admit it, and also when the views
// cannot judge (an unknown action, an input without its concurrency key:
// the fold decides those at the request's position).
func (v *Views) Refusal(ref string, input json.RawMessage, now time.Time) (code, reason string, retryAfter time.Duration) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	q := v.st.Queues.Get(ref)
	if q == nil || !q.Defined() {
		return "", "", 0
	}
	key, err := q.Policy().KeyOf(input)
	if err != nil {
		return "", "", 0
	}
	return q.Refusal(key, now)
}

// Skipped returns how many events the views passed over because they did
// not decode.
func (v *Views) Skipped() uint64 {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.skipped
}

// ObserveLag makes the views call fn, after each batch they apply, with the
// time between the commit of the batch's first event and now: how far the
// read model is behind the log, in time. Set it before the views follow the
// log (Run); fn must be quick.
func (v *Views) ObserveLag(fn func(time.Duration)) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.onLag = fn
}

func (v *Views) broadcast() {
	close(v.wake)
	v.wake = make(chan struct{})
}

func (v *Views) apply(env *domain.Envelope, ev domain.Event) {
	cat, id := domain.SplitStream(env.Stream)
	var before domain.Status
	if rec := v.execs.Get(id); cat == domain.StreamExecution && rec != nil {
		before = rec.status.status()
	}
	x := v.st.apply(env, ev)
	switch cat {
	case domain.StreamExecution:
		v.applyExecution(env, ev, id, before, x)
	case domain.StreamAction, domain.StreamQueue:
		v.changes.add(change{pos: env.Position, kind: kindStats, key: id}) // (State counts the statistics)
	case domain.StreamWorker:
		v.changes.add(change{pos: env.Position, kind: kindWorker, key: id})
	}
}

// applyExecution updates the record of execution id after the fold applied
// ev, which left the execution as x (nil if the fold ignored ev). The fold
// has counted the action's statistics (State.countStats).
func (v *Views) applyExecution(env *domain.Envelope, ev domain.Event, id string, before domain.Status, x *domain.Execution) {
	rec := v.execs.Get(id)
	if req, ok := ev.(domain.ExecutionRequested); ok && rec == nil {
		if x == nil { // ended at once (cannot happen with a requested event, but stay total)
			return
		}
		rec = &execRecord{action: v.intern(req.Action), parent: x.Parent(), status: mustCode(x.Status()), seq: len(v.order)}
		v.order = append(v.order, id)
		v.execs.Put(id, rec, 0)
		v.byRef[req.Action] = append(v.byRef[req.Action], rec.seq)
	}
	if rec == nil {
		return // an event for an execution the log never requested: the audit reports it
	}
	if before.Terminal() || x == nil {
		return // State ignores events after the end, and so do the views
	}
	rec.status = mustCode(x.Status())
	if x.Status().Terminal() {
		rec.freeze(x)
		defer v.hasEnded(id)
	}
	rec.pos = env.Position
	v.changes.add(change{pos: env.Position, kind: kindExecution, key: id})
	if x.IsParent() {
		return // a with_items parent takes no slot; its children count
	}
	v.changes.add(change{pos: env.Position, kind: kindStats, key: x.Action()})
}

// intern returns the read model's copy of an action ref, so that a million
// executions of one action share one string.
func (v *Views) intern(ref string) string {
	if s, ok := v.refs[ref]; ok {
		return s
	}
	v.refs[ref] = ref
	return ref
}

// ---- queries ----

// ExecutionView is an execution's state as the API shows it: the fold's
// state (a with_items parent's lists its children in item order) and the
// log position it is current as of.
type ExecutionView struct {
	domain.ExecutionState
	Position uint64 `json:"position"`
	// Archived is set on an execution the live log no longer holds,
	// folded from the archive (Queries.WithArchive).
	Archived bool `json:"archived,omitempty"`
}

// View returns an execution as the API shows it.
func (v *Views) View(id string) (ExecutionView, bool) {
	v.mu.RLock()
	defer v.mu.RUnlock()
	rec := v.execs.Get(id)
	if rec == nil {
		return ExecutionView{}, false
	}
	return v.viewLocked(id, rec), true
}

func (v *Views) viewLocked(id string, rec *execRecord) ExecutionView {
	return ExecutionView{ExecutionState: v.stateOf(id, rec), Position: rec.pos}
}

// ListFilter selects executions for List. Empty fields match everything.
type ListFilter struct {
	Action string
	Status domain.Status
	Parent string
	After  string // an execution id: list executions requested before it
	Limit  int
	// MaxBytes bounds a page's size as well (<= 0: DefaultPageBytes): a
	// page ends before the execution that would take its executions' JSON
	// past MaxBytes, unless it is the page's first (a page is never
	// empty while executions are left).
	MaxBytes int
	// ActionPrefixes, if not empty, keeps only executions of an action
	// whose ref starts with one of them (a scoped token's view).
	ActionPrefixes []string
}

// prefixed reports whether ref starts with one of prefixes (or prefixes is empty).
func prefixed(ref string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(ref, p) {
			return true
		}
	}
	return len(prefixes) == 0
}

// MaxListLimit caps a page of List.
const MaxListLimit = 1000

// DefaultPageBytes is the default byte budget of a page of executions or
// events: with inputs and results up to 256 KiB each, a page of 1,000
// items could otherwise hold a gigabyte.
const DefaultPageBytes = 1 << 20

// ErrUnknownCursor is returned by List when After names no execution.
var ErrUnknownCursor = errors.New("unknown cursor")

// List returns executions newest first (by request order) that match f, and
// the id to pass as After for the next page ("" on the last page).
func (v *Views) List(f ListFilter) ([]ExecutionView, string, error) {
	if f.Limit <= 0 || f.Limit > MaxListLimit {
		f.Limit = min(max(f.Limit, 50), MaxListLimit)
	}
	v.mu.RLock()
	defer v.mu.RUnlock()
	start := len(v.order)
	if f.After != "" {
		rec := v.execs.Get(f.After)
		if rec == nil {
			return nil, "", fmt.Errorf("%w %q", ErrUnknownCursor, f.After)
		}
		start = rec.seq
	}
	var seqs []int // candidate indexes into order, ascending
	switch {
	case f.Parent != "":
		p := v.execs.Get(f.Parent)
		if p == nil {
			return []ExecutionView{}, "", nil
		}
		for _, c := range v.stateOf(f.Parent, p).Children {
			if r := v.execs.Get(c); r != nil {
				seqs = append(seqs, r.seq)
			}
		}
		sort.Ints(seqs)
	case f.Action != "":
		seqs = v.byRef[f.Action]
	}
	out := []ExecutionView{}
	match := func(rec *execRecord) bool {
		return (f.Action == "" || rec.action == f.Action) && (f.Status == "" || rec.status.status() == f.Status) &&
			(f.Parent == "" || rec.parent == f.Parent) && prefixed(rec.action, f.ActionPrefixes)
	}
	budget := f.MaxBytes
	if budget <= 0 {
		budget = DefaultPageBytes
	}
	// last is the seq of the page's last execution; visit reports
	// whether the page is full.
	used, last, full := 0, -1, false
	visit := func(seq int) bool {
		id := v.order[seq]
		rec := v.execs.Get(id)
		if rec == nil || !match(rec) { // nil: a forgotten execution (Retain)
			return false
		}
		size := len(rec.final) // an ended execution's size is known before it is decoded
		var view ExecutionView
		if rec.final == nil {
			view = v.viewLocked(id, rec)
			size = viewSize(&view.ExecutionState)
		}
		if len(out) > 0 && used+size > budget {
			full = true
			return true
		}
		if rec.final != nil {
			view = v.viewLocked(id, rec)
		}
		out, used, last = append(out, view), used+size, seq
		full = len(out) == f.Limit
		return full
	}
	if seqs == nil && f.Parent == "" && f.Action == "" {
		for i := start - 1; i >= 0; i-- {
			if visit(i) {
				break
			}
		}
	} else {
		i, _ := slices.BinarySearch(seqs, start)
		for i--; i >= 0; i-- {
			if visit(seqs[i]) {
				break
			}
		}
	}
	if !full || last <= 0 {
		return out, "", nil
	}
	return out, v.order[last], nil
}

// viewSize is about the bytes of st's JSON: its input, result and children,
// plus its other fields.
func viewSize(st *domain.ExecutionState) int {
	return 512 + len(st.Input) + len(st.Result) + len(st.Error) + 40*len(st.Children)
}

// Run folds the log into v from v.Next() until ctx ends or the store fails.
func (v *Views) Run(ctx context.Context, store eventstore.Store) error {
	err := store.Subscribe(ctx, v.Next(), eventstore.Filter{}, v.Apply)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// CatchUp folds the log into v up to the store's head at the time of the call.
func (v *Views) CatchUp(ctx context.Context, store eventstore.Store) error {
	head, err := store.Head(ctx)
	if err != nil {
		return err
	}
	return v.CatchUpTo(ctx, store, head)
}

// CatchUpTo folds the events at positions below target into v.
func (v *Views) CatchUpTo(ctx context.Context, store eventstore.Store, target uint64) error {
	for from := v.Next(); from < target; from = v.Next() {
		batch, err := store.ReadAll(ctx, from, 4096)
		if err != nil {
			return err
		}
		n := 0
		for n < len(batch) && batch[n].Position < target {
			n++
		}
		if n == 0 {
			return nil
		}
		if err := v.Apply(batch[:n]); err != nil {
			return err
		}
	}
	return nil
}
