package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// The client commands (actions, exec, watch) talk to a turnstile server over
// its HTTP API. Their exit codes:
const (
	exitOK       = 0 // done
	exitNegative = 1 // a negative finding: the execution failed, timed out, was cancelled or rejected; a 409 conflict
	exitUsage    = 2 // bad usage, or a request the server refused as invalid (400, 413)
	exitFailure  = 3 // the server could not be reached or failed, a token was refused, a wait gave up
	exitNotFound = 4 // no such action, execution or stream (404)
)

const clientUsage = `
Client commands (flags anywhere after the command; every one takes
--server URL (default $TURNSTILE_SERVER or http://127.0.0.1:8080),
--token SECRET (default $TURNSTILE_TOKEN) and --json):
  turnstile actions create --ref REF --runner RUNNER [policy flags] | --file policy.json
  turnstile actions get REF | list | pause REF [--reason R] | resume REF
  turnstile actions policy REF [policy flags] [--file policy.json]
      policy flags: --max-concurrent N --max-queue-length N --queue-timeout D --timeout D
      --scheduled-timeout D --max-attempts N --rate-limit N/SECONDS --concurrency-key FIELD
      --on-limit queue|reject (D: seconds, or a duration such as 90s or 5m)
  turnstile exec request ACTION [--input JSON] [--with-items JSON [--concurrency N]] [--idempotency-key K] [--wait [--timeout D]]
  turnstile exec get ID [--as-of POSITION|TIME] | cancel ID [--reason R] | events ID [--from V] [--limit N] | explain ID
  turnstile exec list [--action REF] [--status S] [--parent ID] [--limit N] [--after ID]
  turnstile exec wait ID [--timeout D]
  turnstile watch queue-stats|executions|events [--action REF] [--from POSITION] [--count N]
Exit codes: 0 ok, 1 a failed/timed_out/cancelled/rejected execution or a conflict (409),
2 usage or an invalid request (400), 3 operational failure, 4 not found (404).
`

// clientRequestTimeout bounds every request but the feeds.
const clientRequestTimeout = time.Minute

// client is a connection to a turnstile server and where its output goes.
type client struct {
	server string // base URL, no trailing slash
	token  string
	asJSON bool
	http   *http.Client
	stdout io.Writer
	stderr io.Writer
}

// apiError is a server's answer other than 2xx: its problem's detail.
type apiError struct {
	Status int
	Detail string
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (%d)", e.Detail, e.Status) }

// findingError is a negative finding whose details are already printed.
type findingError struct{ msg string }

func (e findingError) Error() string { return e.msg }

// exitCode prints err (if any) and returns the exit code it stands for.
func exitCode(err error, cmd string, stderr io.Writer) int {
	var (
		ae *apiError
		ue usageError
		fe findingError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &fe):
		fmt.Fprintf(stderr, "turnstile: %s\n", fe.msg)
		return exitNegative
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "turnstile %s: %v\n", cmd, err)
		return exitUsage
	case errors.As(err, &ae):
		fmt.Fprintf(stderr, "turnstile: %s\n", ae)
		switch ae.Status {
		case http.StatusNotFound:
			return exitNotFound
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
			return exitUsage
		case http.StatusConflict:
			return exitNegative
		}
		return exitFailure
	default:
		fmt.Fprintf(stderr, "turnstile: %v\n", err)
		return exitFailure
	}
}

// subcommand is one client command: its positional arguments, and a
// function that declares its flags and returns what runs it.
type subcommand struct {
	args  []string // names of the positional arguments
	flags func(fs *flag.FlagSet) runFunc
}

// runFunc runs a client command with its positional arguments.
type runFunc func(ctx context.Context, c *client, pos []string) error

