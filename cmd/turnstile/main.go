// Command turnstile is the one binary: the server, its parts, and the tools
// that read the log (audit, bench). Run `turnstile help` for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/internal/gctune"
	"github.com/turnstile/turnstile/services/runner"
)

func main() {
	ctx, stop := signalContext(os.Stderr)
	defer stop()
	go gctune.Tune(ctx) // the collector's target from the live heap (see docs/tuning.md, "Memory and the garbage collector")
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one subcommand and returns the process exit code, one of
// those exitCodesHelp lists: 0 success, 1 a finding (audit violations, a
// failed execution), 2 bad usage, 3 an operational failure, 4 not found,
// 5 refused for now (client commands).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if helpRequested(args[1:]) {
		stderr = stdout // a help that was asked for is output, not a diagnostic
	}
	if isHelp(args[0]) {
		if len(args) > 1 && args[0] == "help" { // help COMMAND [SUBCOMMAND]: its --help
			return run(ctx, append(append([]string{}, args[1:]...), "--help"), stdout, stderr)
		}
		fmt.Fprint(stdout, usage)
		return 0
	}
	var err error
	switch args[0] {
	case "serve":
		err = cmdServe(ctx, args[1:], stderr)
	case "audit":
		return cmdAudit(ctx, args[1:], stdout, stderr)
	case "verify":
		return cmdVerify(ctx, args[1:], stdout, stderr)
	case "migrate":
		err = cmdMigrate(ctx, args[1:], stdout, stderr)
	case "executor":
		err = cmdExecutor(ctx, args[1:], stderr)
	case "worker":
		err = cmdWorker(ctx, args[1:], stderr)
	case "healthcheck":
		err = cmdHealthcheck(ctx, args[1:], stdout, stderr)
	case "replay":
		err = cmdReplay(ctx, args[1:], stdout, stderr)
	case "rebuild":
		var code int
		if code, err = cmdRebuild(ctx, args[1:], stdout, stderr); err == nil {
			return code
		}
	case "bench":
		if len(args) > 1 && isHelp(args[1]) {
			fmt.Fprint(stdout, benchHelp+"\n"+exitCodesHelp)
			return 0
		}
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "version":
		err = cmdVersion(args[1:], stdout, stderr)
	case "--version", "-version":
		printVersion(stdout, false)
		return 0
	case "actions":
		return runClient(ctx, "actions", actionsCommands, args[1:], stdout, stderr)
	case "exec":
		return runClient(ctx, "exec", execCommands, args[1:], stdout, stderr)
	case "watch":
		return runClient(ctx, "watch", watchCommands, args[1:], stdout, stderr)
	case "log":
		return runClient(ctx, "log", logCommands, args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "turnstile: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	var ue usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp): // --help printed the command's usage
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "turnstile %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "turnstile %s: %v\n", args[0], err)
		return 3
	}
}

// usageError is bad usage: exit 2.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("turnstile "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = flagUsage(fs, name)
	return fs
}

// envString defines a string flag that defaults to the environment
// variable env's value, else to def. Its help names the variable and never
// shows its value: a store URL holds a password, a token is a secret.
func envString(fs *flag.FlagSet, name, env, def, usage string) *string {
	shown := "$" + env
	if def != "" {
		shown += ", else " + def
	}
	p := fs.String(name, "", usage+" (default: "+shown+")")
	*p = envOr(env, def)
	return p
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return usageError{err}
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
	}
	return nil
}

func newLogger(stderr io.Writer) *slog.Logger {
	level := slog.LevelInfo
	if v := strings.ToLower(os.Getenv("TURNSTILE_LOG")); v != "" {
		_ = level.UnmarshalText([]byte(v))
	}
	return slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
}

// version is set at build time (-ldflags "-X main.version=…").
var version = "dev"

// maxResultFlag adds --max-result-bytes; its result, called after
// parsing, gives the bound (or a usage error).
func maxResultFlag(fs *flag.FlagSet) func() (int, error) {
	n := fs.Int("max-result-bytes", domain.DefaultMaxResultBytes,
		fmt.Sprintf("the largest result a run may record, in bytes (at most %d): a larger one fails the run (in-process runners) or is refused with 413 (remote workers' reports)", domain.MaxResultBytesLimit))
	return func() (int, error) {
		if *n < 1 || *n > domain.MaxResultBytesLimit {
			return 0, usageError{fmt.Errorf("--max-result-bytes must be 1..%d", domain.MaxResultBytesLimit)}
		}
		return *n, nil
	}
}

// runnerFlags adds the flags that choose the built-in runners a process
// offers; its result, called after parsing, gives the runner.Config (or a
// usage error).
func runnerFlags(fs *flag.FlagSet) func() (runner.Config, error) {
	enabled := fs.String("runners", strings.Join(runner.DefaultEnabled, ","),
		"the built-in runners this process offers, comma-separated (core.shell and core.http are off unless named here: see docs/runner-security.md)")
	shellUser := fs.String("shell-user", "", "run core.shell's processes as this user (name or uid); required when the process is root and core.shell is on")
	allowRoot := fs.Bool("shell-allow-root", false, "let core.shell run its processes as root when the process is root and --shell-user is empty (not recommended)")
	return func() (runner.Config, error) {
		names, err := runner.ParseEnabled(*enabled)
		if err != nil {
			return runner.Config{}, usageError{fmt.Errorf("--runners: %w", err)}
		}
		cfg := runner.Config{Enabled: names, ShellUser: *shellUser, ShellAllowRoot: *allowRoot}
		if err := cfg.Validate(); err != nil {
			return runner.Config{}, usageError{err}
		}
		return cfg, nil
	}
}
