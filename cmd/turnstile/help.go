package main

import (
	"flag"
	"fmt"
	"strings"
)

// cliCommand is one command of the binary. The one table of them, commands,
// is where every help comes from: turnstile --help (usage), each command's
// --help (flagUsage, runClient) and the command list of docs/cli.md
// (TestCLIDoc).
type cliCommand struct {
	name     string // as typed after turnstile: "serve", "bench lifecycle", "exec request"
	line     string // its lines in turnstile --help; "" when another row's line covers it
	synopsis string // its --help's usage line; client commands derive theirs from their arguments
	what     string // what it does, for its --help and docs/cli.md
	example  string // an example, for its --help
}

var commands = []cliCommand{
	{name: "serve",
		line:     "turnstile serve   [--addr 127.0.0.1:8080] [--data ./data] [--store URL] [--workers N] [--slots N] [--executor=false] [--token-file FILE] [--token ROLE:SECRET]...",
		synopsis: "turnstile serve [flags]",
		what:     "Everything in one process: the API, the executor and in-process workers, on the embedded store in --data by default.",
		example:  "turnstile serve --addr 127.0.0.1:9090 --data ./data --workers 4"},
	{name: "executor",
		line: `turnstile executor --store postgres://... [--name N] [--worker-lease 15s] [--health-addr ADDR]
    (one of any number: the one holding the lease decides, the others stand by)`,
		synopsis: "turnstile executor --store URL [flags]",
		what:     "The executor as a process of its own on a shared log (one of any number: the one holding the lease decides).",
		example:  "turnstile executor --store postgres://turnstile:secret@db/turnstile"},
	{name: "worker",
		line: `turnstile worker  --store postgres://... --id W [--slots 16] [--heartbeat 2s] [--grace 10s] [--health-addr ADDR]
turnstile worker  --server URL [--token T] --id W [--slots 16] [--grace 10s]
    (the built-in runners over HTTP: a token of role worker, no database credentials)`,
		synopsis: "turnstile worker [flags]",
		what:     "A worker as a process of its own.",
		example:  "turnstile worker --store postgres://turnstile:secret@db/turnstile --id w1 --slots 16"},
	{name: "migrate",
		line:     "turnstile migrate --store postgres://...   (apply the PostgreSQL store's and read model tables' migrations)",
		synopsis: "turnstile migrate --store URL",
		what:     "Apply the PostgreSQL store's and read model tables' migrations.",
		example:  "turnstile migrate --store postgres://turnstile:secret@db/turnstile"},
	{name: "healthcheck",
		line:     "turnstile healthcheck URL                  (GET URL, exit 0 on 2xx: for container health checks)",
		synopsis: "turnstile healthcheck [--timeout 3s] URL",
		what:     "GET a URL; exit 0 on a 2xx answer (a container health check without curl).",
		example:  "turnstile healthcheck http://127.0.0.1:8080/readyz"},
	{name: "audit",
		line:     "turnstile audit   (--data DIR | --store URL) [--json]",
		synopsis: "turnstile audit (--data DIR | --store URL) [--archive DIR] [--json]",
		what:     "Check the whole log: ownership and the handoff rule, FIFO grants, concurrency limits, no lost or duplicated execution. Exit 1 with a report on any violation. A live log the archiver trimmed is audited from a checkpoint (the report says which, and what it cannot judge) unless --archive makes it the whole history.",
		example:  "turnstile audit --data ./data --archive /srv/turnstile/archive"},
	{name: "verify",
		line:     "turnstile verify  (--data DIR | --store URL) [--digest POSITION:HASH]... [--json]   (check the log's hash chain)",
		synopsis: "turnstile verify (--data DIR | --store URL) [--archive DIR] [--digest POSITION:HASH]... [--json]",
		what:     "Check the log's hash chain: every event's hash covers the one before it, and each digest given (published earlier by GET /api/v1/log) is a prefix of today's log. Exit 1 naming the first position that does not match.",
		example:  "turnstile verify --data ./data --digest 41:3f5a…"},
	{name: "replay",
		line:     "turnstile replay  (--data DIR | --store URL) [--stream S] [--type T] [--from P] [--to P] [--as-of P|TIME] [--state] [--json]",
		synopsis: "turnstile replay (--data DIR | --store URL) [--archive DIR] [flags]",
		what:     "Print events of the log, or with --state the state they fold into, as of a point.",
		example:  "turnstile replay --data ./data --stream execution-0b9d6c1e-… --state"},
	{name: "rebuild",
		line: `turnstile rebuild (--data DIR | --store URL | --server URL [--token T])
turnstile rebuild --store postgres://... (--sql-views | --sql-views-reset)   (check or refold the SQL read model tables)`,
		synopsis: "turnstile rebuild (--data DIR | --store URL | --server URL [--token T])",
		what:     "Fold the log from position 0 and compare with the live read model (a server's, or offline). Exit 1 on any difference.",
		example:  "turnstile rebuild --server http://127.0.0.1:8080 --token $ADMIN_TOKEN"},
	{name: "bench lifecycle",
		line:     "turnstile bench lifecycle [--store URL] --executions N --actions A --max-concurrent C [--submitters S] [--json]",
		synopsis: "turnstile bench lifecycle [flags]",
		what:     "Drive executions of core.noop through the whole lifecycle and print the throughput and latencies.",
		example:  "turnstile bench lifecycle --executions 100000 --actions 100 --max-concurrent 10 --json"},
	{name: "bench waiting",
		synopsis: "turnstile bench waiting [flags]",
		what:     "Measure the executor with a large backlog of waiting executions.",
		example:  "turnstile bench waiting --json"},
	{name: "bench restart",
		synopsis: "turnstile bench restart --store URL --action REF --executions N",
		what:     "Measure how long a restart takes to be ready on a log of a given size.",
		example:  "turnstile bench restart --store embedded:///var/tmp/bench --action bench.a0 --executions 100000"},
	{name: "actions create",
		line:    "turnstile actions create|get|list|pause|resume|policy …",
		what:    "Define an action: its runner and its policy (201; the same definition again is fine; a different one is a conflict, exit 1).",
		example: "turnstile actions create --ref demo.sleep --runner core.sleep --max-concurrent 2 --timeout 1m"},
	{name: "actions get",
		what:    "Print an action's policy in force and whether it is paused.",
		example: "turnstile actions get demo.sleep"},
	{name: "actions list",
		what:    "List every action and its policy.",
		example: "turnstile actions list --server http://127.0.0.1:8080"},
	{name: "actions policy",
		what:    "Change an action's policy: the flags change only the fields they name; it applies from the next grant.",
		example: "turnstile actions policy demo.sleep --max-concurrent 5"},
	{name: "actions pause",
		what:    "Stop granting slots to the action's executions (running ones go on, requests still queue).",
		example: `turnstile actions pause demo.sleep --reason "database maintenance"`},
	{name: "actions resume",
		what:    "Start granting slots again.",
		example: "turnstile actions resume demo.sleep"},
	{name: "exec request",
		line:    "turnstile exec request|get|list|cancel|wait|events|explain …",
		what:    "Request an execution of ACTION and print its id; with --wait, wait for its end (exit 0 only if it completed).",
		example: `turnstile exec request demo.sleep --input '{"seconds":1}' --idempotency-key order-42 --wait --timeout 1m`},
	{name: "exec get",
		what:    "Print an execution's state, now or as of a log position or time.",
		example: "turnstile exec get 0b9d6c1e-… --as-of 2026-01-02T15:04:05Z"},
	{name: "exec list",
		what:    "List executions, newest first, one page at a time.",
		example: "turnstile exec list --action demo.sleep --status failed --limit 20"},
	{name: "exec cancel",
		what:    "Request an execution's cancellation.",
		example: `turnstile exec cancel 0b9d6c1e-… --reason "not needed"`},
	{name: "exec wait",
		what:    "Wait for an execution's end and print its final state (exit 0 only if it completed).",
		example: "turnstile exec wait 0b9d6c1e-… --timeout 5m"},
	{name: "exec explain",
		what:    "Say why an execution waits: its place in its queue, how many are ahead, and what it waits for.",
		example: "turnstile exec explain 0b9d6c1e-…"},
	{name: "exec events",
		what:    "Print an execution's events, in order: who did what, when (the audit trail).",
		example: "turnstile exec events 0b9d6c1e-… --from 2 --limit 10"},
	{name: "watch queue-stats",
		line:    "turnstile watch queue-stats|executions|events …",
		what:    "Follow every action's queue statistics, one labelled line per change.",
		example: "turnstile watch queue-stats --action demo.sleep --from 0 --count 10"},
	{name: "watch executions",
		what:    "Follow executions' states, one labelled line per change.",
		example: "turnstile watch executions --action demo.sleep --from 0 --count 10"},
	{name: "watch events",
		what:    "Follow the log's events, one line each, in position order.",
		example: "turnstile watch events --action demo.sleep --from 0 --count 10"},
	{name: "log status",
		line: `turnstile log status                       (the log's head, start, archive and digest, from GET /api/v1/log)
    a client of the HTTP API (--server URL --token SECRET --json); turnstile exec help has the rest`,
		what:    "Print where the log stands and the digest of its hash chain, for turnstile verify --digest.",
		example: "turnstile log status --server http://127.0.0.1:8080"},
	{name: "version",
		line:     "turnstile version [--json]                 (also --version: the module version, commit and Go version)",
		synopsis: "turnstile version [--json]",
		what:     "Print the version, the commit and the Go version this binary was built from.",
		example:  "turnstile version"},
	{name: "help",
		line: "turnstile help [COMMAND]                   (also COMMAND --help: its flags and an example)"},
}