// runClient runs "turnstile GROUP NAME …" from a group's subcommands.
func runClient(ctx context.Context, group string, cmds map[string]subcommand, args []string, stdout, stderr io.Writer) int {
	names := make([]string, 0, len(cmds))
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(args) > 0 && (args[0] == "help" || args[0] == "-h" || args[0] == "--help") {
		fmt.Fprintf(stdout, "usage: turnstile %s %s …\n%s", group, strings.Join(names, "|"), clientUsage)
		return exitOK
	}
	if len(args) == 0 || cmds[args[0]].flags == nil {
		if len(args) > 0 {
			fmt.Fprintf(stderr, "turnstile %s: unknown command %q\n", group, args[0])
		}
		fmt.Fprintf(stderr, "usage: turnstile %s %s …\n%s", group, strings.Join(names, "|"), clientUsage)
		return exitUsage
	}
	name := group + " " + args[0]
	sc := cmds[args[0]]
	fs := newFlags(name, stderr)
	server := fs.String("server", envOr("TURNSTILE_SERVER", "http://127.0.0.1:8080"), "the server's base URL")
	token := fs.String("token", "", "bearer token (default $TURNSTILE_TOKEN; not shown here)")
	asJSON := fs.Bool("json", false, "print the server's JSON")
	run := sc.flags(fs)
	pos, err := parseInterspersed(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err == nil && len(pos) != len(sc.args) {
		err = usageError{fmt.Errorf("usage: turnstile %s %s (got %d arguments)", name, strings.Join(sc.args, " "), len(pos))}
	}
	if err == nil {
		err = checkServerURL(*server)
	}
	if err != nil {
		return exitCode(err, name, stderr)
	}
	if *token == "" {
		*token = os.Getenv("TURNSTILE_TOKEN")
	}
	c := &client{server: strings.TrimRight(*server, "/"), token: *token, asJSON: *asJSON, http: &http.Client{}, stdout: stdout, stderr: stderr}
	return exitCode(run(ctx, c, pos), name, stderr)
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func checkServerURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{fmt.Errorf("--server %q must be an http:// or https:// URL", s)}
	}
	return nil
}

// parseInterspersed parses flags that may come before, between or after the
// positional arguments (until "--"), and returns the positional ones.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
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

// ---- HTTP ----

// do sends a request (body, if not nil, as JSON) and returns the body of a
// 2xx answer; any other answer is an *apiError.
func (c *client) do(ctx context.Context, method, path string, query url.Values, body any, header http.Header) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, clientRequestTimeout)
	defer cancel()
	resp, err := c.send(ctx, method, path, query, body, header)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the answer to %s %s: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return nil, problemOf(resp.StatusCode, data)
	}
	return data, nil
}

// send sends a request (body, if not nil, as JSON) with the token.
func (c *client) send(ctx context.Context, method, path string, query url.Values, body any, header http.Header) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	u := c.server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return c.http.Do(req) // its errors name the method and URL
}

// problemOf reads a non-2xx answer: its problem's detail, or what the body says.
func problemOf(status int, body []byte) *apiError {
	var p struct{ Title, Detail string }
	if json.Unmarshal(body, &p) == nil && (p.Detail != "" || p.Title != "") {
		if p.Detail == "" {
			p.Detail = p.Title
		}
		return &apiError{Status: status, Detail: p.Detail}
	}
	detail, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
	if detail == "" {
		detail = http.StatusText(status)
	}
	return &apiError{Status: status, Detail: detail}
}

// getJSON GETs path and decodes the answer into v (and returns it raw).
func (c *client) getJSON(ctx context.Context, path string, query url.Values, v any) ([]byte, error) {
	data, err := c.do(ctx, "GET", path, query, nil, nil)
	if err != nil {
		return nil, err
	}
	return data, json.Unmarshal(data, v)
}

