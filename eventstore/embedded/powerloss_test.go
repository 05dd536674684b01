package embedded

// Power-loss tests: the store runs on a simulated disk (diskfs.Sim) that a power
// cut at a random operation leaves holding only what was synced, plus a
// prefix of the unsynced tail torn at any byte. After each cut the store is
// reopened from the surviving bytes and checked: every acknowledged event
// (Append returned nil) is there, nothing it did not acknowledge is there in
// part (an append is whole or absent, and every event reads back as written),
// and positions and versions continue. A store that skipped its fsync would
// acknowledge events the cut then takes away.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/diskfs"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// TestConformanceSimulatedDisk runs the conformance suite on the simulated
// disk with no cut, durable as in production: the disk behaves as a file
// system for everything the store does.
func TestConformanceSimulatedDisk(t *testing.T) {
	storetest.Run(t, func(t *testing.T) eventstore.Store {
		s, err := OpenFS(diskfs.NewSim(), "/data", Options{})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}, storetest.Capabilities{DensePositions: true, AtomicMultiStream: true})
}

// TestPowerLoss cuts the power at random operations under a store that
// concurrent writers drive with the conformance suite's kinds of appends
// (single and batched events, expected versions, AppendMulti with
// conditions, idempotent replays) and an execution lifecycle (requested →
// scheduling → scheduled → running → completed, each step fenced on its
// execution's and its queue's versions), then checks every reopen.
// TURNSTILE_POWERLOSS_SEED replays a seed's choices (the goroutines'
// interleaving still varies).
func TestPowerLoss(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TURNSTILE_POWERLOSS_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatalf("TURNSTILE_POWERLOSS_SEED=%q: %v", v, err)
		}
	}
	runs, gens := 6, 25
	if testing.Short() {
		runs, gens = 3, 15
	}
	t.Logf("seed %d (replay: TURNSTILE_POWERLOSS_SEED=%d go test -run TestPowerLoss ./eventstore/embedded/)", seed, seed)
	start := time.Now()
	var total powerStats
	for run := range runs {
		rs := seed + uint64(run)
		st := powerLossRun(t, rs, gens)
		total.add(st)
		if t.Failed() {
			t.Fatalf("run %d (seed %d) failed; replay with TURNSTILE_POWERLOSS_SEED=%d", run, rs, seed)
		}
	}
	t.Logf("power loss: %d cuts (%d during Open, %d during Close; %d unsynced operations met, %d writes torn), %d events checked after reopens (%d of them acknowledged), %d appends acknowledged, in %v",
		total.cuts, total.openCuts, total.closeCuts, total.disk.PendingOps, total.disk.Torn, total.checked, total.ackChecked, total.acked, time.Since(start).Round(time.Millisecond))
}

type powerStats struct {
	cuts, openCuts, closeCuts int
	checked, ackChecked       int
	acked                     int
	disk                      diskfs.CutStats
}

func (p *powerStats) add(o powerStats) {
	p.cuts += o.cuts
	p.openCuts += o.openCuts
	p.closeCuts += o.closeCuts
	p.checked += o.checked
	p.ackChecked += o.ackChecked
	p.acked += o.acked
	p.disk.PendingOps += o.disk.PendingOps
	p.disk.Torn += o.disk.Torn
}

