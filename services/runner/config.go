package runner

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"
)

// Defaults and limits of Config.
const (
	// DefaultMaxOutputBytes is the default bound on each captured stream:
	// core.shell's stdout and stderr, core.http's response body.
	DefaultMaxOutputBytes = 64 << 10
	// MaxOutputBytesLimit is the largest MaxOutputBytes that Validate accepts.
	MaxOutputBytesLimit = 64 << 20
	// DefaultShellKillGrace is the default time between SIGINT and SIGKILL when
	// a core.shell run is cancelled or times out.
	DefaultShellKillGrace = 5 * time.Second
	// MaxShellKillGrace is the largest ShellKillGrace that Validate accepts.
	MaxShellKillGrace = 10 * time.Minute
	// DefaultShellPath is PATH in core.shell's default base environment.
	DefaultShellPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// DefaultHTTPTimeout is the overall timeout of the default core.http client.
	// The action's own timeout (ctx) applies as well; the shorter one wins.
	DefaultHTTPTimeout = 60 * time.Second
)

// Config configures the built-in runners. The zero value is valid and means
// every default; a zero field means that field's default.
type Config struct {
	// MaxOutputBytes bounds each captured stream: core.shell keeps the first
	// MaxOutputBytes bytes of stdout and of stderr, core.http the first
	// MaxOutputBytes bytes of the response body; the rest is read and
	// discarded, and the result says it was truncated. Default
	// DefaultMaxOutputBytes; at most MaxOutputBytesLimit.
	MaxOutputBytes int

	// ShellKillGrace is how long a core.shell process group has to exit after
	// SIGINT, once the run is cancelled or times out, before it gets SIGKILL.
	// Default DefaultShellKillGrace; at most MaxShellKillGrace.
	ShellKillGrace time.Duration

	// DisableShell leaves core.shell out of Builtins' registry, so actions that
	// name it cannot run. core.shell runs any command the input names, as the
	// server's user; set DisableShell (or ShellAllowedCommands) wherever the
	// people who define actions and request executions should not have that
	// power.
	DisableShell bool

	// ShellAllowedCommands, when not empty, is the list of absolute executable
	// paths core.shell may run; any other command fails. A bare command name in
	// the input is resolved through PATH first and the resolved path is checked.
	ShellAllowedCommands []string

	// ShellEnv is core.shell's base environment: a command runs with exactly
	// these variables, extended and overridden by the input's "env". The
	// server's own environment is never passed on. Default: only
	// PATH=DefaultShellPath. It must hold a non-empty PATH.
	ShellEnv map[string]string

	// DisableHTTP leaves core.http out of Builtins' registry. core.http can
	// reach any address the server can, internal ones included.
	DisableHTTP bool

	// HTTPClient sends core.http's requests. Default: a client with a
	// DefaultHTTPTimeout overall timeout over a clone of
	// http.DefaultTransport (proxy from the environment, dial and TLS
	// handshake timeouts), following up to 10 redirects.
	HTTPClient *http.Client
}

// withDefaults returns a copy of c with every zero field set to its default.
// The copy's ShellEnv and ShellAllowedCommands are its own.
func (c Config) withDefaults() Config {
	if c.MaxOutputBytes == 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if c.ShellKillGrace == 0 {
		c.ShellKillGrace = DefaultShellKillGrace
	}
	if c.ShellEnv == nil {
		c.ShellEnv = map[string]string{"PATH": DefaultShellPath}
	} else {
		c.ShellEnv = maps.Clone(c.ShellEnv)
	}
	c.ShellAllowedCommands = append([]string(nil), c.ShellAllowedCommands...)
	if c.HTTPClient == nil {
		c.HTTPClient = defaultHTTPClient()
	}
	return c
}

// Validate reports whether c, with defaults for its zero fields, is usable by
// Builtins. The error names every problem found.
func (c Config) Validate() error {
	return c.withDefaults().validate()
}

func (c Config) validate() error {
	var errs []error
	if c.MaxOutputBytes < 0 || c.MaxOutputBytes > MaxOutputBytesLimit {
		errs = append(errs, fmt.Errorf("MaxOutputBytes %d out of range [1, %d]", c.MaxOutputBytes, MaxOutputBytesLimit))
	}
	if c.ShellKillGrace < 0 || c.ShellKillGrace > MaxShellKillGrace {
		errs = append(errs, fmt.Errorf("ShellKillGrace %s out of range (0, %s]", c.ShellKillGrace, MaxShellKillGrace))
	}
	for _, p := range c.ShellAllowedCommands {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			errs = append(errs, fmt.Errorf("ShellAllowedCommands: %q is not a clean absolute path", p))
		}
	}
	for k, v := range c.ShellEnv {
		if err := checkEnvVar(k, v); err != nil {
			errs = append(errs, fmt.Errorf("ShellEnv: %w", err))
		}
	}
	if c.ShellEnv["PATH"] == "" {
		errs = append(errs, errors.New("ShellEnv: PATH must be set and non-empty"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("runner: invalid config: %w", err)
	}
	return nil
}

// checkEnvVar reports whether k=v can be passed to a process.
func checkEnvVar(k, v string) error {
	if k == "" || strings.ContainsAny(k, "=\x00") {
		return fmt.Errorf("invalid variable name %q", k)
	}
	if strings.ContainsRune(v, 0) {
		return fmt.Errorf("variable %q: value contains NUL", k)
	}
	return nil
}

func defaultHTTPClient() *http.Client {
	t, ok := http.DefaultTransport.(*http.Transport)
	var rt http.RoundTripper
	if ok {
		t = t.Clone()
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		rt = t
	} else {
		rt = http.DefaultTransport
	}
	return &http.Client{Transport: rt, Timeout: DefaultHTTPTimeout}
}

// Builtins returns a new Registry holding the built-in runners configured by
// cfg: core.noop, core.echo, core.sleep, core.fail, and core.shell and
// core.http unless cfg disables them. Zero fields of cfg get their defaults.
//
// Builtins panics if cfg does not pass Validate; callers that build cfg from
// user input call cfg.Validate first and report its error.
func Builtins(cfg Config) *Registry {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		panic(err)
	}
	reg := NewRegistry()
	must := func(name string, r Runner) {
		if err := reg.Register(name, r); err != nil {
			panic(err) // cannot happen: the names are distinct
		}
	}
	must(NameNoop, noopRunner{})
	must(NameEcho, echoRunner{})
	must(NameSleep, sleepRunner{})
	must(NameFail, failRunner{})
	if !c.DisableShell {
		must(NameShell, &shellRunner{
			maxOutput: c.MaxOutputBytes,
			grace:     c.ShellKillGrace,
			baseEnv:   c.ShellEnv,
			allowed:   c.ShellAllowedCommands,
		})
	}
	if !c.DisableHTTP {
		must(NameHTTP, &httpRunner{client: c.HTTPClient, maxBody: c.MaxOutputBytes})
	}
	return reg
}
