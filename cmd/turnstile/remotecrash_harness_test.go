package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore/codec"
	"github.com/turnstile/turnstile/eventstore/embedded"
	"github.com/turnstile/turnstile/projections"
)

// The harness of the remote workers' "nothing lost" tests
// (remotecrash_test.go): a `turnstile serve` on the embedded store with no
// in-process worker, `turnstile worker --server` processes reaching it
// through cutProxy (so the server may move to another port when it is
// restarted, and the network between them may be cut), a submitter that
// sends a crash run's requests with idempotency keys (resent when the server
// died), and the checks made after the last execution ended.

// rcAdmin is the admin's Authorization header.
var rcAdmin = map[string]string{"Authorization": "Bearer " + rwAdmin}

// cutProxy forwards TCP connections to a backend that may change; cut
// drops every connection and refuses new ones for a while.
type cutProxy struct {
	ln      net.Listener
	mu      sync.Mutex
	backend string // host:port
	cut     bool
	conns   map[net.Conn]struct{}
	cuts    atomic.Int64 // connections dropped or refused by cuts
}

func newCutProxy(t *testing.T, backend string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(func() { _ = ln.Close(); p.dropAll() })
	return p
}

func (p *cutProxy) url() string { return "http://" + p.ln.Addr().String() }

func (p *cutProxy) setBackend(url string) {
	p.mu.Lock()
	p.backend = strings.TrimPrefix(url, "http://")
	p.mu.Unlock()
}

func (p *cutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		cut, backend := p.cut, p.backend
		p.mu.Unlock()
		if cut {
			p.cuts.Add(1)
			_ = c.Close()
			continue
		}
		go p.forward(c, backend)
	}
}

func (p *cutProxy) forward(c net.Conn, backend string) {
	b, err := net.DialTimeout("tcp", backend, 2*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.cut {
		p.mu.Unlock()
		_ = c.Close()
		_ = b.Close()
		return
	}
	p.conns[c], p.conns[b] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var once sync.Once
	end := func() {
		once.Do(func() {
			_ = c.Close()
			_ = b.Close()
			p.mu.Lock()
			delete(p.conns, c)
			delete(p.conns, b)
			p.mu.Unlock()
		})
	}
	go func() { _, _ = io.Copy(b, c); end() }()
	_, _ = io.Copy(c, b)
	end()
}

func (p *cutProxy) dropAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
		p.cuts.Add(1)
	}
	clear(p.conns)
}

// cutFor drops every connection and refuses new ones for d.
func (p *cutProxy) cutFor(d time.Duration) {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.dropAll()
	time.Sleep(d)
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

// rcWorker is one `turnstile worker --server` process, restarted under the same name.
type rcWorker struct {
	name  string
	cmd   *exec.Cmd
	logs  *procLog
	done  chan error
	all   []*procLog // the logs of every process of this name
	kills int
}

// rcRun is one remote crash run.
type rcRun struct {
	t        *testing.T
	bin, dir string
	args     []string // serve's flags
	srv      atomic.Pointer[serveProc]
	proxy    *cutProxy
	workers  []*rcWorker
	rng      *rand.Rand
	actions  map[string]string // ref → runner
	nActions int
	extra    int // executions added to ids by the test itself

	mu      sync.Mutex
	ids     map[string]string // id → action
	allowed atomic.Int64
	sent    atomic.Int64
	final   atomic.Bool
	wg      sync.WaitGroup
}

// newRCRun starts serve (with the worker lease given), the proxy, the
// workers (slots each) and defines actions actions; it prints its seed.
func newRCRun(t *testing.T, lease string, workers, slots, actions int) *rcRun {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("TURNSTILE_REMOTE_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TURNSTILE_REMOTE_SEED=%q is not a seed", v)
		}
		seed = n
	}
	t.Logf("seed %d (TURNSTILE_REMOTE_SEED replays the same plan)", seed)
	r := &rcRun{t: t, bin: turnstileBinary(t), dir: t.TempDir(), rng: rand.New(rand.NewPCG(seed, 17)),
		actions: map[string]string{}, nActions: actions, ids: map[string]string{}}
	r.args = []string{"--data", r.dir, "--workers", "0", "--token", "admin:" + rwAdmin, "--token", "worker:" + rwWorker, "--worker-lease", lease}
	r.srv.Store(startServeWith(t, r.bin, serveOpts{args: r.args}))
	r.proxy = newCutProxy(t, strings.TrimPrefix(r.url(), "http://"))
	for i := range actions {
		ref, runner, limit := crashAction(i)
		r.actions[ref] = runner
		p := domain.Policy{Ref: ref, Runner: runner, MaxConcurrent: limit, MaxAttempts: 10}
		if _, err := call(t.Context(), "POST", r.url()+"/api/v1/actions", p, rcAdmin, nil); err != nil {
			t.Fatal(err)
		}
	}
	for i := range workers {
		w := &rcWorker{name: fmt.Sprintf("rw%d", i+1)}
		r.workers = append(r.workers, w)
		r.startWorker(w, slots)
	}
	return r
}

