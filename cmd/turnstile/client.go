package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/internal/jsontext"
)

// The client commands (actions, exec, watch) talk to a turnstile server
// over its HTTP API, through package client. Their exit codes (every
// command's are listed in exitCodesHelp):
const (
	exitOK       = 0 // done
	exitNegative = 1 // a negative finding: the execution failed, timed out, was cancelled or rejected; a 409 conflict
	exitUsage    = 2 // bad usage, or a request the server refused as invalid (400, 413)
	exitFailure  = 3 // the server could not be reached or failed, a token was refused, a wait gave up
	exitNotFound = 4 // no such action, execution or stream (404)
	exitRefused  = 5 // refused for now (429): the action's queue is full, its rate limit or on_limit "reject" refused; retry later
)

// exitCodesHelp documents every exit code of every command (turnstile
// --help, docs/cli.md).
const exitCodesHelp = `Exit codes:
  0  success
  1  a negative finding: audit or rebuild found a violation or a difference, verify a log
     that does not match its chain; an execution
     failed, timed out, was cancelled or rejected (exec wait, exec request --wait); a
     conflict (409: an action defined differently, an execution already ended, an
     idempotency key reused with another body)
  2  bad usage (unknown command or flag, a malformed value), or a request the server
     refused as invalid (400, 413)
  3  an operational failure: the server or the store could not be reached or failed (5xx),
     a token was refused (401, 403), a wait gave up (--timeout)
  4  not found (404): no such action, execution or stream
  5  refused for now (429): the action's queue is full, its rate limit refused the request,
     or on_limit "reject" found no free slot; the request may succeed later
`

// groupUsage is the usage of each group of client commands.
var groupUsage = map[string]string{
	"actions": `Define, read, pause and resume actions, and change their policies.

  turnstile actions create --ref REF --runner RUNNER [policy flags] | --file policy.json
  turnstile actions get REF
  turnstile actions list
  turnstile actions pause REF [--reason R]
  turnstile actions resume REF
  turnstile actions policy REF [policy flags] [--file policy.json]
      policy flags: --max-concurrent N --max-queue-length N --queue-timeout D --timeout D
      --scheduled-timeout D --max-attempts N --rate-limit N/SECONDS --concurrency-key FIELD
      --on-limit queue|reject (D: seconds, or a duration such as 90s or 5m)

Example:
  turnstile actions create --ref demo.sleep --runner core.sleep --max-concurrent 2
`,
	"exec": `Request executions, read them, wait for their end, cancel them.

  turnstile exec request ACTION [--input JSON] [--with-items JSON [--concurrency N]] [--idempotency-key K] [--wait [--timeout D]]
  turnstile exec get ID [--as-of POSITION|TIME]
  turnstile exec list [--action REF] [--status S] [--parent ID] [--limit N] [--after ID]
  turnstile exec cancel ID [--reason R]
  turnstile exec wait ID [--timeout D]
  turnstile exec events ID [--from VERSION] [--limit N]
  turnstile exec explain ID

Example:
  turnstile exec request demo.sleep --input '{"seconds":1}' --wait
`,
	"log": `Where the log stands: its head, the live log's first position, the archive's segments,
and the digest of its hash chain (GET /api/v1/log). Keep the digest somewhere the server
cannot rewrite: turnstile verify --digest POSITION:HASH proves later that nothing up to its
position changed.

  turnstile log status

Example:
  turnstile log status --json
`,
	"watch": `Follow a live feed until interrupted (or --count messages); a dropped connection is
resumed after the last message received, without a gap or a duplicate.

  turnstile watch queue-stats [--action REF] [--from POSITION] [--count N]
  turnstile watch executions  [--action REF] [--from POSITION] [--count N]
  turnstile watch events      [--action REF] [--from POSITION] [--count N]

Without --from, queue-stats and executions start with the current state (every action's
statistics; every execution that has not ended), then follow the changes. On a terminal
they draw a table with labelled columns, redrawn in place (at most 10 times a second);
piped, and for events, they print one line per message, every field labelled:

  position=42 action=demo.sleep queue=3 active=2 max=2 enqueued=9 completed=4 failed=0 ...

With --json, one JSON document per message, as the server wrote it.

Example:
  turnstile watch queue-stats                  # a live table on a terminal
  turnstile watch executions --action demo.sleep | grep status=failed
`,
}

// clientCommonHelp follows every group's usage.
const clientCommonHelp = `
Every command takes --server URL (default $TURNSTILE_SERVER or http://127.0.0.1:8080),
--token SECRET (default $TURNSTILE_TOKEN) and --json (print the server's JSON documents,
one per line); flags may come before or after the arguments. "turnstile %s COMMAND --help"
lists a command's flags.

`

// clientRequestTimeout bounds every request but the feeds and waits.
const clientRequestTimeout = time.Minute

// conn is a connection to a turnstile server and where the output goes.
type conn struct {
	api    *client.Client
	asJSON bool
	stdout io.Writer
	stderr io.Writer
}

// findingError is a negative finding whose details are already printed.
type findingError struct{ msg string }

func (e findingError) Error() string { return e.msg }