// output prints the server's JSON with --json, else calls human.
func (c *client) output(raw []byte, human func(w io.Writer)) {
	if c.asJSON {
		fmt.Fprintf(c.stdout, "%s\n", bytes.TrimRight(raw, "\n"))
		return
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	human(tw)
	tw.Flush()
}

func esc(s string) string { return url.PathEscape(s) }

// ---- actions ----

var actionsCommands = map[string]subcommand{
	"list": {nil, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *client, _ []string) error {
			var out struct{ Actions []projections.ActionView }
			raw, err := c.getJSON(ctx, "/api/v1/actions", nil, &out)
			if err != nil {
				return err
			}
			c.output(raw, func(w io.Writer) {
				fmt.Fprintln(w, "REF\tRUNNER\tMAX_CONCURRENT\tMAX_QUEUE\tTIMEOUT\tATTEMPTS\tON_LIMIT\tPAUSED")
				for _, a := range out.Actions {
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%gs\t%d\t%s\t%v\n", a.Ref, a.Runner, a.MaxConcurrent, a.MaxQueueLength,
						a.TimeoutSeconds, a.MaxAttempts, a.OnLimit, a.Paused)
				}
			})
			return nil
		}
	}},
	"get": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *client, pos []string) error {
			return c.showAction(ctx, "GET", "/api/v1/actions/"+esc(pos[0]), nil)
		}
	}},
	"create": {nil, func(fs *flag.FlagSet) runFunc {
		pf := addPolicyFlags(fs, true)
		return func(ctx context.Context, c *client, _ []string) error {
			p, err := pf.policy(fs, domain.Policy{})
			if err != nil {
				return err
			}
			if p.Ref == "" || p.Runner == "" {
				return usageError{errors.New("an action needs --ref and --runner (or a --file that has them)")}
			}
			return c.showAction(ctx, "POST", "/api/v1/actions", p)
		}
	}},
	"policy": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		pf := addPolicyFlags(fs, false)
		return func(ctx context.Context, c *client, pos []string) error {
			path := "/api/v1/actions/" + esc(pos[0])
			// The server replaces the whole policy: start from the current
			// one (or the file), so that flags change only what they name.
			var current projections.ActionView
			if pf.file == "" {
				if _, err := c.getJSON(ctx, path, nil, &current); err != nil {
					return err
				}
			}
			p, err := pf.policy(fs, current.Policy)
			if err != nil {
				return err
			}
			p.Ref = pos[0]
			return c.showAction(ctx, "PUT", path+"/policy", p)
		}
	}},
	"pause": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why (recorded in the log)")
		return func(ctx context.Context, c *client, pos []string) error {
			return c.showAction(ctx, "POST", "/api/v1/actions/"+esc(pos[0])+"/pause", map[string]string{"reason": *reason})
		}
	}},
	"resume": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *client, pos []string) error {
			return c.showAction(ctx, "POST", "/api/v1/actions/"+esc(pos[0])+"/resume", nil)
		}
	}},
}

// showAction sends a request whose answer is an action, and prints it.
func (c *client) showAction(ctx context.Context, method, path string, body any) error {
	raw, err := c.do(ctx, method, path, nil, body, nil)
	if err != nil {
		return err
	}
	var a projections.ActionView
	if err := json.Unmarshal(raw, &a); err != nil {
		return fmt.Errorf("the server's answer is not an action: %w", err)
	}
	c.output(raw, func(w io.Writer) {
		fmt.Fprintf(w, "ref:\t%s\nrunner:\t%s\npaused:\t%v\nmax_concurrent:\t%d\nmax_queue_length:\t%d\n", a.Ref, a.Runner, a.Paused, a.MaxConcurrent, a.MaxQueueLength)
		fmt.Fprintf(w, "queue_timeout:\t%gs\ntimeout:\t%gs\nscheduled_timeout:\t%gs\nmax_attempts:\t%d\n", a.QueueTimeoutSeconds, a.TimeoutSeconds, a.ScheduledTimeoutSeconds, a.MaxAttempts)
		if a.RateLimit != nil {
			fmt.Fprintf(w, "rate_limit:\t%d per %gs\n", a.RateLimit.Count, a.RateLimit.PerSeconds)
		}
		if a.ConcurrencyKey != "" {
			fmt.Fprintf(w, "concurrency_key:\t%s\n", a.ConcurrencyKey)
		}
		fmt.Fprintf(w, "on_limit:\t%s\nversion:\t%d\n", a.OnLimit, a.Version)
	})
	return nil
}

// policyFlags are the flags of a policy's fields.
type policyFlags struct {
	file                                   string
	ref, runner, key, onLimit              string
	maxConcurrent, maxQueue, maxAttempts   int
	queueTimeout, timeout, scheduledTimout seconds
	rateLimit                              rateLimit
}

