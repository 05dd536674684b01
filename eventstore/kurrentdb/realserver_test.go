package kurrentdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/EventStore/EventStore-Client-Go/v4/esdb"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// The real-server plan: what the fake cannot prove. Every test here skips
// unless TURNSTILE_KURRENTDB_URL names a server; those that act on the
// server (restart it, stop it, kill a cluster's leader, scavenge) also need
// the shell command that does it, which realserver.sh sets:
//
//	TURNSTILE_KURRENTDB_RESTART      restart the node (docker restart …)
//	TURNSTILE_KURRENTDB_STOP         stop it (docker stop …)
//	TURNSTILE_KURRENTDB_START        start it again (docker start …)
//	TURNSTILE_KURRENTDB_KILL_LEADER  kill a three-node cluster's leader and
//	                                 start it again after a while
//	TURNSTILE_KURRENTDB_SCAVENGE     run a scavenge and wait for it to end
//
// Each test logs what it saw (codes, retries, delays) so a run is a report.
//
// TURNSTILE_KURRENTDB_URL=fake runs the plan against the in-process fake
// (restart, stop and start act on it), a dry run of the tests themselves.

// realFake is the fake of a dry run, by test.
var realFake sync.Map // *testing.T -> *fakeServer

// realStore returns a store in a fresh namespace on the server
// TURNSTILE_KURRENTDB_URL names, with its own client (OpenURL), or skips.
func realStore(t *testing.T, logger *slog.Logger) *Store {
	t.Helper()
	raw := os.Getenv(urlVar)
	if raw == "" {
		t.Skip(noServer)
	}
	if raw == "fake" {
		f, _ := newFakeServer(t)
		realFake.Store(t, f)
		t.Cleanup(func() { realFake.Delete(t) })
		raw = "kurrentdb://" + f.addr + "?tls=false&maxDiscoverAttempts=3&discoveryInterval=100"
	}
	ctx := t.Context()
	s, err := OpenURL(ctx, raw)
	if err != nil {
		t.Fatalf("%s: %v", urlVar, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	origin, err := LogEnd(ctx, s.conn().Client)
	if err != nil {
		t.Fatal(err)
	}
	s.ns = fmt.Sprintf("real%d-", time.Now().UnixNano())
	s.origin = origin
	if logger != nil {
		s.log = logger
	}
	return s
}

// serverCommand runs the shell command the environment variable name holds,
// or skips the test if it is not set.
func serverCommand(t *testing.T, name string) {
	t.Helper()
	if f, ok := realFake.Load(t); ok {
		f := f.(*fakeServer)
		switch name {
		case "TURNSTILE_KURRENTDB_RESTART":
			f.shutdown()
			f.start(t)
			return
		case "TURNSTILE_KURRENTDB_STOP":
			f.shutdown()
			return
		case "TURNSTILE_KURRENTDB_START":
			f.start(t)
			return
		case "TURNSTILE_KURRENTDB_SCAVENGE":
			return // nothing to remove: the test's logic runs all the same
		}
		t.Skipf("%s: the fake cannot do that", name)
	}
	cmd := os.Getenv(name)
	if cmd == "" {
		t.Skipf("%s is not set: realserver.sh sets it when it runs the server itself", name)
	}
	t.Logf("running %s: %s", name, cmd)
	out, err := exec.CommandContext(t.Context(), "sh", "-c", cmd).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
}

// untilUp retries f (with the same arguments, so the same event ids) until it
// succeeds or a minute has passed, logging each error.
func untilUp(t *testing.T, what string, f func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		err := f(ctx)
		cancel()
		if err == nil {
			return
		}
		t.Logf("%s: %v", what, err)
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after a minute", what)
		}
		time.Sleep(time.Second)
	}
}

// recorder is a slog handler that keeps the store's warnings (the
// subscription's resubscribes and the errors that caused them).
type recorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, b.String())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

func (r *recorder) report(t *testing.T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.msgs {
		t.Logf("store log: %s", m)
	}
}