// powerLossRun runs gens generations on one simulated disk: each opens the
// store on what the last cut left, checks it, writes until a cut, and
// leaves the disk image to the next. A last open checks the final image,
// closes cleanly and checks again.
func powerLossRun(t *testing.T, seed uint64, gens int) powerStats {
	const dir = "/data"
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	m := newLogModel()
	var st powerStats
	var img *diskfs.Image
	for gen := range gens {
		disk := diskfs.NewSim()
		if img != nil {
			disk = diskfs.FromImage(img)
		}
		opts := Options{
			HotEvents:       []int{4, 40, -1, 0}[rng.IntN(4)],
			Preallocate:     []int{-1, 512, 64 << 10, 0}[rng.IntN(4)],
			GroupCommitWait: []time.Duration{-1, 0, time.Millisecond}[rng.IntN(3)],
			MaxBatch:        []int{0, 3, 50}[rng.IntN(3)],
			SegmentBytes:    []int64{0, MinSegmentBytes, 8 << 10}[rng.IntN(3)],
		}
		diskRng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		early := rng.IntN(4) == 0
		if early {
			disk.PlanCut(1+rng.IntN(6), diskRng) // during Open's recovery, or right after
		}
		s, err := OpenFS(disk, dir, opts)
		if err != nil {
			if !early || !errors.Is(err, diskfs.ErrPowerCut) {
				t.Fatalf("gen %d: Open: %v", gen, err)
			}
			img = disk.CutNow()
			st.cuts++
			st.openCuts++
			addCuts(&st.disk, disk.Stats())
			continue
		}
		m.check(t, fmt.Sprintf("gen %d (seed %d)", gen, seed), s, &st)
		if t.Failed() {
			_ = s.Close()
			return st
		}
		closing := !early && rng.IntN(4) == 0
		if !early && !closing {
			disk.PlanCut(1+rng.IntN(400), diskRng)
		}
		steps := 100_000 // until the cut stops the writers
		if closing {
			steps = 1 + rng.IntN(60)
		}
		m.write(t, s, gen, rng, steps)
		if closing {
			// Writers done; the cut comes during Close (its seal, its
			// trim, their syncs), or just after.
			disk.PlanCut(1+rng.IntN(16), diskRng)
			_ = s.Close()
			if disk.WasCut() {
				st.closeCuts++
			}
		}
		img = disk.CutNow()
		_ = s.Close() // fails: the disk is gone
		st.cuts++
		addCuts(&st.disk, disk.Stats())
		st.acked += m.takeAcked()
	}
	// The last image, then a clean close and reopen.
	for i := range 2 {
		disk := diskfs.FromImage(img)
		s, err := OpenFS(disk, dir, Options{})
		if err != nil {
			t.Fatalf("final Open %d: %v", i, err)
		}
		m.check(t, fmt.Sprintf("final open %d (seed %d)", i, seed), s, &st)
		if err := s.Close(); err != nil {
			t.Fatalf("final Close: %v", err)
		}
		img = disk.CutNow()
	}
	st.acked += m.takeAcked()
	return st
}

// logModel is what the writers asked for and what the store acknowledged.
type logModel struct {
	mu       sync.Mutex
	sent     map[uuid.UUID]sentEvent
	batches  [][]uuid.UUID
	acked    []bool
	newAcked int
	// survived: events a reopen has read back, at their positions: they are
	// on the disk and must stay where they are.
	survived map[uuid.UUID]uint64
}

type sentEvent struct {
	stream string
	env    domain.Envelope
	batch  int
}

func newLogModel() *logModel {
	return &logModel{sent: map[uuid.UUID]sentEvent{}, survived: map[uuid.UUID]uint64{}}
}

// attempt records an append before it is tried and returns its number.
func (m *logModel) attempt(appends []eventstore.StreamAppend) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	b := len(m.batches)
	var ids []uuid.UUID
	for _, a := range appends {
		for _, e := range a.Events {
			m.sent[e.ID] = sentEvent{stream: a.Stream, env: e, batch: b}
			ids = append(ids, e.ID)
		}
	}
	m.batches = append(m.batches, ids)
	m.acked = append(m.acked, false)
	return b
}

func (m *logModel) ack(b int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acked[b] = true
	m.newAcked++
}

func (m *logModel) takeAcked() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.newAcked
	m.newAcked = 0
	return n
}

