package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"
	"github.com/turnstile/turnstile/internal/waitfor"
)

// watchFixture starts a server with two actions: watch.echo (core.echo,
// max 2) with one completed execution, and watch.idle (a runner no worker
// serves, max 1) with one execution that waits. It returns the server and
// the waiting execution's id.
func watchFixture(t *testing.T) (srv, waiting string) {
	t.Helper()
	srv = startTestServer(t)
	mustCLI(t, srv, "actions", "create", "--ref", "watch.echo", "--runner", "core.echo", "--max-concurrent", "2")
	mustCLI(t, srv, "actions", "create", "--ref", "watch.idle", "--runner", "nobody.serves", "--max-concurrent", "1")
	mustCLI(t, srv, "exec", "request", "watch.echo", "--input", `{"i":0}`, "--wait")
	waiting = strings.TrimSpace(strings.SplitN(mustCLI(t, srv, "exec", "request", "watch.idle", "--input", `{"i":0}`), "\n", 2)[0])
	return srv, waiting
}

// TestWatchPipedStartsWithTheState: piped, watch prints the current state
// first (every action's statistics; the executions that have not ended),
// then the changes, one line each, every field labelled.
func TestWatchPipedStartsWithTheState(t *testing.T) {
	srv, waiting := watchFixture(t)

	// queue-stats: the two actions' statistics at once, in the order of
	// their latest changes; then a change.
	out := &serveLog{}
	done := make(chan int, 1)
	go func() {
		done <- run(context.Background(), []string{"watch", "queue-stats", "--count", "3", "--server", srv, "--token", adminToken}, out, io.Discard)
	}()
	waitfor.That(t, "the initial state", func() bool { return strings.Count(out.String(), "\n") >= 2 }, out)
	mustCLI(t, srv, "exec", "request", "watch.idle", "--input", `{"i":1}`)
	if code := <-done; code != 0 {
		t.Fatalf("watch queue-stats --count 3: exit %d\n%s", code, out)
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	want := []string{
		`^position=\d+ action=watch\.echo queue=0 active=0 max=2 enqueued=1 completed=1 failed=0 timed_out=0 rejected=0 cancelled=0 wait_p50=\S+ms wait_p95=\S+ms paused=false$`,
		`^position=\d+ action=watch\.idle queue=1 active=0 max=1 enqueued=1 completed=0 failed=0 timed_out=0 rejected=0 cancelled=0 wait_p50=\S+ms wait_p95=\S+ms paused=false$`,
		`^position=\d+ action=watch\.idle queue=2 active=0 max=1 enqueued=2 completed=0 `, // the change
	}
	if len(lines) != len(want) {
		t.Fatalf("watch queue-stats: %d lines, want %d\n%s", len(lines), len(want), out)
	}
	for i, w := range want {
		if !regexp.MustCompile(w).MatchString(lines[i]) {
			t.Errorf("watch queue-stats, line %d: %q\nwant %s", i+1, lines[i], w)
		}
	}

	// executions: the one that has not ended, not the one that has.
	got := mustCLI(t, srv, "watch", "executions", "--action", "watch.idle", "--count", "1")
	if !regexp.MustCompile(`^position=\d+ id=` + regexp.QuoteMeta(waiting) + ` action=watch\.idle status=\S+ attempt=\d+ worker=\S+\n$`).MatchString(got) {
		t.Errorf("watch executions --action watch.idle --count 1: %q, want the waiting execution %s", got, waiting)
	}
	got = mustCLI(t, srv, "watch", "executions", "--count", "2")
	if strings.Contains(got, "action=watch.echo") || strings.Count(got, "action=watch.idle") != 2 {
		t.Errorf("watch executions --count 2: %q, want the two waiting executions of watch.idle only", got)
	}
}

// TestWatchTerminalTable runs watch on a pseudo-terminal: it draws a table
// with labelled columns at once (the current state), redraws it in place
// as the state changes, never more than once per watchRedraw (plus the
// first and the last frame), and shows the cursor again when interrupted.
func TestWatchTerminalTable(t *testing.T) {
	srv, waiting := watchFixture(t)
	scr := startPTYWatch(t, srv, 40, 200, "watch", "queue-stats")

	header := regexp.MustCompile(`(?m)^ACTION\s+QUEUE\s+ACTIVE\s+MAX\s+ENQUEUED\s+COMPLETED\s+FAILED\s+TIMED_OUT\s+REJECTED\s+CANCELLED\s+WAIT_P50\s+WAIT_P95\s+PAUSED\s+POSITION$`)
	row := func(action string, figures string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(action) + `\s+` + strings.ReplaceAll(figures, " ", `\s+`) + `\s`)
	}
	scr.waitFrame(t, "the current state", header, row("watch.echo", "0 0 2 1 1 0 0 0 0"), row("watch.idle", "1 0 1 1 0 0 0 0 0"))

	// Changes: ten more echoes, one more waiting, one cancelled.
	for range 10 {
		mustCLI(t, srv, "exec", "request", "watch.echo", "--input", `{"x":1}`)
	}
	mustCLI(t, srv, "exec", "request", "watch.idle", "--input", `{"i":1}`)
	mustCLI(t, srv, "exec", "cancel", waiting)
	scr.waitFrame(t, "the changes", header, row("watch.echo", "0 0 2 11 11 0 0 0 0"), row("watch.idle", "1 0 1 2 0 0 0 0 1"))

	last := scr.frame()
	frames, elapsed, tail := scr.stop(t)
	t.Logf("%d frames in %v; the last before the interrupt:\n%s", frames, elapsed, last)
	if limit := int(elapsed/watchRedraw) + 2; frames > limit {
		t.Errorf("%d frames in %v: more than one per %v (at most %d)", frames, elapsed, watchRedraw, limit)
	}
	if !strings.HasSuffix(tail, ansiShowCursor) {
		t.Errorf("the output does not end by showing the cursor: %q", tail)
	}
}

