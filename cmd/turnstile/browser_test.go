package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// Helpers of the browser tests: a headless Chromium driven through the
// DevTools protocol (chromedp), a `turnstile serve` that can be stopped and
// started again on the same address and data, and screenshots kept as
// artifacts.

// chromiumPath finds Chromium ($TURNSTILE_CHROMIUM, then chromium,
// chromium-browser, google-chrome on PATH). Without one the test skips,
// saying so, except under CI=true, where it fails: CI must not skip the
// browser silently (scripts/with-chromium.sh installs it there).
func chromiumPath(t *testing.T) string {
	t.Helper()
	if p, err := lookChromium(); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("no Chromium found (chromium, chromium-browser, google-chrome or $TURNSTILE_CHROMIUM) and CI=true: the browser test must run in CI; run it through scripts/with-chromium.sh")
	}
	t.Skip("SKIPPED: no Chromium installed (apt-get install chromium, or scripts/with-chromium.sh go test …); the dashboard is not tested in a browser")
	return ""
}

func lookChromium() (string, error) {
	for _, c := range []string{os.Getenv("TURNSTILE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no Chromium")
}

// awaitPromise makes chromedp.Evaluate wait for the promise it returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }

// viewShot saves what the window shows (not the whole page: a list of
// 1,000 rows is 30,000 pixels tall) into the artifact directory.
func viewShot(t *testing.T, tctx context.Context, name string) {
	t.Helper()
	shotsOnce.Do(func() { shotsDir = artifactDir(t) })
	var png []byte
	uiRun(t, tctx, chromedp.Sleep(300*time.Millisecond), chromedp.CaptureScreenshot(&png))
	if err := os.WriteFile(filepath.Join(shotsDir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

var (
	shotsOnce sync.Once
	shotsDir  string
)

// browser starts a headless Chromium with a new empty profile and answers a
// tab's context. JavaScript exceptions and console errors on the page fail
// the test.
func uiBrowser(t *testing.T, ctx context.Context) context.Context {
	t.Helper()
	// The profile is removed by this test's own cleanup, after the browser
	// is stopped and with a few tries: Chromium's helper processes may still
	// write to it for a moment (t.TempDir's cleanup then failed the test).
	profile, err := os.MkdirTemp("", "turnstile-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(chromiumPath(t)),
		chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.UserDataDir(profile),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1000),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	// This chromedp does not know every DevTools event of a newer Chromium
	// and says so on each one; those lines are noise, the rest is kept.
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithErrorf(func(format string, args ...any) {
		if msg := fmt.Sprintf(format, args...); !strings.Contains(msg, "unhandled node event") {
			log.Print("chromedp: " + msg)
		}
	}))
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
		for i := 0; i < 20 && os.RemoveAll(profile) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	})
	watchErrors(t, bctx)
	if err := chromedp.Run(bctx, cdplog.Enable()); err != nil {
		t.Fatalf("starting Chromium: %v", err)
	}
	return bctx
}

// newTab opens another tab (its own session storage) in the same browser.
// Cancelling it closes the tab.
func newTab(t *testing.T, bctx context.Context) (context.Context, context.CancelFunc) {
	t.Helper()
	tctx, cancel := chromedp.NewContext(bctx)
	t.Cleanup(cancel)
	watchErrors(t, tctx)
	if err := chromedp.Run(tctx, cdplog.Enable()); err != nil {
		t.Fatalf("new tab: %v", err)
	}
	return tctx, cancel
}

// watchErrors fails the test on an uncaught exception or console.error in
// the tab. Failed requests while the server is down are the browser's own
// network log lines, not console errors, so they do not count.
func watchErrors(t *testing.T, tctx context.Context) {
	chromedp.ListenTarget(tctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventExceptionThrown:
			t.Errorf("JavaScript exception on the page: %s", e.ExceptionDetails.Error())
		case *cdplog.EventEntryAdded: // the browser's own: CSP violations and the like
			if e.Entry.Level == cdplog.LevelError && e.Entry.Source != cdplog.SourceNetwork {
				t.Errorf("the browser reports on the page: [%s] %s", e.Entry.Source, e.Entry.Text)
			}
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value))
				}
				t.Errorf("console.error on the page: %s", strings.Join(parts, " "))
			}
		}
	})
}