// TestRealPositionsAcrossBatchAndRetry: positions within a batch are strictly
// increasing, the result names the last event, and every kind of retry
// returns that result and writes nothing.
func TestRealPositionsAcrossBatchAndRetry(t *testing.T) {
	s := realStore(t, nil)
	ctx := t.Context()
	batch := storetest.NewEvents("test.p", 5)
	first := mustAppend(t, s, "execution-p", eventstore.NoStream, batch...)
	evs := mustReadAll(t, s)
	if len(evs) != 5 || evs[4].Position != first.Position || first.Version != 4 {
		t.Fatalf("after one batch: %d events, result %+v", len(evs), first)
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Position <= evs[i-1].Position || evs[i].Position%2 != 0 {
			t.Fatalf("positions %d then %d", evs[i-1].Position, evs[i].Position)
		}
	}
	t.Logf("positions of a batch of 5: %v", []uint64{evs[0].Position, evs[1].Position, evs[2].Position, evs[3].Position, evs[4].Position})
	mustAppend(t, s, "execution-p", eventstore.Exact(4), storetest.NewEvents("test.later", 6)...)
	// Not Exact(10), the current version: with the batch out of the tail,
	// that writes it again (the gap the README names).
	for _, expected := range []eventstore.ExpectedVersion{eventstore.NoStream, eventstore.Any, eventstore.StreamExists, eventstore.Exact(2), eventstore.Exact(7)} {
		res, err := s.Append(ctx, "execution-p", expected, batch...)
		if err != nil || res != first {
			t.Errorf("retry with %s after later appends: %+v, %v; want %+v", expected, res, err, first)
		}
	}
	if n := len(mustReadAll(t, s)); n != 11 {
		t.Fatalf("the retries wrote %d events", n-11)
	}
	if h, err := s.Head(ctx); err != nil || h != after(mustReadAll(t, s)[10].Position) {
		t.Fatalf("Head = %d, %v", h, err)
	}
}

// TestRealSameIDsOtherContent: the server compares ids only; the store must
// refuse the same ids with other content, wherever the batch is.
func TestRealSameIDsOtherContent(t *testing.T) {
	s := realStore(t, nil)
	for _, expected := range []eventstore.ExpectedVersion{eventstore.NoStream, eventstore.Any, eventstore.StreamExists, eventstore.Exact(0)} {
		for changed := range 3 {
			stream := fmt.Sprintf("execution-c%s%d", strings.ReplaceAll(expected.String(), " ", ""), changed)
			batch := storetest.NewEvents("test.c", 3)
			mustAppend(t, s, stream, eventstore.NoStream, batch...)
			mustAppend(t, s, stream, eventstore.Exact(2), storetest.NewEvents("test.later", 4)...)
			other := append([]domain.Envelope(nil), batch...)
			other[changed].Data = json.RawMessage(`{"other":true}`)
			if _, err := s.Append(t.Context(), stream, expected, other...); !errors.Is(err, eventstore.ErrIdempotencyConflict) {
				t.Errorf("%s, event %d changed: %v; want ErrIdempotencyConflict", expected, changed, err)
			}
			if evs, _ := s.ReadStream(t.Context(), stream, 0, 100); len(evs) != 7 {
				t.Errorf("%s, event %d changed: the stream holds %d events, want 7", expected, changed, len(evs))
			}
		}
	}
}

