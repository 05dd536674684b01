package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// The tests in this file check that a request's input cannot turn the
// built-in runners against the host: what core.shell runs and what
// core.http reaches is the action definition's.

func TestShellWithoutConfigRefuses(t *testing.T) {
	t.Parallel()
	r := mustRunner(t, Config{}, NameShell)
	for _, input := range []string{`{"command":"/bin/sh","args":["-c","id"]}`, `{"command":"/bin/cat","args":["/etc/shadow"]}`, `{}`} {
		out, err := r.Run(context.Background(), json.RawMessage(input))
		if out != nil {
			t.Fatalf("input %s ran: %s", input, out)
		}
		f := asFailure(t, err)
		if !errors.Is(err, errShellNoConfig) || !strings.Contains(f.Message, "runner_config") {
			t.Fatalf("input %s: failure %q, want the no-runner_config refusal", input, f.Message)
		}
	}
}

// TestShellInputCannotChooseTheProgram: one attempt per way an input could
// pick what runs, against a definition that fixes /bin/echo.
func TestShellInputCannotChooseTheProgram(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fixed := withConfig(mustRunner(t, Config{}, NameShell), `{"command":"/bin/echo","args":["fixed"]}`)
	appendable := withConfig(mustRunner(t, Config{}, NameShell), `{"command":"/bin/echo","args":["fixed"],"input_args":true}`)
	tests := []struct {
		name    string
		r       Runner
		input   string
		wantMsg string
	}{
		{"command in input", fixed, `{"command":"/bin/sh","args":["-c","id"]}`, `"command": the program is fixed`},
		{"bare command in input", appendable, `{"command":"sh"}`, `"command": the program is fixed`},
		{"env PATH override", appendable, `{"env":{"PATH":"` + dir + `"}}`, `"env": the environment is fixed`},
		{"env LD_PRELOAD", appendable, `{"env":{"LD_PRELOAD":"/tmp/evil.so"}}`, `"env": the environment is fixed`},
		{"empty env object", appendable, `{"env":{}}`, `"env": the environment is fixed`},
		{"dir", appendable, `{"dir":"` + dir + `"}`, `"dir": the working directory is fixed`},
		{"args without input_args", fixed, `{"args":["--help"]}`, "input_args is false"},
		{"command key in other case", appendable, `{"Command":"/bin/sh"}`, `unknown field "Command"`},
		{"duplicate args key", appendable, `{"args":["a"],"args":["b"]}`, `duplicate field "args"`},
		{"null argument", appendable, `{"args":[null]}`, `"args"[0] is null`},
		{"null after a string", appendable, `{"args":["a",null]}`, `"args"[1] is null`},
		{"args not an array", appendable, `{"args":"a"}`, `"args" must be an array of strings`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out, err := tt.r.Run(context.Background(), json.RawMessage(tt.input))
			if out != nil {
				t.Fatalf("ran: %s", out)
			}
			f := asFailure(t, err)
			if !strings.HasPrefix(f.Message, "invalid input: ") || !strings.Contains(f.Message, tt.wantMsg) {
				t.Fatalf("failure %q, want invalid input containing %q", f.Message, tt.wantMsg)
			}
		})
	}

	// What the definition allows still works: arguments appended after its own.
	out, err := appendable.Run(context.Background(), json.RawMessage(`{"args":["-n is an argument", "$(id)"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := decodeShellResult(t, out).Stdout; got != "fixed -n is an argument $(id)\n" {
		t.Fatalf("stdout %q", got)
	}
	if out, err := fixed.Run(context.Background(), json.RawMessage(`{}`)); err != nil || decodeShellResult(t, out).Stdout != "fixed\n" {
		t.Fatalf("fixed run: %s, %v", out, err)
	}
}

// TestShellCleanEnvironment: the server's environment (where secrets such as
// TURNSTILE_TOKENS may live) never reaches a process.
func TestShellCleanEnvironment(t *testing.T) {
	t.Setenv("TURNSTILE_TOKENS", "admin:a-secret-that-must-not-leak")
	t.Setenv("TURNSTILE_TEST_MARKER", "leaked")
	r := withConfig(mustRunner(t, Config{}, NameShell), `{"command":"env","env":{"FROM_DEFINITION":"1"}}`)
	out, err := r.Run(context.Background(), json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	got := decodeShellResult(t, out).Stdout
	if want := "FROM_DEFINITION=1\nPATH=" + DefaultShellPath + "\n"; got != want {
		t.Fatalf("environment %q, want exactly %q", got, want)
	}
}

// TestShellUser: as root, ShellUser switches the process's user; root is
// refused unless allowed; a process that is not root cannot switch.
func TestShellUser(t *testing.T) {
	t.Parallel()
	nobody, err := lookupUser("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	if os.Geteuid() != 0 {
		err := Config{Enabled: []string{NameShell}, ShellUser: "nobody"}.Validate()
		if err == nil || !strings.Contains(err.Error(), "needs root") {
			t.Fatalf("Validate = %v, want a refusal to switch user without root", err)
		}
		t.Skip("the user switch itself needs root")
	}
	if err := (Config{Enabled: []string{NameShell}}).Validate(); !errors.Is(err, errShellAsRoot) {
		t.Fatalf("Validate as root with no ShellUser = %v, want errShellAsRoot", err)
	}
	if err := (Config{Enabled: []string{NameShell}, ShellUser: "root"}).Validate(); !errors.Is(err, errShellAsRoot) {
		t.Fatalf("Validate with ShellUser root = %v, want errShellAsRoot", err)
	}
	if err := (Config{Enabled: []string{NameShell}, ShellUser: "no-such-user-turnstile"}).Validate(); err == nil {
		t.Fatal("an unknown ShellUser was accepted")
	}
	if err := (Config{ShellUser: "no-such-user-turnstile"}).Validate(); err != nil {
		t.Fatalf("ShellUser is checked although core.shell is off: %v", err)
	}
	if err := (Config{Enabled: []string{NameShell}, ShellAllowRoot: true}).Validate(); err != nil {
		t.Fatalf("ShellAllowRoot: %v", err)
	}

	r := withConfig(mustRunner(t, Config{ShellUser: "nobody"}, NameShell), `{"command":"/bin/sh","args":["-c","id -u; id -g; cat /proc/1/environ >/dev/null 2>&1 && echo readable || echo refused"]}`)
	out, err := r.Run(context.Background(), json.RawMessage(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%d\n%d\nrefused\n", nobody.uid, nobody.gid)
	if got := decodeShellResult(t, out).Stdout; got != want {
		t.Fatalf("as nobody: stdout %q, want %q (uid, gid, and another process's environ unreadable)", got, want)
	}
}

func TestValidateConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		runner, config string
		wantErr        string // "" means valid
	}{
		{NameShell, ``, ""},
		{NameShell, `{"command":"/usr/bin/convert","args":["-resize"],"env":{"K":"v"},"dir":"/tmp","input_args":true}`, ""},
		{NameShell, `{"command":"echo"}`, ""},
		{NameShell, `{}`, `"command" is required`},
		{NameShell, `{"command":"./x"}`, "absolute path"},
		{NameShell, `{"command":"/bin/echo","shell":true}`, `unknown field "shell"`},
		{NameShell, `{"command":"/bin/echo","env":{"PATH":""}}`, "PATH"},
		{NameShell, `{"command":"/bin/echo","dir":"rel"}`, "absolute"},
		{NameShell, `["/bin/echo"]`, "JSON object"},
		{NameShell, `{"command":"/bin/echo","args":["-n",null]}`, `"args"[1] is null`},
		{NameHTTP, `{"url":"https://x/a/../b/"}`, "dot segment"},
		{NameHTTP, `{"url":"https://x/a/%2e%2e/b/"}`, "dot segment"},
		{NameHTTP, `{"url":"https://x/a%2fb/"}`, "encoded"},
		{NameHTTP, ``, ""},
		{NameHTTP, `{"url":"https://api.example.com/v1/","methods":["GET","post"],"allow_private":false}`, ""},
		{NameHTTP, `{"allow_private":true}`, ""},
		{NameHTTP, `{"url":"ftp://x/"}`, "scheme"},
		{NameHTTP, `{"url":"https:///x"}`, "no host"},
		{NameHTTP, `{"url":"https://x/?a=1"}`, "no query"},
		{NameHTTP, `{"methods":["TRACE"]}`, `"methods"`},
		{NameHTTP, `{"URL":"https://x/"}`, `unknown field "URL"`},
		{NameEcho, ``, ""},
		{NameEcho, `{"x":1}`, "takes no runner_config"},
		{NameNoop, `{}`, "takes no runner_config"},
		{"custom.thing", `{"anything":["goes"]}`, ""},
	}
	for _, tt := range tests {
		err := ValidateConfig(tt.runner, json.RawMessage(tt.config))
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateConfig(%s, %s) = %v", tt.runner, tt.config, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ValidateConfig(%s, %s) = %v, want an error containing %q", tt.runner, tt.config, err, tt.wantErr)
		}
	}
}

func TestParseEnabled(t *testing.T) {
	t.Parallel()
	got, err := ParseEnabled(" core.noop, core.shell ,")
	if err != nil || strings.Join(got, ",") != "core.noop,core.shell" {
		t.Fatalf("ParseEnabled = %v, %v", got, err)
	}
	if got, err := ParseEnabled("default"); err != nil || strings.Join(got, ",") != strings.Join(DefaultEnabled, ",") {
		t.Fatalf("ParseEnabled(default) = %v, %v", got, err)
	}
	if got, err := ParseEnabled(""); err != nil || got == nil || len(got) != 0 {
		t.Fatalf("ParseEnabled(\"\") = %#v, %v; want an empty, non-nil list", got, err)
	}
	for _, bad := range []string{"core.nope", "core.echo,core.echo"} {
		if _, err := ParseEnabled(bad); err == nil {
			t.Errorf("ParseEnabled(%q) accepted", bad)
		}
	}
}

func TestInternalAddr(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"127.0.0.1", "127.9.9.9", "::1", "169.254.169.254", "169.254.1.1", "fe80::1", "fd00:ec2::254",
		"10.1.2.3", "172.16.0.1", "192.168.1.1", "fc00::1", "0.0.0.0", "::", "::ffff:127.0.0.1", "::ffff:169.254.169.254",
		"100.100.100.200", "64:ff9b::7f00:1", "224.0.0.1", "255.255.255.255",
		// IPv6 forms that carry an internal IPv4 address, or are never a public target.
		"::127.0.0.1", "::7f00:1", "::169.254.169.254", "::8.8.8.8", "::ffff:0:7f00:1", "::ffff:0:a00:1",
		"64:ff9b:1::a00:1", "64:ff9b:1:808:8:800::", "2002:7f00:1::1", "2002:a9fe:a9fe::", "2001:0:4136:e378:8000:63bf:80ff:fffe"} {
		if internalAddr(netip.MustParseAddr(s)) == "" {
			t.Errorf("%s is not refused", s)
		}
	}
	for _, s := range []string{"93.184.215.14", "8.8.8.8", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:808:808::1",
		"2001:0:4136:e378:8000:63bf:f7f7:f7f7"} {
		if why := internalAddr(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s refused as %s", s, why)
		}
	}
}

// refusedHTTP runs r and checks that it failed with ErrAddressRefused and
// that the server saw nothing.
func refusedHTTP(t *testing.T, r Runner, input string, hits *atomic.Int64) {
	t.Helper()
	before := hits.Load()
	out, err := r.Run(context.Background(), json.RawMessage(input))
	if out != nil {
		t.Fatalf("input %s: result %s", input, out)
	}
	asFailure(t, err)
	if !errors.Is(err, ErrAddressRefused) {
		t.Fatalf("input %s: error %v, want ErrAddressRefused", input, err)
	}
	if hits.Load() != before {
		t.Fatalf("input %s reached the server", input)
	}
}

// TestHTTPInternalAddressesRefused: with no allow_private, core.http reaches
// no loopback, link-local or metadata address, directly, by a DNS name, or
// through a redirect; allow_private lets the same requests through.
func TestHTTPInternalAddressesRefused(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("secret"))
	}))
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	plain := mustRunner(t, Config{}, NameHTTP)

	refusedHTTP(t, plain, `{"url":"`+srv.URL+`/debug/pprof/cmdline"}`, &hits)
	refusedHTTP(t, plain, `{"url":"http://localhost:`+port+`/"}`, &hits) // a DNS name resolving to loopback
	refusedHTTP(t, plain, `{"url":"http://[::1]:`+port+`/"}`, &hits)
	refusedHTTP(t, plain, `{"url":"http://[::127.0.0.1]:`+port+`/"}`, &hits)      // IPv4-compatible
	refusedHTTP(t, plain, `{"url":"http://[::ffff:127.0.0.1]:`+port+`/"}`, &hits) // IPv4-mapped
	refusedHTTP(t, plain, `{"url":"http://[64:ff9b::127.0.0.1]:`+port+`/"}`, &hits)
	refusedHTTP(t, plain, `{"url":"http://169.254.169.254/latest/meta-data/"}`, &hits)
	refusedHTTP(t, plain, `{"url":"http://[fd00:ec2::254]/latest/meta-data/"}`, &hits)
	refusedHTTP(t, plain, `{"url":"http://0.0.0.0:`+port+`/"}`, &hits)
	refusedHTTP(t, withConfig(plain, `{"allow_private":false}`), `{"url":"`+srv.URL+`/"}`, &hits)
	refusedHTTP(t, withConfig(plain, `{"url":"`+srv.URL+`/api/"}`), `{"path":"x"}`, &hits)

	for _, r := range []Runner{withConfig(plain, privateOK), withConfig(plain, `{"url":"`+srv.URL+`/api/","allow_private":true}`)} {
		out, err := r.Run(context.Background(), json.RawMessage(`{"url":"`+srv.URL+`/"}`))
		if err != nil && strings.Contains(err.Error(), `"url": the action's runner_config fixes the url`) {
			out, err = r.Run(context.Background(), json.RawMessage(`{"path":"x"}`))
		}
		if err != nil || decodeHTTPResult(t, out).Body != "secret" {
			t.Fatalf("allow_private: %s, %v", out, err)
		}
	}
}

