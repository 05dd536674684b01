package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The docs' shell examples are tests: TestReadmeTour runs the README's tour
// and TestRunnersDoc every example of docs/runners.md, against a real
// `turnstile serve` built from this tree, so no command shown there can
// drift from what the binary does.
//
// How a Markdown file marks its examples (an HTML comment on the line just
// before a ```sh block):
//
//	<!-- doctest: server -->   the block is the one line that starts the server
//	                           (`bin/turnstile serve …`); the test runs it in a
//	                           scratch directory on a free port (--addr added,
//	                           and --shell-user nobody when the test runs as root)
//	<!-- doctest: run -->      run against that server
//	<!-- doctest: offline -->  stop the server (SIGTERM) first, then run
//	<!-- doctest: skip REASON --> shown, not run (REASON says why)
//
// Every ```sh block must carry one of them. In a block, a line
// `# → TEXT` says that the output (stdout and stderr) of the commands since
// the previous such line contains TEXT; several lines in a row all must
// hold. A step that writes nothing (no POST, PUT or DELETE) and misses its
// expectation is run again for up to 15 s, since the server works in the
// background (a run completes, a cancellation lands) and a newcomer would
// simply run it again. Steps run in one scratch directory, in order, each
// in its own bash; the variables a block assigns (NAME=…) carry over.
// localhost:8080 becomes the server's address, and bin/turnstile is the
// binary under test.

// docBlock is one ```sh block and its mark.
type docBlock struct {
	mark  string // server, run, offline or skip
	line  int    // of the opening fence, 1-based
	lines []string
}

var (
	docMark     = regexp.MustCompile(`^<!-- doctest: (server|run|offline|skip)\b.*-->$`)
	docVar      = regexp.MustCompile(`(?m)(?:^|;|&&|\bdo)\s*([A-Z][A-Z0-9_]*)=`)
	docServedAt = regexp.MustCompile(`msg="turnstile serving" addr=(\S+)`)
)

// docBlocks returns the ```sh blocks of the Markdown file path; a block
// without a mark fails the test.
func docBlocks(t *testing.T, path string) []docBlock {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := parseDocBlocks(string(raw))
	for _, b := range blocks {
		if b.mark == "" {
			t.Errorf("%s:%d: a ```sh block without a <!-- doctest: … --> mark", path, b.line)
		}
	}
	return blocks
}

// parseDocBlocks returns the ```sh blocks of a Markdown text with their
// marks ("" for none).
func parseDocBlocks(text string) []docBlock {
	lines := strings.Split(text, "\n")
	var out []docBlock
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```sh" {
			continue
		}
		b := docBlock{line: i + 1}
		if i > 0 {
			if m := docMark.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				b.mark = m[1]
			}
		}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			b.lines = append(b.lines, lines[i])
		}
		out = append(out, b)
	}
	return out
}

// docStep is a run of commands and what their output must contain.
type docStep struct {
	line   int // of its first command
	script string
	expect []string
}

// steps splits a block at its `# →` lines.
func (b docBlock) steps() []docStep {
	var out []docStep
	cur := docStep{line: b.line + 1}
	for i, l := range b.lines {
		if e, ok := strings.CutPrefix(strings.TrimSpace(l), "# →"); ok {
			cur.expect = append(cur.expect, strings.TrimSpace(e))
			continue
		}
		if len(cur.expect) > 0 || (strings.TrimSpace(l) == "" && strings.TrimSpace(cur.script) != "") {
			out = append(out, cur)
			cur = docStep{line: b.line + 1 + i}
		}
		cur.script += l + "\n"
	}
	if strings.TrimSpace(cur.script) != "" || len(cur.expect) > 0 {
		out = append(out, cur)
	}
	return out
}

// docServer is the server a doc's examples run against.
type docServer struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
	mu   sync.Mutex
	logs strings.Builder
}

func (s *docServer) log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logs.String()
}

// startDocServer runs the server block's command in dir.
func startDocServer(t *testing.T, bin, dir string, b docBlock) *docServer {
	t.Helper()
	var line string
	for _, l := range b.lines {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			line = l
		}
	}
	if before, _, ok := strings.Cut(line, " #"); ok {
		line = strings.TrimSpace(before)
	}
	args := strings.Fields(line)
	if len(args) < 2 || args[0] != "bin/turnstile" || args[1] != "serve" {
		t.Fatalf("line %d: the server block must be `bin/turnstile serve …`, got %q", b.line, line)
	}
	args = append(args[1:], "--addr", "127.0.0.1:0")
	if os.Geteuid() == 0 {
		args = append(args, "--shell-user", "nobody")
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s := &docServer{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			s.mu.Lock()
			s.logs.WriteString(sc.Text() + "\n")
			s.mu.Unlock()
			if m := docServedAt.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case addr <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(s.done)
	}()
	select {
	case s.addr = <-addr:
	case <-s.done:
		t.Fatalf("%s exited before listening:\n%s", line, s.log())
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("%s did not listen within 60 s:\n%s", line, s.log())
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-s.done
	})
	return s
}