// check reads the whole log of a reopened store and compares it with the
// model; then it appends one probe event and checks its position.
func (m *logModel) check(t *testing.T, where string, s *Store, st *powerStats) {
	t.Helper()
	ctx := context.Background()
	var evs []domain.Envelope
	for {
		page, err := s.ReadAll(ctx, uint64(len(evs)), 1000)
		if err != nil {
			t.Errorf("%s: ReadAll(%d): %v", where, len(evs), err)
			return
		}
		evs = append(evs, page...)
		if len(page) < 1000 {
			break
		}
	}
	head, err := s.Head(ctx)
	if err != nil || head != uint64(len(evs)) {
		t.Errorf("%s: Head = %d, %v; the log holds %d events", where, head, err, len(evs))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := make(map[uuid.UUID]uint64, len(evs))
	perBatch := map[int]int{}
	versions := map[string]uint64{}
	for i, e := range evs {
		if e.Position != uint64(i) {
			t.Errorf("%s: event %d of the log has position %d", where, i, e.Position)
		}
		sent, ok := m.sent[e.ID]
		if !ok {
			t.Errorf("%s: position %d holds event %s that no writer sent (%s in %s)", where, i, e.ID, e.Type, e.Stream)
			continue
		}
		if e.Stream != sent.stream || !eventstore.SameContent(&e, &sent.env) {
			t.Errorf("%s: position %d reads back as %s %s %q, was sent as %s %s %q", where, i, e.Stream, e.Type, e.Data, sent.stream, sent.env.Type, sent.env.Data)
		}
		if e.Version != versions[e.Stream] {
			t.Errorf("%s: position %d is version %d of %s, want %d", where, i, e.Version, e.Stream, versions[e.Stream])
		}
		versions[e.Stream] = e.Version + 1
		if _, dup := seen[e.ID]; dup {
			t.Errorf("%s: event %s twice in the log", where, e.ID)
		}
		seen[e.ID] = uint64(i)
		perBatch[sent.batch]++
		if m.acked[sent.batch] {
			st.ackChecked++
		}
	}
	st.checked += len(evs)
	for b, n := range perBatch {
		if n != len(m.batches[b]) {
			t.Errorf("%s: append %d is in the log in part: %d of its %d events", where, b, n, len(m.batches[b]))
		}
	}
	lost := 0
	for b, ok := range m.acked {
		if ok && perBatch[b] == 0 && len(m.batches[b]) > 0 {
			if lost++; lost <= 5 {
				t.Errorf("%s: acknowledged append %d (%d events, first %s in %s) is missing after the power cut", where, b, len(m.batches[b]), m.batches[b][0], m.sent[m.batches[b][0]].stream)
			}
		}
	}
	if lost > 5 {
		t.Errorf("%s: %d acknowledged appends missing in all", where, lost)
	}
	for id, pos := range m.survived {
		if got, ok := seen[id]; !ok || got != pos {
			t.Errorf("%s: event %s was read back at position %d after an earlier cut; now at %d (present %v)", where, id, pos, got, ok)
		}
	}
	m.survived = seen
}

// write runs writers against s until the power cut stops them or each has
// made steps appends.
func (m *logModel) write(t *testing.T, s *Store, gen int, rng *rand.Rand, steps int) {
	t.Helper()
	writers := 1 + rng.IntN(6)
	var wg sync.WaitGroup
	for w := range writers {
		wr := &powerWriter{m: m, s: s, gen: gen, w: w, rng: rand.New(rand.NewPCG(rng.Uint64(), uint64(w)))}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := wr.run(steps); err != nil && !errors.Is(err, diskfs.ErrPowerCut) && !errors.Is(err, eventstore.ErrClosed) {
				t.Errorf("gen %d writer %d: %v", gen, w, err)
			}
		}()
	}
	waitT(t, &wg, fmt.Sprintf("gen %d: %d writers (until the power cut)", gen, writers), nil)
}

// powerWriter appends to streams it alone writes, so it knows their versions.
type powerWriter struct {
	m    *logModel
	s    *Store
	gen  int
	w    int
	rng  *rand.Rand
	last []eventstore.StreamAppend // its last acknowledged append, to replay
	n    int
}

func (p *powerWriter) event(typ string) domain.Envelope {
	p.n++
	size := p.rng.IntN(200)
	if p.rng.IntN(20) == 0 {
		size = 2000 + p.rng.IntN(20000) // records across pages
	}
	e := storetest.NewEvent(typ, map[string]any{"gen": p.gen, "w": p.w, "n": p.n, "pad": strings.Repeat("x", size)})
	e.Owner = []domain.Owner{domain.OwnerAPI, domain.OwnerExecutor, domain.OwnerWorker}[p.n%3]
	e.CorrelationID = fmt.Sprintf("c-%d-%d", p.gen, p.n)
	return e
}