// TestHTTPRedirectRechecked: every redirect is checked again, at the
// redirect and at connect time.
func TestHTTPRedirectRechecked(t *testing.T) {
	t.Parallel()
	internal := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the internal server was reached: %s", r.URL)
	}))
	t.Cleanup(internal.Close)
	_, internalPort, _ := net.SplitHostPort(internal.Listener.Addr().String())
	public := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
	}))
	t.Cleanup(public.Close)
	publicAddr := public.Listener.Addr().String()

	// The public server stands for an outside address: the check lets its
	// exact address through and applies the real rule to everything else.
	r := &httpRunner{maxBody: 1 << 10, guarded: newHTTPClient(&http.Client{}, func(address string) error {
		if address == publicAddr {
			return nil
		}
		return checkDialAddr(address)
	})}
	t.Cleanup(r.guarded.CloseIdleConnections)
	for _, to := range []string{
		"http://127.0.0.1:" + internalPort + "/",   // a literal: refused at the redirect
		"http://localhost:" + internalPort + "/",   // a name: refused when dialled
		"http://169.254.169.254/latest/meta-data/", // metadata
		"http://[::1]:" + internalPort + "/",       // IPv6 loopback
	} {
		in := `{"url":"` + public.URL + `/?to=` + url.QueryEscape(to) + `"}`
		out, err := r.Run(context.Background(), json.RawMessage(in))
		if out != nil || !errors.Is(err, ErrAddressRefused) {
			t.Errorf("redirect to %s: %s, %v; want ErrAddressRefused", to, out, err)
		}
	}
	// A redirect out of the definition's url is refused as well.
	cfg := `{"url":"` + public.URL + `/api/"}`
	out, err := RunWith(context.Background(), r, json.RawMessage(cfg), json.RawMessage(`{"path":"x?to=`+url.QueryEscape(public.URL+"/other")+`"}`))
	if out != nil || err == nil || !strings.Contains(err.Error(), "leaves the action's url") {
		t.Errorf("redirect out of the prefix: %s, %v", out, err)
	}
}