func addPolicyFlags(fs *flag.FlagSet, withRef bool) *policyFlags {
	pf := &policyFlags{}
	fs.StringVar(&pf.file, "file", "", "a JSON policy (API.md's fields); flags override its fields")
	if withRef {
		fs.StringVar(&pf.ref, "ref", "", "the action's ref, e.g. demo.sleep")
	}
	fs.StringVar(&pf.runner, "runner", "", "the runner, e.g. core.sleep")
	fs.IntVar(&pf.maxConcurrent, "max-concurrent", 0, "executions running at once, at most")
	fs.IntVar(&pf.maxQueue, "max-queue-length", 0, "waiting requests, at most (more are rejected)")
	fs.Var(&pf.queueTimeout, "queue-timeout", "cancel a request that waited this long for a slot (0: never)")
	fs.Var(&pf.timeout, "timeout", "an execution's time limit")
	fs.Var(&pf.scheduledTimout, "scheduled-timeout", "how long a handoff may wait for the worker to start it")
	fs.IntVar(&pf.maxAttempts, "max-attempts", 0, "handoffs, at most")
	fs.Var(&pf.rateLimit, "rate-limit", "N/SECONDS: at most N grants per SECONDS")
	fs.StringVar(&pf.key, "concurrency-key", "", "a top-level input field: one queue and one limit per value")
	fs.StringVar(&pf.onLimit, "on-limit", "", "queue or reject")
	return pf
}

// policy returns base (or the --file's policy, if given) with the fields of
// the flags that were set replaced.
func (pf *policyFlags) policy(fs *flag.FlagSet, base domain.Policy) (domain.Policy, error) {
	p := base
	if pf.file != "" {
		data, err := os.ReadFile(pf.file)
		if err != nil {
			return p, usageError{err}
		}
		p = domain.Policy{}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			return p, usageError{fmt.Errorf("%s: %w", pf.file, err)}
		}
	}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "ref":
			p.Ref = pf.ref
		case "runner":
			p.Runner = pf.runner
		case "max-concurrent":
			p.MaxConcurrent = pf.maxConcurrent
		case "max-queue-length":
			p.MaxQueueLength = pf.maxQueue
		case "queue-timeout":
			p.QueueTimeoutSeconds = float64(pf.queueTimeout)
		case "timeout":
			p.TimeoutSeconds = float64(pf.timeout)
		case "scheduled-timeout":
			p.ScheduledTimeoutSeconds = float64(pf.scheduledTimout)
		case "max-attempts":
			p.MaxAttempts = pf.maxAttempts
		case "rate-limit":
			rl := domain.RateLimit(pf.rateLimit)
			p.RateLimit = &rl
		case "concurrency-key":
			p.ConcurrencyKey = pf.key
		case "on-limit":
			p.OnLimit = pf.onLimit
		}
	})
	return p, nil
}

// seconds is a flag of a number of seconds ("90", "1.5") or a duration ("90s", "5m").
type seconds float64

func (s *seconds) String() string { return strconv.FormatFloat(float64(*s), 'g', -1, 64) }

func (s *seconds) Set(v string) error {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		*s = seconds(f)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("want seconds (90) or a duration (90s, 5m)")
	}
	*s = seconds(d.Seconds())
	return nil
}

// rateLimit is a flag of the form N/SECONDS.
type rateLimit domain.RateLimit

func (r *rateLimit) String() string { return fmt.Sprintf("%d/%g", r.Count, r.PerSeconds) }

func (r *rateLimit) Set(v string) error {
	n, per, ok := strings.Cut(v, "/")
	count, err1 := strconv.Atoi(n)
	secs, err2 := strconv.ParseFloat(per, 64)
	if !ok || err1 != nil || err2 != nil {
		return errors.New("want N/SECONDS, e.g. 100/1")
	}
	*r = rateLimit{Count: count, PerSeconds: secs}
	return nil
}

// ---- executions ----

