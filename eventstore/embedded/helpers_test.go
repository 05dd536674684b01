package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/eventstore/storetest"
)

// openT opens a store and closes it when the test ends (Close is idempotent).
func openT(t testing.TB, dir string, opts Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() }) // tests that care check Close themselves
	return s
}

// crash stops s as a killed process would: no index written, preallocated
// zeros and all left as they are; what was written stays in the page cache,
// as it does when only the process dies.
func crash(s *Store) {
	s.closeOnce.Do(func() {
		close(s.closing)
		s.stop()
		close(s.ckptStop)
		<-s.ckptDone
		_ = s.f.Close()
		_ = unlockDir(s.lock)
		s.closeErr = eventstore.ErrClosed
	})
}

// waitFor is the deadline of every wait in these tests: a hang is a bug in
// the store or in the test, and it must fail, saying what the test saw.
const waitFor = 30 * time.Second

// recvT receives from ch, or fails after waitFor with what and, if saw is
// not nil, what it says the test saw.
func recvT[T any](t testing.TB, ch <-chan T, what string, saw func() string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitFor):
		t.Fatalf("%s: nothing after %v%s", what, waitFor, sawText(saw))
		panic("unreachable")
	}
}

// waitT waits for wg, or fails after waitFor as recvT does.
func waitT(t testing.TB, wg *sync.WaitGroup, what string, saw func() string) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(waitFor):
		t.Fatalf("%s: still running after %v%s", what, waitFor, sawText(saw))
	}
}

// recvDone waits for done to be closed, as recvT does.
func recvDone(t testing.TB, done <-chan struct{}, what string) {
	t.Helper()
	recvT(t, done, what, nil)
}

func sawText(saw func() string) string {
	if saw == nil {
		return ""
	}
	return "; saw " + saw()
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustAppend(t testing.TB, s eventstore.Store, stream string, expected eventstore.ExpectedVersion, evs ...domain.Envelope) eventstore.AppendResult {
	t.Helper()
	res, err := s.Append(ctxT(t), stream, expected, evs...)
	if err != nil {
		t.Fatalf("Append(%q, %s, %d events): %v", stream, expected, len(evs), err)
	}
	return res
}

func mustMulti(t testing.TB, s eventstore.Store, appends ...eventstore.StreamAppend) eventstore.AppendResult {
	t.Helper()
	res, err := s.AppendMulti(ctxT(t), appends...)
	if err != nil {
		t.Fatalf("AppendMulti: %v", err)
	}
	return res
}

func readAllT(t testing.TB, s eventstore.Store) []domain.Envelope {
	t.Helper()
	var out []domain.Envelope
	for {
		page, err := s.ReadAll(ctxT(t), uint64(len(out)), 777)
		if err != nil {
			t.Fatalf("ReadAll(%d): %v", len(out), err)
		}
		out = append(out, page...)
		if len(page) < 777 {
			return out
		}
	}
}

func ev(typ string, i int) domain.Envelope {
	return storetest.NewEvent(typ, map[string]int{"i": i})
}

// richEvent fills every field a writer can fill, differently for each i.
func richEvent(i int) domain.Envelope {
	e := storetest.NewEvent(fmt.Sprintf("test.rich%d", i%3), map[string]any{"i": i, "pad": string(bytes.Repeat([]byte{'p'}, i%50))})
	e.SchemaVersion = i%4 - 1
	e.Owner = []domain.Owner{domain.OwnerAPI, domain.OwnerExecutor, domain.OwnerWorker}[i%3]
	if i%2 == 0 {
		e.CorrelationID = fmt.Sprintf("corr-%d", i)
		e.CausationID = fmt.Sprintf("cause-%d", i)
	}
	if i%5 == 0 {
		e.Writer = "worker-7"
		e.Metadata = json.RawMessage(`{"trace":"t"}`)
	}
	if i%7 == 0 {
		e.Metadata = json.RawMessage{}
	}
	return e
}

// writeMixed appends n rich events in single, multi-event and multi-stream
// appends, one after another, and returns them as read back.
func writeMixed(t testing.TB, s *Store, n int) []domain.Envelope {
	t.Helper()
	streams := []string{"execution-1", "queue-demo.sleep", "worker-w1", "execution-2"}
	for i := 0; i < n; {
		switch k := i % 4; {
		case k == 3 && i+3 <= n:
			mustMulti(t, s,
				eventstore.StreamAppend{Stream: streams[(i+1)%4], Expected: eventstore.Any, Events: []domain.Envelope{richEvent(i), richEvent(i + 1)}},
				eventstore.StreamAppend{Stream: streams[(i+2)%4], Expected: eventstore.Any, Events: []domain.Envelope{richEvent(i + 2)}},
			)
			i += 3
		case k == 1 && i+2 <= n:
			mustAppend(t, s, streams[i%4], eventstore.Any, richEvent(i), richEvent(i+1))
			i += 2
		default:
			mustAppend(t, s, streams[i%4], eventstore.Any, richEvent(i))
			i++
		}
	}
	got := readAllT(t, s)
	if len(got) != n {
		t.Fatalf("wrote %d events, read back %d", n, len(got))
	}
	return got
}

// requireEvents fails unless got equals want exactly, every field.
func requireEvents(t testing.TB, what string, want, got []domain.Envelope) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d events, want %d", what, len(got), len(want))
	}
	for i := range want {
		if !reflect.DeepEqual(want[i], got[i]) {
			t.Fatalf("%s: event %d:\n got %+v\nwant %+v", what, i, got[i], want[i])
		}
	}
}

// copyDir copies the regular files of src into a new temporary directory.
func copyDir(t testing.TB, src string, skip ...string) string {
	t.Helper()
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
next:
	for _, e := range entries {
		for _, s := range skip {
			if e.Name() == s {
				continue next
			}
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// dirState is the names and contents of a directory's files.
func dirState(t testing.TB, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[e.Name()] = string(b)
	}
	return m
}

// logRecorder is a slog handler that keeps the messages, for tests that
// check what recovery reported.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logRecorder) WithGroup(string) slog.Handler      { return l }

func (l *logRecorder) messages() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// sealNow seals every committed event of s and waits until the committer
// has installed the seal.
func sealNow(t testing.TB, s *Store) {
	t.Helper()
	if err := s.sealBackground(); err != nil {
		t.Fatalf("seal: %v", err)
	}
}

// sealedEvents is how many events the installed sealed part holds.
func (s *Store) sealedEvents() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.base
}

// recordOffsets returns the file offset of every committed record of s,
// sealed or hot, and the end of the last.
func recordOffsets(t testing.TB, s *Store) []int64 {
	t.Helper()
	v := s.view()
	out := make([]int64, v.head+1)
	if v.base > 0 {
		if err := v.sl.offsets(0, out[:v.base+1], make([]byte, 8*(v.base+1))); err != nil {
			t.Fatal(err)
		}
	}
	for p := v.base; p < v.head; p++ {
		out[p], _ = v.hotSpan(p)
	}
	out[v.head] = v.end
	return out
}

// requireStream checks that ReadStream of name gives exactly written's
// events of that stream, in order.
func requireStream(t testing.TB, s eventstore.Store, what, name string, written []domain.Envelope) {
	t.Helper()
	got, err := s.ReadStream(ctxT(t), name, 0, len(written)+1)
	if err != nil {
		t.Fatalf("%s: ReadStream %s: %v", what, name, err)
	}
	var want []domain.Envelope
	for _, e := range written {
		if e.Stream == name {
			want = append(want, e)
		}
	}
	requireEvents(t, what+": ReadStream "+name, want, got)
}