// version returns the next version of stream (0 if it does not exist).
func (p *powerWriter) next(stream string) (uint64, error) {
	evs, err := p.s.ReadStream(context.Background(), stream, 0, 1<<30)
	if errors.Is(err, eventstore.ErrStreamNotFound) {
		return 0, nil
	}
	return uint64(len(evs)), err
}

func expect(next uint64) eventstore.ExpectedVersion {
	if next == 0 {
		return eventstore.NoStream
	}
	return eventstore.Exact(next - 1)
}

// do records and tries one append.
func (p *powerWriter) do(appends ...eventstore.StreamAppend) error {
	b := p.m.attempt(appends)
	var err error
	if len(appends) == 1 && p.rng.IntN(2) == 0 {
		_, err = p.s.Append(context.Background(), appends[0].Stream, appends[0].Expected, appends[0].Events...)
	} else {
		_, err = p.s.AppendMulti(context.Background(), appends...)
	}
	if err != nil {
		return err
	}
	p.m.ack(b)
	p.last = appends
	return nil
}

func (p *powerWriter) run(steps int) error {
	queue := fmt.Sprintf("queue-w%d", p.w) // lives across generations
	bulk := fmt.Sprintf("bulk-w%d", p.w)
	qv, err := p.next(queue)
	if err != nil {
		return err
	}
	bv, err := p.next(bulk)
	if err != nil {
		return err
	}
	for k := 0; k < steps; {
		switch p.rng.IntN(4) {
		case 0: // a batch, as the conformance appends
			n := 1 + p.rng.IntN(8)
			evs := make([]domain.Envelope, n)
			for i := range evs {
				evs[i] = p.event("test.bulk")
			}
			ex := expect(bv)
			if p.rng.IntN(3) == 0 {
				ex = eventstore.Any
			}
			if err := p.do(eventstore.StreamAppend{Stream: bulk, Expected: ex, Events: evs}); err != nil {
				return err
			}
			bv += uint64(n)
			k++
		case 1: // a replay of the last acknowledged append: a no-op
			if p.last != nil {
				if _, err := p.s.AppendMulti(context.Background(), p.last...); err != nil {
					return fmt.Errorf("replaying an acknowledged append: %w", err)
				}
			}
		default: // one execution's lifecycle
			exec := fmt.Sprintf("execution-g%d-w%d-%d", p.gen, p.w, p.n)
			steps := [][]eventstore.StreamAppend{
				{{Stream: queue, Expected: expect(qv), Events: []domain.Envelope{p.event("queue.admitted")}},
					{Stream: exec, Expected: eventstore.NoStream, Events: []domain.Envelope{p.event("execution.requested")}}},
				{{Stream: queue, Expected: expect(qv + 1), Events: []domain.Envelope{p.event("queue.granted")}},
					{Stream: exec, Expected: eventstore.Exact(0), Events: []domain.Envelope{p.event("execution.scheduling")}}},
				{{Stream: queue, Expected: expect(qv + 2)},
					{Stream: exec, Expected: eventstore.Exact(1), Events: []domain.Envelope{p.event("execution.scheduled")}}},
				{{Stream: exec, Expected: eventstore.Exact(2), Events: []domain.Envelope{p.event("execution.running")}}},
				{{Stream: exec, Expected: eventstore.Exact(3), Events: []domain.Envelope{p.event("execution.completed")}},
					{Stream: queue, Expected: expect(qv + 2), Events: []domain.Envelope{p.event("queue.released")}}},
			}
			for _, step := range steps {
				if err := p.do(step...); err != nil {
					return err
				}
				k++
			}
			qv += 3 // admitted, granted, released
		}
	}
	return nil
}

func addCuts(c *diskfs.CutStats, o diskfs.CutStats) {
	c.PendingOps += o.PendingOps
	c.Torn += o.Torn
}