var execCommands = map[string]subcommand{
	"request": {[]string{"ACTION"}, func(fs *flag.FlagSet) runFunc {
		input := fs.String("input", "", "the input: a JSON object")
		items := fs.String("with-items", "", "a JSON array: one child execution per item, in item order (an object item is merged over --input)")
		window := fs.Int("concurrency", 0, "with --with-items: at most this many children in flight at once (0: all)")
		key := fs.String("idempotency-key", "", "makes a retry of this request safe: the same key answers the same execution")
		wait := fs.Bool("wait", false, "wait for the end; the exit code says how it ended")
		timeout := fs.Duration("timeout", 0, "with --wait: give up after this long (0: never)")
		return func(ctx context.Context, c *client, pos []string) error {
			body := struct {
				Action      string          `json:"action"`
				Input       json.RawMessage `json:"input,omitempty"`
				WithItems   json.RawMessage `json:"with_items,omitempty"`
				Concurrency int             `json:"concurrency,omitempty"`
			}{Action: pos[0], Concurrency: *window}
			if *input != "" {
				if !json.Valid([]byte(*input)) || !strings.HasPrefix(strings.TrimSpace(*input), "{") {
					return usageError{fmt.Errorf("--input %q is not a JSON object", clipArg(*input))}
				}
				body.Input = json.RawMessage(*input)
			}
			switch {
			case *items != "" && (!json.Valid([]byte(*items)) || !strings.HasPrefix(strings.TrimSpace(*items), "[")):
				return usageError{fmt.Errorf("--with-items %q is not a JSON array", clipArg(*items))}
			case *items == "" && *window != 0:
				return usageError{errors.New("--concurrency needs --with-items")}
			case *window < 0:
				return usageError{fmt.Errorf("--concurrency %d is negative", *window)}
			case *items != "":
				body.WithItems = json.RawMessage(*items)
			}
			var header http.Header
			if *key != "" {
				header = http.Header{"Idempotency-Key": {*key}}
			}
			raw, err := c.do(ctx, "POST", "/api/v1/executions", nil, body, header)
			if err != nil {
				return err
			}
			var acc struct{ ID, Status string }
			if err := json.Unmarshal(raw, &acc); err != nil || acc.ID == "" {
				return fmt.Errorf("the server's answer names no execution: %q", raw)
			}
			if !*wait {
				c.output(raw, func(w io.Writer) { fmt.Fprintln(w, acc.ID) })
				return nil
			}
			if !c.asJSON {
				fmt.Fprintln(c.stdout, acc.ID)
			}
			return c.wait(ctx, acc.ID, *timeout)
		}
	}},
	"get": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		asOf := fs.String("as-of", "", "the state as of a log position or an RFC 3339 time")
		return func(ctx context.Context, c *client, pos []string) error {
			var q url.Values
			if *asOf != "" {
				q = url.Values{"as_of": {*asOf}}
			}
			var v projections.ExecutionView
			raw, err := c.getJSON(ctx, "/api/v1/executions/"+esc(pos[0]), q, &v)
			if err != nil {
				return err
			}
			c.output(raw, func(w io.Writer) { printExecution(w, v) })
			return nil
		}
	}},
	"list": {nil, func(fs *flag.FlagSet) runFunc {
		q := queryFlags(fs, "action", "only this action's executions", "status", "only executions in this state",
			"parent", "only this with_items parent's children", "limit", "page size (1..1000; default 100)",
			"after", "the next page after this id (printed at the end of a full page)")
		return func(ctx context.Context, c *client, _ []string) error {
			var out struct {
				Executions []projections.ExecutionView
				Next       string
			}
			raw, err := c.getJSON(ctx, "/api/v1/executions", q(), &out)
			if err != nil {
				return err
			}
			c.output(raw, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tACTION\tSTATUS\tATTEMPT\tWORKER\tREQUESTED\tENDED")
				for _, x := range out.Executions {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", x.ID, x.Action, x.Status, x.Attempt, dash(x.Worker), stamp(x.RequestedAt), stamp(x.EndedAt))
				}
			})
			if out.Next != "" && !c.asJSON {
				fmt.Fprintf(c.stderr, "more: --after %s\n", out.Next)
			}
			return nil
		}
	}},
	"cancel": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why (recorded in the log)")
		return func(ctx context.Context, c *client, pos []string) error {
			var body any
			if *reason != "" {
				body = map[string]string{"reason": *reason}
			}
			raw, err := c.do(ctx, "POST", "/api/v1/executions/"+esc(pos[0])+"/cancel", nil, body, nil)
			if err != nil {
				return err
			}
			var acc struct{ ID, Status string }
			_ = json.Unmarshal(raw, &acc)
			c.output(raw, func(w io.Writer) { fmt.Fprintf(w, "cancellation requested: %s (now %s)\n", acc.ID, acc.Status) })
			return nil
		}
	}},
	"wait": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		timeout := fs.Duration("timeout", 0, "give up after this long (0: never)")
		return func(ctx context.Context, c *client, pos []string) error {
			return c.wait(ctx, pos[0], *timeout)
		}
	}},
	"events": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		q := queryFlags(fs, "from", "the stream version to start at", "limit", "page size (1..1000; default 100)")
		return func(ctx context.Context, c *client, pos []string) error {
			var page struct {
				Events []domain.Envelope
				Next   uint64
			}
			query := q()
			raw, err := c.getJSON(ctx, "/api/v1/executions/"+esc(pos[0])+"/events", query, &page)
			if err != nil {
				return err
			}
			c.output(raw, func(w io.Writer) {
				fmt.Fprintln(w, "VERSION\tPOSITION\tTIME\tTYPE\tOWNER\tWRITER")
				for _, e := range page.Events {
					fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\n", e.Version, e.Position, stamp(&e.Time), e.Type, e.Owner, dash(e.Writer))
				}
			})
			limit, _ := strconv.Atoi(query.Get("limit"))
			if limit == 0 {
				limit = 100
			}
			if len(page.Events) == limit && !c.asJSON {
				fmt.Fprintf(c.stderr, "more: --from %d\n", page.Next)
			}
			return nil
		}
	}},
}