// TestWatchTerminalExecutions: the executions table on a terminal holds
// each execution's latest state, an ended one with its final status.
func TestWatchTerminalExecutions(t *testing.T) {
	srv, waiting := watchFixture(t)
	scr := startPTYWatch(t, srv, 40, 200, "watch", "executions")
	header := regexp.MustCompile(`(?m)^ID\s+ACTION\s+STATUS\s+ATTEMPT\s+WORKER\s+POSITION\s+ERROR$`)
	row := func(id, rest string) *regexp.Regexp {
		return regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s+` + rest)
	}
	scr.waitFrame(t, "the waiting execution", header, row(waiting, `watch\.idle\s+(requested|scheduling)\s`))
	mustCLI(t, srv, "exec", "cancel", waiting)
	echo := strings.TrimSpace(strings.SplitN(mustCLI(t, srv, "exec", "request", "watch.echo", "--input", `{"i":1}`, "--wait"), "\n", 2)[0])
	scr.waitFrame(t, "the ended executions", header, row(waiting, `watch\.idle\s+cancelled\s`), row(echo, `watch\.echo\s+completed\s+1\s`))
	scr.stop(t)
}

// TestWatchTerminalFits: on a small terminal the table keeps to the
// screen: no line is wider than it (a wrapped line would push the frame
// down), and when the rows do not fit the newest are shown and the others
// counted.
func TestWatchTerminalFits(t *testing.T) {
	srv, _ := watchFixture(t)
	var newest string
	for i := range 5 {
		newest = strings.TrimSpace(mustCLI(t, srv, "exec", "request", "watch.idle", "--input", fmt.Sprintf(`{"i":%d}`, i+1)))
	}
	const rows, cols = 8, 60
	scr := startPTYWatch(t, srv, rows, cols, "watch", "executions")
	// 8 rows: the title, a blank line, the column labels, the line that
	// counts what is not shown, 3 rows, and the last line left free.
	scr.waitFrame(t, "the newest rows", regexp.MustCompile(`(?m)^… 3 earlier rows not shown$`),
		regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(newest)+`\s+watch\.idle`))
	f := scr.frame()
	lines := strings.Split(strings.TrimSuffix(f, "\n"), "\n")
	if len(lines) != rows-1 {
		t.Errorf("the frame has %d lines, want %d:\n%s", len(lines), rows-1, f)
	}
	for _, l := range lines {
		if n := utf8.RuneCountInString(l); n > cols {
			t.Errorf("a line of %d characters on a screen of %d columns: %q", n, cols, l)
		}
	}
	scr.stop(t)
}

// TestWatchTerminalLines: on a terminal, watch events (no state to draw)
// and --json print lines, as piped: no table, no control sequence.
func TestWatchTerminalLines(t *testing.T) {
	srv, _ := watchFixture(t)
	for _, c := range []struct {
		args []string
		want *regexp.Regexp
	}{
		{[]string{"watch", "events", "--from", "0", "--count", "2"}, regexp.MustCompile(`^position=0 time=\S+ stream=\S+ version=0 type=\S+ owner=\S+\r?\nposition=1 `)},
		{[]string{"watch", "queue-stats", "--count", "2", "--json"}, regexp.MustCompile(`^\{"action":"watch\.echo",.*\}\r?\n\{"action":"watch\.idle",.*\}\r?\n$`)},
	} {
		scr := startPTYWatch(t, srv, 40, 200, c.args...)
		if code := <-scr.done; code != 0 {
			t.Fatalf("turnstile %s on a terminal: exit %d", strings.Join(c.args, " "), code)
		}
		waitfor.That(t, "the output of "+strings.Join(c.args, " "), func() bool { return c.want.MatchString(scr.out.String()) }, scr.out)
		if out := scr.out.String(); strings.Contains(out, "\x1b") {
			t.Errorf("turnstile %s on a terminal: a control sequence in %q", strings.Join(c.args, " "), out)
		}
	}
}

// ptyWatch is a watch command whose stdout is a pseudo-terminal.
type ptyWatch struct {
	out     *serveLog // what the terminal received
	cancel  context.CancelFunc
	done    chan int
	started time.Time
	readEnd chan struct{}
	tty     *os.File
	ptmx    *os.File
}

// startPTYWatch runs `turnstile args…` in this process with a pseudo-
// terminal of rows × cols as its stdout.
func startPTYWatch(t *testing.T, srv string, rows, cols uint16, args ...string) *ptyWatch {
	t.Helper()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatalf("open a pseudo-terminal: %v", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &ptyWatch{out: &serveLog{}, cancel: cancel, done: make(chan int, 1), started: time.Now(), readEnd: make(chan struct{}), tty: tty, ptmx: ptmx}
	go func() {
		_, _ = io.Copy(w.out, ptmx) // until ptmx is closed
		close(w.readEnd)
	}()
	errOut := &serveLog{}
	go func() {
		w.done <- run(ctx, append(args, "--server", srv, "--token", adminToken), tty, errOut)
	}()
	t.Cleanup(func() {
		cancel()
		_ = tty.Close()
		_ = ptmx.Close()
		if errOut.String() != "" {
			t.Logf("stderr of turnstile %s: %s", strings.Join(args, " "), errOut)
		}
	})
	return w
}

// frame returns the last complete frame on the screen, one line per line
// of the screen.
func (w *ptyWatch) frame() string {
	s := w.out.String()
	i := strings.LastIndex(s, ansiHome)
	if i < 0 || !strings.Contains(s[i:], ansiClearBelow) {
		s = s[:max(i, 0)] // the last frame is still being written: the one before
		if i = strings.LastIndex(s, ansiHome); i < 0 {
			return ""
		}
	}
	s = s[i+len(ansiHome):]
	s = s[:strings.Index(s, ansiClearBelow)]
	return strings.NewReplacer(ansiClearLine, "", "\r", "").Replace(s)
}

// waitFrame waits until the screen's last frame matches every pattern.
func (w *ptyWatch) waitFrame(t *testing.T, what string, patterns ...*regexp.Regexp) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, ok := w.frame(), true
		for _, p := range patterns {
			ok = ok && p.MatchString(f)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the screen does not show %s after 20s; the last frame:\n%s\nwant it to match %q", what, f, patterns)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop interrupts the watch, which must end with exit 0, and returns how
// many frames it drew, in how long, and the output's last bytes.
func (w *ptyWatch) stop(t *testing.T) (frames int, elapsed time.Duration, tail string) {
	t.Helper()
	w.cancel()
	if code := <-w.done; code != 0 {
		t.Fatalf("watch interrupted: exit %d", code)
	}
	elapsed = time.Since(w.started)
	// Everything written to the terminal is readable before the watch
	// ended; wait for the reader to have it.
	deadline := time.Now().Add(5 * time.Second)
	for !strings.HasSuffix(w.out.String(), ansiShowCursor) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	s := w.out.String()
	return strings.Count(s, ansiHome), elapsed, s[max(0, len(s)-40):]
}