// commandNamed returns the row of commands named name.
func commandNamed(name string) (cliCommand, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return cliCommand{}, false
}

// usageHead and usageTail frame the command lines of turnstile --help.
const (
	usageHead = `turnstile runs actions under per-action concurrency policies, event-sourced.

Usage:
`
	usageTail = `
Store URLs: embedded:///path/to/dir (also --data DIR); postgres://user:pass@host:5432/db (run
turnstile migrate first, or serve --migrate; TURNSTILE_PG_SCHEMA picks the schema);
kurrentdb://host:2113?tls=false (also esdb://; without atomic multi-stream appends the
executor fences on one stream and completes the rest from the log; not tested against a real
server here); memory:// (not durable).

`
)

// usage is turnstile --help: every command's lines, from commands.
var usage = func() string {
	var b strings.Builder
	b.WriteString(usageHead)
	for _, c := range commands {
		if c.line != "" {
			for l := range strings.SplitSeq(c.line, "\n") {
				b.WriteString("  " + l + "\n")
			}
		}
	}
	return b.String() + usageTail + exitCodesHelp
}()

// isHelp reports whether arg asks for help: -h, -help, --help or the word
// help. It is the one test of it; helpRequested is it for flags alone.
func isHelp(arg string) bool {
	return arg == "-h" || arg == "-help" || arg == "--help" || arg == "help"
}