// queryFlags declares string flags (name, usage pairs) that become query
// parameters of the same names (with - for _), and returns what reads them.
func queryFlags(fs *flag.FlagSet, namesAndUsages ...string) func() url.Values {
	vals := map[string]*string{}
	for i := 0; i+1 < len(namesAndUsages); i += 2 {
		name := namesAndUsages[i]
		vals[strings.ReplaceAll(name, "-", "_")] = fs.String(name, "", namesAndUsages[i+1])
	}
	return func() url.Values {
		q := url.Values{}
		for k, v := range vals {
			if *v != "" {
				q.Set(k, *v)
			}
		}
		return q
	}
}

// wait waits for execution id to end and prints its final state. A
// completed execution is success; any other end is a findingError.
func (c *client) wait(ctx context.Context, id string, timeout time.Duration) error {
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	var v projections.ExecutionView
	raw, err := c.getJSON(ctx, "/api/v1/executions/"+esc(id), nil, &v)
	if err == nil && !v.Status.Terminal() {
		// The executions feed, resumed after the state just read, sends
		// every later state of the action's executions.
		err = c.follow(ctx, "/api/v1/feeds/executions", url.Values{"action": {v.Action}}, strconv.FormatUint(v.Position, 10),
			func(ev sseEvent) (bool, error) {
				var x projections.ExecutionView
				if err := json.Unmarshal(ev.Data, &x); err != nil {
					return false, fmt.Errorf("executions feed: %w", err)
				}
				if x.ID == id && x.Status.Terminal() {
					v, raw = x, ev.Data
					return true, nil
				}
				return false, nil
			})
	}
	switch {
	case err != nil && ctx.Err() != nil && parent.Err() == nil && v.ID != "":
		return fmt.Errorf("execution %s is still %s after %s: gave up waiting", id, v.Status, timeout)
	case err != nil && ctx.Err() != nil && parent.Err() == nil:
		return fmt.Errorf("execution %s: no answer from the server within %s: gave up waiting", id, timeout)
	case err != nil:
		return err
	}
	c.output(raw, func(w io.Writer) { printExecution(w, v) })
	if v.Status != domain.StatusCompleted {
		return findingError{fmt.Sprintf("execution %s %s", id, v.Status)}
	}
	return nil
}

