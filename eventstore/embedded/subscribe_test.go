package embedded

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// sub runs a subscription in the background and records what it gets.
type sub struct {
	from   uint64
	filter eventstore.Filter
	want   int // stop after this many events

	mu      sync.Mutex
	got     []domain.Envelope
	batches int
	bad     error
	done    chan struct{}
	err     error
	cancel  context.CancelFunc
}

func startSub(s *Store, from uint64, filter eventstore.Filter, want int) *sub {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	k := &sub{from: from, filter: filter, want: want, done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(k.done)
		k.err = s.Subscribe(ctx, from, filter, func(batch []domain.Envelope) error {
			k.mu.Lock()
			defer k.mu.Unlock()
			if len(batch) == 0 {
				k.bad = errors.New("empty batch")
			}
			k.batches++
			k.got = append(k.got, batch...)
			if len(k.got) >= k.want {
				cancel()
			}
			return nil
		})
	}()
	return k
}

func (k *sub) count() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.got)
}

// check waits for the subscription to end and compares what it got with the
// log: exactly the events at or after from that pass the filter, in order.
// all is the whole log, written: a subscription that wants no events (it
// started at the head after the last write) has nothing to wait for, so
// check ends it.
func (k *sub) check(t *testing.T, name string, all []domain.Envelope) {
	t.Helper()
	if k.want <= 0 {
		k.cancel()
	}
	select {
	case <-k.done:
	case <-time.After(waitFor):
		k.cancel()
		recvDone(t, k.done, name+": Subscribe after its context ended")
		t.Fatalf("%s: got %d of %d events in %v", name, k.count(), k.want, waitFor)
	}
	if !errors.Is(k.err, context.Canceled) {
		t.Fatalf("%s: Subscribe returned %v after cancel, want context.Canceled", name, k.err)
	}
	if k.bad != nil {
		t.Fatalf("%s: %v", name, k.bad)
	}
	var want []domain.Envelope
	for i := range all {
		if all[i].Position >= k.from && k.filter.Match(&all[i]) {
			want = append(want, all[i])
		}
	}
	if len(k.got) != len(want) {
		t.Fatalf("%s: got %d events, want %d", name, len(k.got), len(want))
	}
	for i := range want {
		if k.got[i].ID != want[i].ID || k.got[i].Position != want[i].Position {
			t.Fatalf("%s: event %d is %s at %d, want %s at %d", name, i, k.got[i].ID, k.got[i].Position, want[i].ID, want[i].Position)
		}
	}
}

// TestSubscribeWhileWriting: subscriptions started before, during and after
// 16 concurrent writers, from the start, the middle and the future, with and
// without a filter, each get exactly their events in order: the catch-up and
// the live part meet with no gap and no duplicate. With fast syncs the
// writers may all be done before a "during" subscription starts (it then
// starts at the head and owes nothing): the test holds whatever the timing.
func TestSubscribeWhileWriting(t *testing.T) {
	t.Parallel()
	for _, noSync := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoSync=%v", noSync), func(t *testing.T) {
			t.Parallel()
			subscribeWhileWriting(t, Options{NoSync: noSync})
		})
	}
}