// TestRealWrongVersionUnderContention: writers racing on one stream with
// Exact: one wins each version, the others get a WrongVersionError naming
// the real version, and the stream ends with every winner once, in order.
func TestRealWrongVersionUnderContention(t *testing.T) {
	s := realStore(t, nil)
	const writers, rounds = 8, 25
	mustAppend(t, s, "queue-race", eventstore.NoStream, storetest.NewEvent("test.init", nil))
	var mu sync.Mutex
	won, lost := 0, 0
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() {
			for range rounds {
				ctx := t.Context()
				evs, err := s.ReadStream(ctx, "queue-race", 0, 100_000)
				if err != nil {
					t.Error(err)
					return
				}
				v := evs[len(evs)-1].Version
				_, err = s.Append(ctx, "queue-race", eventstore.Exact(v), storetest.NewEvent("test.race", nil))
				var wv *eventstore.WrongVersionError
				mu.Lock()
				switch {
				case err == nil:
					won++
				case errors.As(err, &wv) && wv.Exists && wv.Actual > v:
					lost++
				default:
					t.Errorf("append at %d: %v", v, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	evs, err := s.ReadStream(t.Context(), "queue-race", 0, 100_000)
	if err != nil || len(evs) != won+1 {
		t.Fatalf("the stream holds %d events, %v; %d appends won", len(evs), err, won)
	}
	t.Logf("%d appends won, %d lost", won, lost)
}

// TestRealAnyRetryAcrossRestart: the server's cache of recent ids is lost
// at a restart. The store still recognises a retry at the stream's tail;
// deeper, the server writes the batch again (the gap the README names): the
// test reports which.
func TestRealAnyRetryAcrossRestart(t *testing.T) {
	s := realStore(t, nil)
	batch := storetest.NewEvents("test.r", 2)
	first := mustAppend(t, s, "queue-r", eventstore.Any, batch...)
	serverCommand(t, "TURNSTILE_KURRENTDB_RESTART")
	var res eventstore.AppendResult
	untilUp(t, "Any retry at the tail after a restart", func(ctx context.Context) error {
		var err error
		res, err = s.Append(ctx, "queue-r", eventstore.Any, batch...)
		return err
	})
	if res != first {
		t.Fatalf("Any retry at the tail after a restart: %+v, want %+v", res, first)
	}
	mustAppend(t, s, "queue-r", eventstore.Any, storetest.NewEvents("test.later", 2)...)
	serverCommand(t, "TURNSTILE_KURRENTDB_RESTART")
	untilUp(t, "Any retry deep in the stream after a restart", func(ctx context.Context) error {
		var err error
		res, err = s.Append(ctx, "queue-r", eventstore.Any, batch...)
		return err
	})
	if res == first {
		t.Logf("Any retry deep in the stream after a restart: recognised (%+v)", res)
	} else {
		t.Logf("Any retry deep in the stream after a restart: written again at version %d (the documented gap)", res.Version)
	}
}

// TestRealSubscriptionAcrossRestartAndStop: a subscription lives through a
// restart and a stop of the server, with no gap and no duplicate; the
// codes it saw are logged.
func TestRealSubscriptionAcrossRestartAndStop(t *testing.T) {
	rec := &recorder{}
	s := realStore(t, slog.New(rec))
	defer rec.report(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sub := collect(ctx, s)
	appendOne := func(i int) {
		e := storetest.NewEvent("test.s", map[string]int{"i": i})
		untilUp(t, fmt.Sprintf("append %d", i), func(ctx context.Context) error {
			_, err := s.Append(ctx, "execution-s", eventstore.Any, e)
			return err
		})
	}
	n := 0
	for range 10 {
		appendOne(n)
		n++
	}
	serverCommand(t, "TURNSTILE_KURRENTDB_RESTART")
	for range 10 {
		appendOne(n)
		n++
	}
	serverCommand(t, "TURNSTILE_KURRENTDB_STOP")
	time.Sleep(10 * time.Second)
	serverCommand(t, "TURNSTILE_KURRENTDB_START")
	for range 10 {
		appendOne(n)
		n++
	}
	deadline := time.Now().Add(time.Minute)
	for sub.count() < n && !time.Now().After(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	cancel()
	if err := <-sub.done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe ended with %v", err)
	}
	sub.isLog(t, s)
}

// TestRealLeaderKilled: on a three-node cluster whose leader is killed,
// appends retried with the same ids land exactly once, and a subscription
// delivers the log without gap or duplicate.
func TestRealLeaderKilled(t *testing.T) {
	rec := &recorder{}
	s := realStore(t, slog.New(rec))
	defer rec.report(t)
	if _, fake := realFake.Load(t); fake || os.Getenv("TURNSTILE_KURRENTDB_KILL_LEADER") == "" {
		t.Skip("TURNSTILE_KURRENTDB_KILL_LEADER is not set: needs a three-node cluster (realserver.sh cluster)")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sub := collect(ctx, s)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		v := eventstore.NoStream
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			e := storetest.NewEvent("test.k", map[string]int{"i": i})
			var res eventstore.AppendResult
			untilUp(t, fmt.Sprintf("append %d", i), func(ctx context.Context) error {
				var err error
				res, err = s.Append(ctx, "queue-k", v, e)
				return err
			})
			v = eventstore.Exact(res.Version)
		}
	})
	time.Sleep(3 * time.Second)
	serverCommand(t, "TURNSTILE_KURRENTDB_KILL_LEADER")
	time.Sleep(10 * time.Second)
	close(stop)
	wg.Wait()
	evs, err := s.ReadStream(t.Context(), "queue-k", 0, 1_000_000)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.ID.String()] {
			t.Fatalf("event %s stored twice", e.ID)
		}
		seen[e.ID.String()] = true
	}
	time.Sleep(5 * time.Second)
	cancel()
	<-sub.done
	sub.isLog(t, s)
	t.Logf("%d appends across the leader's death", len(evs))
}

// TestRealReadsAfterScavenge: after a scavenge has removed other streams'
// events, reads and subscriptions from the start, and from positions the
// store handed out, still work.
func TestRealReadsAfterScavenge(t *testing.T) {
	s := realStore(t, nil)
	if _, fake := realFake.Load(t); !fake && os.Getenv("TURNSTILE_KURRENTDB_SCAVENGE") == "" {
		t.Skip("TURNSTILE_KURRENTDB_SCAVENGE is not set")
	}
	ctx := t.Context()
	c := s.conn().Client
	// A foreign stream, outside the store's namespace, that keeps one event:
	// a scavenge removes the others.
	junk := "x-junk-" + s.ns
	var md esdb.StreamMetadata
	md.SetMaxCount(1)
	if _, err := c.SetStreamMetadata(ctx, junk, esdb.AppendToStreamOptions{}, md); err != nil {
		t.Fatal(err)
	}
	var ours []eventstore.AppendResult
	for i := range 20 {
		for range 50 {
			if _, err := c.AppendToStream(ctx, junk, esdb.AppendToStreamOptions{}, esdb.EventData{EventType: "junk", ContentType: esdb.ContentTypeJson, Data: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		ours = append(ours, mustAppend(t, s, "execution-v", eventstore.Any, storetest.NewEvent("test.v", map[string]int{"i": i})))
	}
	serverCommand(t, "TURNSTILE_KURRENTDB_SCAVENGE")
	evs, err := s.ReadAll(ctx, 0, 1000)
	var mine []domain.Envelope
	for _, e := range evs {
		if e.Stream == "execution-v" {
			mine = append(mine, e)
		}
	}
	if err != nil || len(mine) != 20 {
		t.Fatalf("ReadAll from 0 after a scavenge: %d of our events, %v", len(mine), err)
	}
	for i, r := range ours[:len(ours)-1] {
		evs, err := s.ReadAll(ctx, after(r.Position), 1)
		if err != nil || len(evs) != 1 || evs[0].Position != ours[i+1].Position {
			t.Fatalf("ReadAll after our event %d after a scavenge: %+v, %v; want our next event", i, evs, err)
		}
	}
	got := subscribeN(t, s, 0, eventstore.Filter{StreamPrefixes: []string{"execution-v"}}, 20)
	if len(got) != 20 {
		t.Fatalf("Subscribe from 0 after a scavenge delivered %d events", len(got))
	}
}