func printExecution(w io.Writer, x projections.ExecutionView) {
	fmt.Fprintf(w, "id:\t%s\naction:\t%s\nstatus:\t%s\nattempt:\t%d\n", x.ID, x.Action, x.Status, x.Attempt)
	for _, kv := range [][2]string{{"concurrency_key", x.ConcurrencyKey}, {"parent", x.Parent}, {"worker", x.Worker}} {
		if kv[1] != "" {
			fmt.Fprintf(w, "%s:\t%s\n", kv[0], kv[1])
		}
	}
	if x.CancelAsked {
		fmt.Fprintln(w, "cancel_requested:\ttrue")
	}
	for _, kv := range []struct {
		name string
		t    *time.Time
	}{{"requested_at", x.RequestedAt}, {"scheduling_at", x.SchedulingAt}, {"scheduled_at", x.ScheduledAt}, {"running_at", x.RunningAt}, {"ended_at", x.EndedAt}} {
		if kv.t != nil {
			fmt.Fprintf(w, "%s:\t%s\n", kv.name, stamp(kv.t))
		}
	}
	if len(x.Input) > 0 {
		fmt.Fprintf(w, "input:\t%s\n", x.Input)
	}
	if len(x.Result) > 0 {
		fmt.Fprintf(w, "result:\t%s\n", x.Result)
	}
	if x.Error != "" {
		fmt.Fprintf(w, "error:\t%s\n", x.Error)
	}
	if len(x.Children) > 0 {
		fmt.Fprintf(w, "children:\t%s\n", strings.Join(x.Children, " "))
	}
	fmt.Fprintf(w, "position:\t%d\n", x.Position)
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

// ---- watch: Server-Sent Events ----

// watchFeeds maps a watch command to its feed and a one-line rendering of a message.
var watchFeeds = map[string]struct {
	path string
	line func(data []byte) (string, error)
}{
	"queue-stats": {"/api/v1/feeds/queue-stats", func(data []byte) (string, error) {
		var s projections.QueueStats
		err := json.Unmarshal(data, &s)
		paused := ""
		if s.Paused {
			paused = " paused"
		}
		return fmt.Sprintf("%d %s queue=%d active=%d/%d enqueued=%d completed=%d failed=%d timed_out=%d rejected=%d cancelled=%d wait_p95=%gms%s",
			s.Position, s.Action, s.QueueLength, s.ActiveCount, s.MaxConcurrent, s.TotalEnqueued, s.TotalCompleted, s.TotalFailed,
			s.TotalTimedOut, s.TotalRejected, s.TotalCancelled, s.WaitP95Ms, paused), err
	}},
	"executions": {"/api/v1/feeds/executions", func(data []byte) (string, error) {
		var x projections.ExecutionView
		err := json.Unmarshal(data, &x)
		line := fmt.Sprintf("%d %s %s %s attempt=%d", x.Position, x.ID, x.Action, x.Status, x.Attempt)
		if x.Worker != "" {
			line += " worker=" + x.Worker
		}
		if x.Error != "" {
			line += fmt.Sprintf(" error=%q", x.Error)
		}
		return line, err
	}},
	"events": {"/api/v1/feeds/events", func(data []byte) (string, error) {
		var e domain.Envelope
		err := json.Unmarshal(data, &e)
		return fmt.Sprintf("%d %s %s v%d %s %s", e.Position, stamp(&e.Time), e.Stream, e.Version, e.Type, e.Owner), err
	}},
}

var watchCommands = func() map[string]subcommand {
	cmds := map[string]subcommand{}
	for name, feed := range watchFeeds {
		cmds[name] = subcommand{nil, func(fs *flag.FlagSet) runFunc {
			q := queryFlags(fs, "action", "only what belongs to this action", "from", "start at this log position (default: now)")
			count := fs.Int("count", 0, "stop after this many messages (0: run until interrupted)")
			return func(ctx context.Context, c *client, _ []string) error {
				n := 0
				err := c.follow(ctx, feed.path, q(), "", func(ev sseEvent) (bool, error) {
					if c.asJSON {
						fmt.Fprintf(c.stdout, "%s\n", ev.Data)
					} else {
						line, err := feed.line(ev.Data)
						if err != nil {
							return false, fmt.Errorf("%s feed: message %s: %w", name, ev.ID, err)
						}
						fmt.Fprintln(c.stdout, line)
					}
					n++
					return *count > 0 && n >= *count, nil
				})
				if errors.Is(err, context.Canceled) && ctx.Err() != nil {
					return nil // interrupted: the normal end of a watch
				}
				return err
			}
		}}
	}
	return cmds
}()

// sseEvent is one Server-Sent Events message.
type sseEvent struct {
	ID, Event string
	Data      []byte
}

// maxReconnects bounds the reconnection attempts, in a row without a
// message, of a feed that was connected once.
const maxReconnects = 10

// follow reads a feed, calling fn for each message until fn says stop, fn
// fails, or ctx ends (then it returns ctx's error). A dropped connection is
// resumed after the last message's id (Last-Event-ID), after the delay the
// server asked for; lastID, if not empty, is where the first connection
// resumes.
func (c *client) follow(ctx context.Context, path string, query url.Values, lastID string, fn func(sseEvent) (stop bool, err error)) error {
	retry := 2 * time.Second
	connected, failures := false, 0
	for {
		header := http.Header{"Accept": {"text/event-stream"}}
		if lastID != "" {
			header.Set("Last-Event-ID", lastID)
		}
		resp, err := c.send(ctx, "GET", path, query, nil, header)
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err == nil && resp.StatusCode != http.StatusOK:
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if !connected || resp.StatusCode < 500 {
				return problemOf(resp.StatusCode, data)
			}
			err = problemOf(resp.StatusCode, data)
		}
		if err == nil {
			connected = true
			var stop bool
			stop, err = readSSE(resp.Body, &retry, func(ev sseEvent) (bool, error) {
				if ev.ID != "" {
					lastID = ev.ID
				}
				failures = 0 // the feed works again
				return fn(ev)
			})
			resp.Body.Close()
			if stop || (err != nil && !errors.Is(err, errDropped)) {
				return err
			}
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !connected {
			return err // never connected: the server is not there
		}
		if failures++; failures > maxReconnects {
			return fmt.Errorf("feed %s: gave up after %d reconnection attempts: %w", path, maxReconnects, err)
		}
		fmt.Fprintf(c.stderr, "turnstile: feed %s: %v; reconnecting after id %s\n", path, err, dash(lastID))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(retry):
		}
	}
}