func subscribeWhileWriting(t *testing.T, opts Options) {
	s := openT(t, t.TempDir(), opts)
	const writers, appends = 16, 40 // each append holds 1 or 2 events
	total := 0
	for range writers {
		for i := range appends {
			total += 1 + i%2
		}
	}
	mustAppend(t, s, "execution-pre", eventstore.NoStream, ev("test.pre", 0))
	total++
	onlyWorker3 := eventstore.Filter{StreamPrefixes: []string{"worker-3"}}
	oneType := eventstore.Filter{Types: []string{"test.w1"}}
	countMatch := func(f eventstore.Filter) int {
		n := 0
		if f.Match(&domain.Envelope{Stream: "execution-pre", Type: "test.pre"}) {
			n++
		}
		for w := range writers {
			for i := range appends {
				e := domain.Envelope{Stream: fmt.Sprintf("worker-%d", w), Type: fmt.Sprintf("test.w%d", i%2)}
				if f.Match(&e) {
					n += 1 + i%2
				}
			}
		}
		return n
	}
	subs := map[string]*sub{
		"before/from 0":         startSub(s, 0, eventstore.Filter{}, total),
		"before/from the start": startSub(s, 1, eventstore.Filter{}, total-1),
		"before/future":         startSub(s, 100, eventstore.Filter{}, total-100),
		"before/prefix":         startSub(s, 0, onlyWorker3, countMatch(onlyWorker3)),
	}
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range appends {
				evs := []domain.Envelope{ev(fmt.Sprintf("test.w%d", i%2), i)}
				if i%2 == 1 {
					evs = append(evs, ev("test.w1", i))
				}
				if _, err := s.Append(ctxT(t), fmt.Sprintf("worker-%d", w), eventstore.Any, evs...); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	// Start more while the writers run, from wherever the log is.
	for i := range 6 {
		time.Sleep(time.Duration(i) * time.Millisecond)
		h, _ := s.Head(ctxT(t))
		subs[fmt.Sprintf("during %d/from head %d", i, h)] = startSub(s, h, eventstore.Filter{}, total-int(h))
		subs[fmt.Sprintf("during %d/from %d", i, h/2)] = startSub(s, h/2, eventstore.Filter{}, total-int(h/2))
	}
	subs["during/type"] = startSub(s, 0, oneType, countMatch(oneType))
	waitT(t, &wg, "writers", func() string { h, _ := s.Head(ctxT(t)); return fmt.Sprintf("head %d of %d events", h, total) })
	subs["after/from 0"] = startSub(s, 0, eventstore.Filter{}, total)
	all := readAllT(t, s)
	if len(all) != total {
		t.Fatalf("log holds %d events, want %d", len(all), total)
	}
	for name, k := range subs {
		k.check(t, name, all)
	}
	if k := subs["after/from 0"]; k.batches > total/100 {
		t.Fatalf("catch-up of %d events took %d handler calls: not batched", total, k.batches)
	}
}

// TestSubscribeSlowHandler: a subscriber stuck in its handler holds up
// nobody; when it resumes it gets everything in order.
func TestSubscribeSlowHandler(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	mustAppend(t, s, "execution-0", eventstore.NoStream, ev("test.first", 0))
	release := make(chan struct{})
	entered := make(chan struct{})
	var once sync.Once
	const more = 3000
	k := &sub{want: more + 1, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel
	go func() {
		defer close(k.done)
		k.err = s.Subscribe(ctx, 0, eventstore.Filter{}, func(batch []domain.Envelope) error {
			once.Do(func() {
				close(entered)
				<-release
			})
			k.mu.Lock()
			defer k.mu.Unlock()
			k.got = append(k.got, batch...)
			if len(k.got) >= k.want {
				cancel()
			}
			return nil
		})
	}()
	recvDone(t, entered, "the slow handler's first call")
	done := make(chan error, 1)
	go func() {
		for i := 0; i < more; i += 10 {
			evs := make([]domain.Envelope, 10)
			for j := range evs {
				evs[j] = ev("test.more", i+j)
			}
			if _, err := s.Append(context.Background(), fmt.Sprintf("execution-%d", i%7), eventstore.Any, evs...); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		close(release)
		t.Fatal("appends did not finish while a subscriber was stuck in its handler")
	}
	close(release)
	k.check(t, "slow subscriber", readAllT(t, s))
}

func TestSubscribeEnds(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	mustAppend(t, s, "execution-e", eventstore.NoStream, ev("test.e", 0), ev("test.e", 1))
	nop := func([]domain.Envelope) error { return nil }

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if err := s.Subscribe(ctx, 0, eventstore.Filter{}, nop); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Subscribe until its deadline = %v, want DeadlineExceeded", err)
	}
	cancelled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if err := s.Subscribe(cancelled, 0, eventstore.Filter{}, nop); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe with a cancelled context = %v, want Canceled", err)
	}
	stop := errors.New("handler had enough")
	calls := 0
	err := s.Subscribe(ctxT(t), 0, eventstore.Filter{}, func([]domain.Envelope) error { calls++; return stop })
	if !errors.Is(err, stop) || err.Error() != stop.Error() || calls != 1 {
		t.Fatalf("Subscribe with a failing handler = %v after %d calls, want the handler's error after 1", err, calls)
	}
	// A filter that matches nothing stored waits for a live event.
	got := make(chan []domain.Envelope, 1)
	ctx3, cancel3 := context.WithCancel(ctxT(t))
	defer cancel3()
	errc := make(chan error, 1)
	go func() {
		errc <- s.Subscribe(ctx3, 0, eventstore.Filter{Types: []string{"test.later"}}, func(b []domain.Envelope) error {
			got <- b
			cancel3()
			return nil
		})
	}()
	time.Sleep(10 * time.Millisecond)
	mustAppend(t, s, "queue-q", eventstore.Any, ev("test.noise", 0), ev("test.later", 1))
	b := recvT(t, got, "a filtered live delivery", nil)
	if len(b) != 1 || b[0].Type != "test.later" || b[0].Position != 3 {
		t.Fatalf("filtered live delivery = %+v", b)
	}
	if err := recvT(t, errc, "Subscribe after its handler cancelled it", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe = %v", err)
	}
	// Close ends an idle subscription with ErrClosed.
	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = s.Close()
	}()
	if err := s.Subscribe(ctxT(t), 10, eventstore.Filter{}, nop); !errors.Is(err, eventstore.ErrClosed) {
		t.Fatalf("Subscribe across Close = %v, want ErrClosed", err)
	}
	if err := s.Subscribe(ctxT(t), 0, eventstore.Filter{}, nop); !errors.Is(err, eventstore.ErrClosed) || !strings.Contains(err.Error(), "closed") {
		t.Fatalf("Subscribe after Close = %v, want ErrClosed", err)
	}
}