// exitCode prints err (if any) and returns the exit code it stands for.
func exitCode(err error, cmd string, stderr io.Writer) int {
	var (
		ue usageError
		fe findingError
	)
	p := client.AsProblem(err)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &fe):
		fmt.Fprintf(stderr, "turnstile: %s\n", fe.msg)
		return exitNegative
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "turnstile %s: %v\n", cmd, err)
		return exitUsage
	case p != nil:
		fmt.Fprintf(stderr, "turnstile: %s (%d)\n", p.Detail, p.Status)
		switch p.Status {
		case http.StatusNotFound:
			return exitNotFound
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return exitUsage
		case http.StatusConflict:
			return exitNegative
		case http.StatusTooManyRequests:
			if p.RetryAfter > 0 {
				fmt.Fprintf(stderr, "turnstile: the server says to retry after %s\n", p.RetryAfter)
			}
			return exitRefused
		}
		return exitFailure
	default:
		fmt.Fprintf(stderr, "turnstile: %v\n", err)
		return exitFailure
	}
}

// subcommand is one client command: its positional arguments and a
// function that declares its flags and returns what runs it. What it does
// and an example are its row of commands (help.go).
type subcommand struct {
	args  []string // names of the positional arguments
	flags func(fs *flag.FlagSet) runFunc
}

// runFunc runs a client command with its positional arguments.
type runFunc func(ctx context.Context, c *conn, pos []string) error

// runClient runs "turnstile GROUP NAME …" from a group's subcommands.
func runClient(ctx context.Context, group string, cmds map[string]subcommand, args []string, stdout, stderr io.Writer) int {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: turnstile %s %s …\n\n%s"+clientCommonHelp+"%s", group, strings.Join(names, "|"), groupUsage[group], group, exitCodesHelp)
	}
	if len(args) > 0 && isHelp(args[0]) {
		usage(stdout)
		return exitOK
	}
	if len(args) == 0 || cmds[args[0]].flags == nil {
		if len(args) > 0 {
			fmt.Fprintf(stderr, "turnstile %s: unknown command %q\n", group, args[0])
		}
		usage(stderr)
		return exitUsage
	}
	name := group + " " + args[0]
	sc := cmds[args[0]]
	fs := newFlags(name, stderr)
	fs.SetOutput(stdout) // --help prints here; errors go to stderr below
	server := envString(fs, "server", "TURNSTILE_SERVER", "http://127.0.0.1:8080", "the server's base URL")
	token := fs.String("token", "", "bearer token (default: $TURNSTILE_TOKEN)")
	asJSON := fs.Bool("json", false, "print the server's JSON documents, one per line")
	run := sc.flags(fs)
	fs.Usage = func() {
		synopsis := strings.TrimSpace("turnstile " + name + " " + strings.Join(sc.args, " "))
		h, _ := commandNamed(name)
		fmt.Fprintf(fs.Output(), "usage: %s [flags]\n\n%s\n\nFlags:\n", synopsis, h.what)
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nExample:\n  %s\n\n%s", h.example, exitCodesHelp)
	}
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil && len(pos) != len(sc.args) {
		err = usageError{fmt.Errorf("usage: turnstile %s %s (got %d arguments)", name, strings.Join(sc.args, " "), len(pos))}
	}
	if *token == "" {
		*token = os.Getenv("TURNSTILE_TOKEN")
	}
	var api *client.Client
	if err == nil {
		api, err = client.New(*server, client.WithToken(*token), client.WithUserAgent("turnstile-cli/"+buildVersion().Version))
		if err != nil {
			err = usageError{fmt.Errorf("--server %q must be an http:// or https:// URL", *server)}
		}
	}
	if err != nil {
		return exitCode(err, name, stderr)
	}
	c := &conn{api: api, asJSON: *asJSON, stdout: stdout, stderr: stderr}
	return exitCode(run(ctx, c, pos), name, stderr)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments (until "--"), and returns the positional ones. A
// parse error is printed to stderr by the caller (exitCode), not here.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	out := fs.Output()
	for {
		fs.SetOutput(io.Discard) // the flag package's own messages: exitCode prints the error
		err := fs.Parse(args)
		fs.SetOutput(out)
		if err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.Usage()
				return nil, err
			}
			return nil, usageError{err}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// timed bounds one request's time.
func timed[T any](ctx context.Context, f func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, clientRequestTimeout)
	defer cancel()
	return f(ctx)
}

// output prints v as JSON (as the server wrote it: no HTML escaping) with
// --json, else calls human with a tabwriter.
func (c *conn) output(v any, human func(w io.Writer)) {
	if c.asJSON {
		printJSON(c.stdout, v)
		return
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	human(tw)
	tw.Flush()
}

// printJSON writes v as one line of JSON, without escaping <, > and &.
func printJSON(w io.Writer, v any) {
	_ = newJSONEncoder(w).Encode(v)
}

func stamp(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func clipArg(s string) string {
	if len(s) > 40 {
		return s[:40] + "…"
	}
	return s
}

// newJSONEncoder returns an encoder that writes JSON as it was written:
// no HTML escaping, neither its own nor that of the raw JSON the log keeps.
func newJSONEncoder(w io.Writer) *json.Encoder {
	enc := json.NewEncoder(unescapeWriter{w})
	enc.SetEscapeHTML(false)
	return enc
}

// unescapeWriter undoes the HTML escaping of each JSON document written to
// it (an Encoder writes one document per Write).
type unescapeWriter struct{ w io.Writer }

func (u unescapeWriter) Write(p []byte) (int, error) {
	if _, err := u.w.Write(jsontext.UnescapeHTML(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}