// artifactDir is where screenshots go: $TURNSTILE_ARTIFACTS, else a new
// directory under the system's temporary one, kept after the test and
// printed.
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("TURNSTILE_ARTIFACTS")
	if dir == "" {
		d, err := os.MkdirTemp("", "turnstile-dashboard-")
		if err != nil {
			t.Fatal(err)
		}
		dir = d
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard screenshots: %s", dir)
	return dir
}

func screenshot(t *testing.T, tctx context.Context, dir, name string) {
	t.Helper()
	var png []byte
	if err := chromedp.Run(tctx, chromedp.Sleep(300*time.Millisecond), chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// restartableServe is `turnstile serve` (in this process, through run) on a
// fixed address and data directory, so it can stop and start again where it
// was: what a browser sees as a dropped connection.
type restartableServe struct {
	t      *testing.T
	addr   string
	data   string
	args   []string
	cancel context.CancelFunc
	done   chan int
	logs   *serveLog
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func startRestartable(t *testing.T, args ...string) *restartableServe {
	s := &restartableServe{t: t, addr: freeAddr(t), data: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *restartableServe) url() string { return "http://" + s.addr }

func (s *restartableServe) start() {
	s.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.done, s.logs = cancel, make(chan int, 1), &serveLog{}
	args := append([]string{"serve", "--addr", s.addr, "--data", s.data}, s.args...)
	go func() { s.done <- run(ctx, args, io.Discard, s.logs) }()
	deadline := time.Now().Add(30 * time.Second)
	for !servedAt.MatchString(s.logs.String()) {
		select {
		case code := <-s.done:
			s.done <- code
			s.t.Fatalf("turnstile serve: exit %d before serving\n%s", code, s.logs)
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("turnstile serve is not serving after 30s\n%s", s.logs)
		}
	}
}

func (s *restartableServe) stop() {
	if s.cancel == nil {
		return
	}
	s.cancel()
	s.cancel = nil
	select {
	case code := <-s.done:
		if code != 0 {
			s.t.Errorf("turnstile serve: exit %d\n%s", code, s.logs)
		}
	case <-time.After(60 * time.Second):
		s.t.Errorf("turnstile serve did not stop within 60s\n%s", s.logs)
	}
}

// call sends a JSON request with a bearer token and decodes the answer into
// out (if not nil); a status other than want fails the test.
func uiCall(t *testing.T, method, url, token string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer res.Body.Close()
	doc, _ := io.ReadAll(res.Body)
	if res.StatusCode != want {
		t.Fatalf("%s %s: %d %s, want %d", method, url, res.StatusCode, doc, want)
	}
	if out != nil {
		if err := json.Unmarshal(doc, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, url, err, doc)
		}
	}
}

// eventually retries check until it answers "" (success) or the time is up,
// then fails with check's last answer.
func uiEventually(t *testing.T, what string, within time.Duration, check func() string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		msg := check()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still not so after %v: %s", what, within, msg)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// text reads the text of the first element matching a CSS selector ("" if
// there is none).
func uiText(t *testing.T, tctx context.Context, sel string) string {
	t.Helper()
	var s string
	js := fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ""`, sel)
	if err := chromedp.Run(tctx, chromedp.Evaluate(js, &s)); err != nil {
		t.Fatalf("reading %s: %v", sel, err)
	}
	return strings.TrimSpace(s)
}

// count answers how many elements match a CSS selector.
func uiCount(t *testing.T, tctx context.Context, sel string) int {
	t.Helper()
	var n int
	if err := chromedp.Run(tctx, chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, sel), &n)); err != nil {
		t.Fatalf("counting %s: %v", sel, err)
	}
	return n
}

func uiRun(t *testing.T, tctx context.Context, actions ...chromedp.Action) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("browser: %v", err)
	}
}
