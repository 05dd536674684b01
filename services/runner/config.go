package runner

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"path/filepath"
	"slices"
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

	// Enabled names the built-in runners Builtins registers. nil means
	// DefaultEnabled: core.noop, core.echo, core.sleep and core.fail, but
	// neither core.shell nor core.http, which reach the host and its
	// network and are offered only where the operator names them.
	Enabled []string

	// DisableShell leaves core.shell out of Builtins' registry even when
	// Enabled names it.
	DisableShell bool

	// ShellAllowedCommands, when not empty, is the list of absolute executable
	// paths core.shell may run; any other command fails, whatever an action's
	// runner_config names. A bare command name is resolved through PATH first
	// and the resolved path is checked.
	ShellAllowedCommands []string

	// ShellUser is the user core.shell's processes run as: a name or a
	// numeric uid from the user database, with that user's primary group
	// and supplementary groups. Empty: the server's own user. Switching user
	// needs root; a process that is root and enables core.shell must name
	// one, unless ShellAllowRoot says otherwise.
	ShellUser string

	// ShellAllowRoot lets core.shell run its processes as root when the
	// server is root and ShellUser is empty. Off by default: a process
	// started by an action would hold the host.
	ShellAllowRoot bool

	// ShellEnv is core.shell's base environment: a command runs with exactly
	// these variables, extended and overridden by the runner_config's "env". The
	// server's own environment is never passed on. Default: only
	// PATH=DefaultShellPath. It must hold a non-empty PATH.
	ShellEnv map[string]string

	// DisableHTTP leaves core.http out of Builtins' registry even when
	// Enabled names it.
	DisableHTTP bool

	// HTTPClient sends core.http's requests. Its Transport must be nil or an
	// *http.Transport: core.http dials through clones of it that check every
	// address they connect to (see the package doc), and sets its own
	// redirect policy. Default: a client with a DefaultHTTPTimeout overall
	// timeout over a clone of http.DefaultTransport with no proxy (a proxy
	// from the environment is not used), dial and TLS handshake timeouts.
	HTTPClient *http.Client
}

// DefaultEnabled is the list of built-in runners a zero Config enables:
// those that touch nothing outside the process.
var DefaultEnabled = []string{NameNoop, NameEcho, NameSleep, NameFail}

// AllBuiltins names every built-in runner.
var AllBuiltins = []string{NameNoop, NameEcho, NameSleep, NameFail, NameShell, NameHTTP}

// ParseEnabled reads a comma-separated list of built-in runner names (a
// --runners flag) into a Config.Enabled. Blanks around names are ignored;
// an unknown or repeated name is an error. "" gives an empty list (no
// built-in runner at all); "default" alone gives DefaultEnabled.
func ParseEnabled(list string) ([]string, error) {
	if strings.TrimSpace(list) == "default" {
		return slices.Clone(DefaultEnabled), nil
	}
	out := []string{}
	for _, n := range strings.Split(list, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.Contains(AllBuiltins, n) {
			return nil, fmt.Errorf("unknown built-in runner %q: use any of %s", n, strings.Join(AllBuiltins, ", "))
		}
		if slices.Contains(out, n) {
			return nil, fmt.Errorf("runner %q named twice", n)
		}
		out = append(out, n)
	}
	return out, nil
}

// enabled reports whether c offers the built-in runner name.
func (c Config) enabled(name string) bool {
	switch {
	case name == NameShell && c.DisableShell, name == NameHTTP && c.DisableHTTP:
		return false
	}
	return slices.Contains(c.Enabled, name)
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
	if c.Enabled == nil {
		c.Enabled = DefaultEnabled
	}
	c.Enabled = slices.Clone(c.Enabled)
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
	for _, n := range c.Enabled {
		if !slices.Contains(AllBuiltins, n) {
			errs = append(errs, fmt.Errorf("Enabled: unknown built-in runner %q", n))
		}
	}
	if c.enabled(NameShell) {
		if _, err := c.shellCredential(); err != nil {
			errs = append(errs, err)
		}
	}
	if c.HTTPClient != nil && c.HTTPClient.Transport != nil {
		if _, ok := c.HTTPClient.Transport.(*http.Transport); !ok {
			errs = append(errs, fmt.Errorf("HTTPClient: Transport %T is not an *http.Transport, so core.http could not check the addresses it dials", c.HTTPClient.Transport))
		}
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
		t.Proxy = nil // never a proxy from the environment: core.http checks the addresses it dials itself
		t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
		rt = t
	} else {
		rt = http.DefaultTransport
	}
	return &http.Client{Transport: rt, Timeout: DefaultHTTPTimeout}
}

// Builtins returns a new Registry holding the built-in runners cfg enables
// (cfg.Enabled; by default core.noop, core.echo, core.sleep and core.fail),
// configured by cfg. Zero fields of cfg get their defaults.
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
	for _, name := range AllBuiltins {
		if !c.enabled(name) {
			continue
		}
		switch name {
		case NameNoop:
			must(name, noopRunner{})
		case NameEcho:
			must(name, echoRunner{})
		case NameSleep:
			must(name, sleepRunner{})
		case NameFail:
			must(name, failRunner{})
		case NameShell:
			cred, _ := c.shellCredential() // checked by validate
			must(name, &shellRunner{
				maxOutput: c.MaxOutputBytes,
				grace:     c.ShellKillGrace,
				baseEnv:   c.ShellEnv,
				allowed:   c.ShellAllowedCommands,
				cred:      cred,
			})
		case NameHTTP:
			must(name, newHTTPRunner(c.HTTPClient, c.MaxOutputBytes))
		}
	}
	return reg
}