// errDropped is how readSSE reports the end of a feed's connection.
var errDropped = errors.New("the connection ended")

// readSSE reads messages from r (the text/event-stream format) and hands
// each to fn until fn says stop or fails, or the stream ends (errDropped,
// wrapping the read error if any). A retry field sets *retry.
func readSSE(r io.Reader, retry *time.Duration, fn func(sseEvent) (bool, error)) (bool, error) {
	br := bufio.NewReader(r)
	var ev sseEvent
	var data bytes.Buffer
	hasData := false
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return false, errDropped
			}
			return false, fmt.Errorf("%w: %w", errDropped, err)
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 { // the end of a message
			if hasData {
				ev.Data = bytes.Clone(data.Bytes())
				if stop, err := fn(ev); stop || err != nil {
					return stop, err
				}
			}
			ev, hasData = sseEvent{ID: ev.ID}, false
			data.Reset()
			continue
		}
		if line[0] == ':' {
			continue // a comment: the heartbeat
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			ev.ID = string(value)
		case "event":
			ev.Event = string(value)
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.Write(value)
			hasData = true
		case "retry":
			if ms, err := strconv.Atoi(string(value)); err == nil && ms >= 0 {
				*retry = time.Duration(ms) * time.Millisecond
			}
		}
	}
}