// TestHTTPFixedURL: with a url in the definition, the input chooses only a
// path under it, a method among those allowed, headers and a body.
func TestHTTPFixedURL(t *testing.T) {
	t.Parallel()
	srv := echoServer(t)
	r := withConfig(mustRunner(t, Config{}, NameHTTP), `{"url":"`+srv.URL+`/v1/","methods":["GET","POST"],"allow_private":true}`)
	ok := []struct{ input, wantPath string }{
		{`{}`, "/v1/"},
		{`{"path":"users/1"}`, "/v1/users/1"},
		{`{"path":"users?status=404"}`, "/v1/users"},
		{`{"method":"post","path":"a/b","body":{"k":1}}`, "/v1/a/b"},
	}
	for _, tt := range ok {
		out, err := r.Run(context.Background(), json.RawMessage(tt.input))
		if err != nil {
			t.Fatalf("%s: %v", tt.input, err)
		}
		if res := decodeHTTPResult(t, out); res.seen["path"] != tt.wantPath {
			t.Fatalf("%s: server saw path %v, want %s", tt.input, res.seen["path"], tt.wantPath)
		}
	}
	bad := []struct{ input, wantMsg string }{
		{`{"url":"http://169.254.169.254/"}`, "fixes the url"},
		{`{"path":"../admin"}`, "climb out"},
		{`{"path":"a/../../admin"}`, "climb out"},
		{`{"path":"%2e%2e/admin"}`, "climb out"},
		{`{"path":"..%2fadmin"}`, "climb out"},
		{`{"path":"%252e%252e/admin"}`, "leaves the action's url: dot segment"},
		{`{"path":"a/%252e%252e%252f..%252fadmin"}`, "leaves the action's url"},
		{`{"path":"a%252fb"}`, "encoded slash"},
		{`{"path":"/admin"}`, "relative"},
		{`{"path":"//evil.example/x"}`, "relative"},
		{`{"path":"http://evil.example/"}`, "relative path"},
		{`{"path":"a\\b"}`, "backslash"},
		{`{"path":"a#frag"}`, "relative path"},
		{`{"method":"DELETE","path":"x"}`, "not allowed"},
		{`{"headers":{"Host":"internal.example"}}`, "Host is fixed"},
	}
	for _, tt := range bad {
		out, err := r.Run(context.Background(), json.RawMessage(tt.input))
		if out != nil {
			t.Fatalf("%s: result %s", tt.input, out)
		}
		if f := asFailure(t, err); !strings.Contains(f.Message, tt.wantMsg) {
			t.Errorf("%s: failure %q, want it to contain %q", tt.input, f.Message, tt.wantMsg)
		}
	}
	// Without a url in the definition, a path means nothing.
	out, err := withConfig(mustRunner(t, Config{}, NameHTTP), privateOK).Run(context.Background(), json.RawMessage(`{"path":"x"}`))
	if out != nil || err == nil || !strings.Contains(err.Error(), `"path" needs a "url"`) {
		t.Fatalf("path without a url: %s, %v", out, err)
	}
}