// helpRequested reports whether args (before any "--") hold a help flag
// (isHelp, not the word help, which can be an argument's value).
func helpRequested(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelp(a) && a != "help" {
			return true
		}
	}
	return false
}

// benchHelp is `turnstile bench --help`.
const benchHelp = `usage: turnstile bench lifecycle|waiting|restart [flags]

Whole-system benchmarks (BENCHMARKS.md has the method and today's figures).
"turnstile bench lifecycle --help" lists a benchmark's flags.

Example:
  turnstile bench lifecycle --executions 100000 --actions 100 --max-concurrent 10 --json
`

// flagUsage returns a FlagSet's --help: what the command does, its flags
// and an example.
func flagUsage(fs *flag.FlagSet, name string) func() {
	return func() {
		out := fs.Output()
		h, ok := commandNamed(name)
		if !ok {
			h.synopsis = "turnstile " + name + " [flags]"
		}
		fmt.Fprintf(out, "usage: %s\n\n", h.synopsis)
		if h.what != "" {
			fmt.Fprintf(out, "%s\n\n", h.what)
		}
		fmt.Fprintln(out, "Flags:")
		fs.PrintDefaults()
		if h.example != "" {
			fmt.Fprintf(out, "\nExample:\n  %s\n", h.example)
		}
		fmt.Fprintf(out, "\n%s", exitCodesHelp)
	}
}