func (s *docServer) stop(t *testing.T) {
	t.Helper()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("the server did not stop on SIGTERM:\n%s", s.log())
	}
}

// runDoc runs the marked blocks of the Markdown file path and checks their
// expectations; it returns how many steps ran.
func runDoc(t *testing.T, path string) int {
	for _, tool := range []string{"bash", "curl", "grep", "cut"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the docs' examples need %s, as a newcomer's machine has: %v", tool, err)
		}
	}
	bin := turnstileBinary(t)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(dir, "bin", "turnstile")); err != nil {
		t.Fatal(err)
	}
	blocks := docBlocks(t, path)
	var vars []string
	seen := map[string]bool{}
	for _, b := range blocks {
		if b.mark == "run" || b.mark == "offline" {
			for _, m := range docVar.FindAllStringSubmatch(strings.Join(b.lines, "\n"), -1) {
				if !seen[m[1]] {
					seen[m[1]] = true
					vars = append(vars, m[1])
				}
			}
		}
	}
	state := filepath.Join(dir, ".doctest-vars")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	var srv *docServer
	ran := 0
	for _, b := range blocks {
		switch b.mark {
		case "skip":
			continue
		case "server":
			if srv != nil {
				t.Fatalf("%s:%d: a second server block", path, b.line)
			}
			srv = startDocServer(t, bin, dir, b)
			continue
		case "offline":
			if srv == nil {
				t.Fatalf("%s:%d: an offline block before any server block", path, b.line)
			}
			srv.stop(t)
		case "run":
			if srv == nil {
				t.Fatalf("%s:%d: a run block before the server block", path, b.line)
			}
		}
		for _, st := range b.steps() {
			ran++
			script := strings.NewReplacer("localhost:8080", srv.addr, "127.0.0.1:8080", srv.addr).Replace(st.script)
			full := fmt.Sprintf("source %q\n%s\ndeclare -p %s > %q 2>/dev/null || true\n", state, script, strings.Join(vars, " "), state)
			if len(vars) == 0 {
				full = script
			}
			writes := regexp.MustCompile(`-X ?(POST|PUT|DELETE)|\bcreate\b|\brequest\b`).MatchString(script)
			deadline := time.Now().Add(15 * time.Second)
			for {
				cmd := exec.Command("bash", "-c", full)
				cmd.Dir = dir
				cmd.Env = append(os.Environ(), "TURNSTILE_SERVER=http://"+srv.addr)
				out, _ := cmd.CombinedOutput()
				missing := ""
				for _, e := range st.expect {
					if !strings.Contains(string(out), e) {
						missing = e
						break
					}
				}
				if missing == "" {
					break
				}
				if writes || time.Now().After(deadline) {
					t.Fatalf("%s:%d: the output does not contain %q\n--- commands\n%s--- output\n%s--- server log (tail)\n%s",
						path, st.line, missing, script, out, lastLines(srv.log(), 20))
				}
				time.Sleep(300 * time.Millisecond)
			}
		}
	}
	return ran
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestReadmeTour runs the README's tour against a real server.
func TestReadmeTour(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and runs the tour (about 10 s)")
	}
	if n := runDoc(t, "../../README.md"); n < 10 {
		t.Fatalf("the README's tour has %d steps; the test found too few to be the tour", n)
	}
}

// TestRunnersDoc runs every example of docs/runners.md against a real
// server.
func TestRunnersDoc(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and runs every runner's example")
	}
	if n := runDoc(t, "../../docs/runners.md"); n < 6 {
		t.Fatalf("docs/runners.md has %d steps, want at least one example per built-in runner", n)
	}
}

// TestDocStepsSplit: the parser splits a block at its expectations and a
// block without a mark is reported.
func TestDocStepsSplit(t *testing.T) {
	b := docBlock{line: 10, lines: []string{"a", "# → x", "# → y", "b", "c", "# → z", "d", "", "e"}}
	st := b.steps()
	if len(st) != 4 || st[0].script != "a\n" || strings.Join(st[0].expect, ",") != "x,y" ||
		st[1].script != "b\nc\n" || st[1].expect[0] != "z" || st[2].script != "d\n" || st[2].line != 17 ||
		len(st[2].expect) != 0 || st[3].script != "\ne\n" {
		t.Fatalf("steps: %+v", st)
	}
	blocks := parseDocBlocks("<!-- doctest: run -->\n```sh\necho\n```\n\n```sh\necho\n```\n")
	if len(blocks) != 2 || blocks[0].mark != "run" || blocks[1].mark != "" {
		t.Fatalf("blocks: %+v", blocks)
	}
}