// TestHTTPRedirectPathDecoded: a redirect stays under the definition's url
// by its decoded path, whatever its encoding: an escaped dot segment or an
// escaped slash, once or twice encoded, is refused before anything is
// requested there; an ordinary redirect under the url is followed.
func TestHTTPRedirectPathDecoded(t *testing.T) {
	t.Parallel()
	var outside atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/ok/go":
			w.Header().Set("Location", r.URL.Query().Get("to"))
			w.WriteHeader(http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/ok/") && !strings.Contains(r.URL.RawPath, "%"):
			_, _ = w.Write([]byte("landed " + r.URL.Path))
		default:
			outside.Add(1)
			_, _ = w.Write([]byte("admin"))
		}
	}))
	t.Cleanup(srv.Close)
	r := withConfig(mustRunner(t, Config{}, NameHTTP), `{"url":"`+srv.URL+`/ok/","allow_private":true}`)
	for _, to := range []string{"/ok/%252e%252e/admin", "/ok/..%2fadmin", "/ok/%2e%2e/admin", "/ok/..%252fadmin", "/ok/%2E%2E%2Fadmin",
		srv.URL + "/ok/%252e%252e/admin"} {
		out, err := r.Run(context.Background(), json.RawMessage(`{"path":"go?to=`+url.QueryEscape(to)+`"}`))
		if out != nil || err == nil || !strings.Contains(err.Error(), "leaves the action's url") {
			t.Errorf("redirect to %s: %s, %v; want it refused as leaving the url", to, out, err)
		}
	}
	if n := outside.Load(); n != 0 {
		t.Fatalf("%d requests reached a path outside /ok/", n)
	}
	out, err := r.Run(context.Background(), json.RawMessage(`{"path":"go?to=`+url.QueryEscape("/ok/fine/1")+`"}`))
	if err != nil || decodeHTTPResult(t, out).Body != "landed /ok/fine/1" {
		t.Fatalf("a redirect under the url: %s, %v", out, err)
	}
}