// TestSubscribeFromMemory: a subscription that keeps up takes new events
// from the store's memory; they are exactly what reading the log file gives
// (every field, nil and empty payloads apart), in order, with filters too.
func TestSubscribeFromMemory(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	const n = 400
	total := n + 2
	all := startSub(s, 0, eventstore.Filter{}, total)
	some := startSub(s, 1, eventstore.Filter{Types: []string{"test.rich1"}, StreamPrefixes: []string{"execution-"}}, 1<<30)
	writeMixed(t, s, n)
	noData, emptyData := ev("test.nil", 1), ev("test.empty", 2)
	noData.Data, emptyData.Data = nil, json.RawMessage{}
	mustAppend(t, s, "execution-3", eventstore.Any, noData, emptyData)
	log := readAllT(t, s)
	if len(log) != total {
		t.Fatalf("log holds %d events, want %d", len(log), total)
	}
	all.check(t, "all", log)
	if !reflect.DeepEqual(all.got, log) {
		for i := range log {
			if !reflect.DeepEqual(all.got[i], log[i]) {
				t.Fatalf("event %d from the subscription:\n%#v\nfrom the log file:\n%#v", i, all.got[i], log[i])
			}
		}
	}
	time.Sleep(50 * time.Millisecond) // let the filtered one deliver everything
	some.cancel()
	recvDone(t, some.done, "the filtered subscription after cancel")
	var want []domain.Envelope
	for i := range log {
		if log[i].Position >= 1 && some.filter.Match(&log[i]) {
			want = append(want, log[i])
		}
	}
	if len(want) == 0 || !reflect.DeepEqual(some.got, want) {
		t.Fatalf("filtered subscription got %d events, want %d equal to the log's", len(some.got), len(want))
	}
	s.mu.RLock()
	used := s.tail != nil && s.tailFrom == 0
	s.mu.RUnlock()
	if !used {
		t.Fatal("the store kept no committed events in memory")
	}
}

// TestSubscribeFallsBehindMemory: a subscription held up while more events
// commit than the store keeps in memory goes on from the log file, with no
// gap, and back to memory once it has caught up.
func TestSubscribeFallsBehindMemory(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	mustAppend(t, s, "execution-0", eventstore.NoStream, ev("test.first", 0))
	release := make(chan struct{})
	var got []domain.Envelope
	const bulk = (tailSize/1000 + 3) * 1000
	total := 1 + bulk + 10
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		done <- s.Subscribe(ctx, 0, eventstore.Filter{}, func(b []domain.Envelope) error {
			if len(got) == 0 {
				<-release // held up in its first batch
			}
			got = append(got, b...)
			if len(got) >= total {
				cancel()
			}
			return nil
		})
	}()
	for i := 0; i < bulk; i += 1000 {
		evs := make([]domain.Envelope, 1000)
		for j := range evs {
			evs[j] = richEvent(i + j)
		}
		mustAppend(t, s, fmt.Sprintf("execution-bulk-%d", i), eventstore.NoStream, evs...)
	}
	s.mu.RLock()
	behind := s.tailFrom > 1
	s.mu.RUnlock()
	if !behind {
		t.Fatal("the store still keeps the held-up subscription's next event in memory: the test proves nothing")
	}
	close(release)
	for i := 0; i < 10; i++ { // live again, from memory
		mustAppend(t, s, "execution-live", eventstore.Any, richEvent(i))
	}
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Subscribe: %v", err)
		}
	case <-time.After(time.Minute):
		cancel()
		recvT(t, done, "the held-up subscription after cancel", nil)
		t.Fatalf("the subscription did not catch up in a minute: %d of %d events", len(got), total)
	}
	log := readAllT(t, s)
	if len(log) != total || !reflect.DeepEqual(got, log) {
		t.Fatalf("subscription got %d events, the log holds %d; equal: %v", len(got), len(log), reflect.DeepEqual(got, log))
	}
}

// TestTailIsBoundedInBytes: the committed events the store keeps in memory
// for subscriptions hold at most tailMaxBytes of data, however large the
// events; a subscription from before them reads the rest from the file,
// with no gap.
func TestTailIsBoundedInBytes(t *testing.T) {
	t.Parallel()
	s := openT(t, t.TempDir(), Options{})
	const n, size = 48, 900 << 10 // 42 MiB of data
	for i := range n {
		e := storetest.NewEvent("test.big", map[string]string{"s": strings.Repeat("x", size)})
		mustAppend(t, s, fmt.Sprintf("execution-big-%d", i), eventstore.NoStream, e)
	}
	s.mu.RLock()
	held, from := s.tailBytes, s.tailFrom
	s.mu.RUnlock()
	if held > tailMaxBytes || from == 0 {
		t.Fatalf("the tail holds %d bytes from position %d; at most %d, so not from 0", held, from, tailMaxBytes)
	}
	all := startSub(s, 0, eventstore.Filter{}, n)
	all.check(t, "all", readAllT(t, s))
}