func (r *rcRun) url() string { return r.srv.Load().url }

func (r *rcRun) startWorker(w *rcWorker, slots int) {
	w.cmd, w.logs, w.done = startWorkerProc(r.t, r.bin,
		[]string{"worker", "--server", r.proxy.url(), "--id", w.name, "--slots", fmt.Sprint(slots), "--grace", "2s"},
		[]string{"TURNSTILE_TOKEN=" + rwWorker, "TURNSTILE_STORE="})
	w.all = append(w.all, w.logs)
}

// killWorker sends SIGKILL to w's process and waits for it to end.
func (r *rcWorker) kill() {
	_ = r.cmd.Process.Kill()
	err := <-r.done
	r.done <- err // for startWorkerProc's cleanup, which waits on it too
	r.kills++
}

// restartServer kills serve with SIGKILL, starts it again on the same data
// and points the proxy at it.
func (r *rcRun) restartServer() {
	r.srv.Load().kill()
	r.srv.Store(startServeWith(r.t, r.bin, serveOpts{args: r.args}))
	r.proxy.setBackend(r.url())
}

// submit starts 6 submitters that send request k (crashRequest) once
// allowed exceeds k, each with an idempotency key, resent until accepted.
func (r *rcRun) submit(ctx context.Context) {
	keys := make(chan int)
	for range 6 {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for k := range keys {
				ref, body := crashRequest(k, r.nActions)
				for {
					var acc struct{ ID string }
					h := map[string]string{"Authorization": rcAdmin["Authorization"], "Idempotency-Key": fmt.Sprintf("rc-%d", k)}
					if _, err := call(ctx, "POST", r.url()+"/api/v1/executions", body, h, &acc); err == nil {
						r.mu.Lock()
						r.ids[acc.ID] = ref
						r.mu.Unlock()
						r.sent.Add(1)
						break
					}
					if ctx.Err() != nil {
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		}()
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(keys)
		for k := 0; ; k++ {
			for int64(k) >= r.allowed.Load() {
				if r.final.Load() {
					return
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(5 * time.Millisecond):
				}
			}
			select {
			case keys <- k:
			case <-ctx.Done():
				return
			}
		}
	}()
}

// open lets the submitters send up to n requests in all and waits until
// most of them were accepted (at most 10 s).
func (r *rcRun) open(n int) {
	r.allowed.Store(max(r.allowed.Load(), int64(n)))
	for wait := time.Now().Add(10 * time.Second); r.sent.Load() < r.allowed.Load()-6 && time.Now().Before(wait); {
		time.Sleep(5 * time.Millisecond)
	}
}

// finish sends the last requests (n in all), waits for every execution to
// end, checks the live read model against a rebuild, stops the server and
// checks the log: the audit (CLI and in-process), one end per execution
// with the outcome its runner gives and no overlapping attempts
// (checkLifecycles), and no event written for an incarnation after it was
// declared lost, replaced or stopped (checkIncarnations). It returns how
// many incarnations were declared lost.
func (r *rcRun) finish(ctx context.Context, n int) (lost, retried int) {
	t := r.t
	t.Helper()
	r.allowed.Store(max(r.allowed.Load(), int64(n)))
	r.final.Store(true)
	r.wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("submitting timed out")
	}
	if len(r.ids) != n+r.extra {
		t.Fatalf("%d executions accepted, want %d", len(r.ids), n+r.extra)
	}
	for _, status := range []string{"requested", "scheduling", "scheduled", "running"} {
		for {
			var page struct {
				Executions []projections.ExecutionView `json:"executions"`
			}
			if _, err := call(ctx, "GET", r.url()+"/api/v1/executions?limit=5&status="+status, nil, rcAdmin, &page); err != nil {
				t.Fatal(err)
			}
			if len(page.Executions) == 0 {
				break
			}
			if ctx.Err() != nil {
				for _, w := range r.workers {
					t.Logf("worker %s:\n%s", w.name, clipLines(w.logs.String(), 30))
				}
				t.Fatalf("executions still %s at the deadline, e.g. %+v", status, page.Executions[0])
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	env := []string{"TURNSTILE_TOKEN=" + rwAdmin}
	if code, out, errOut := runCLI(ctx, t, r.bin, env, "rebuild", "--server", r.url()); code != 0 {
		t.Errorf("turnstile rebuild --server: exit %d\n%s%s", code, out, errOut)
	}
	r.srv.Load().stop(t)
	if code, out, errOut := runCLI(ctx, t, r.bin, nil, "audit", "--data", r.dir); code != 0 {
		t.Errorf("turnstile audit: exit %d\n%s%s", code, clipLines(out, 40), errOut)
	}
	store, err := embedded.Open(filepath.Join(r.dir, "log"), embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	rep := auditLog(ctx, t, store)
	sum := checkLifecycles(ctx, t, store, r.ids, r.actions)
	lost = checkIncarnations(ctx, t, store)
	t.Logf("%d events; %d executions (%d requested, %d children) by status %v; %d handed over more than once; %d incarnations declared lost",
		rep.Events, rep.Executions, len(r.ids), sum.children, rep.ByStatus, sum.retried, lost)
	return lost, sum.retried
}

// checkIncarnations walks the log and reports, as test errors, any event
// written for a worker incarnation after its end: its worker.lost, the
// registration of another incarnation of the same worker (a replacement)
// or its worker.stopped. An execution's worker-owned events belong to the
// incarnation its last execution.scheduled names. It returns how many
// incarnations were declared lost.
func checkIncarnations(ctx context.Context, t testing.TB, store interface {
	ReadAll(context.Context, uint64, int) ([]domain.Envelope, error)
}) (lost int) {
	t.Helper()
	live := map[string]string{}   // worker id → its live incarnation
	ended := map[string]uint64{}  // incarnation → the position of its end
	handed := map[string]string{} // execution id → the incarnation of its current handoff
	checked := 0
	late := func(inc string, env *domain.Envelope) {
		if p, ok := ended[inc]; ok && inc != "" {
			t.Errorf("%s at position %d (%s) was written for incarnation %s, which ended at position %d", env.Type, env.Position, env.Stream, inc, p)
		}
	}
	end := func(inc string, pos uint64) {
		if _, ok := ended[inc]; !ok && inc != "" {
			ended[inc] = pos
		}
	}
	var from uint64
	for {
		batch, err := store.ReadAll(ctx, from, 4096)
		if err != nil {
			t.Fatal(err)
		}
		if len(batch) == 0 {
			break
		}
		for i := range batch {
			env := &batch[i]
			from = env.Position + 1
			cat, id := domain.SplitStream(env.Stream)
			switch {
			case cat == domain.StreamWorker:
				ev, err := codec.Events.Decode(env)
				if err != nil {
					t.Fatal(err)
				}
				switch e := ev.(type) {
				case domain.WorkerRegistered:
					late(e.Incarnation, env)
					if old := live[id]; old != e.Incarnation {
						end(old, env.Position)
					}
					live[id] = e.Incarnation
				case domain.WorkerHeartbeat:
					late(e.Incarnation, env)
				case domain.WorkerDraining:
					late(e.Incarnation, env)
				case domain.WorkerStopped:
					late(e.Incarnation, env)
					end(e.Incarnation, env.Position)
				case domain.WorkerLost:
					if _, ok := ended[e.Incarnation]; !ok {
						lost++
					}
					end(e.Incarnation, env.Position)
				}
			case cat == domain.StreamExecution && env.Type == domain.TypeExecutionScheduled:
				ev, err := codec.Events.Decode(env)
				if err != nil {
					t.Fatal(err)
				}
				handed[id] = ev.(domain.ExecutionScheduled).Incarnation
			case cat == domain.StreamExecution && env.Owner == domain.OwnerWorker:
				checked++
				late(handed[id], env)
			}
		}
	}
	if checked == 0 {
		t.Error("the log holds no worker-written execution event: nothing was checked")
	}
	return lost
}
