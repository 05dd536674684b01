package main

import (
	"flag"
	"fmt"
	"strings"
)

// commandHelp is the one-line purpose and an example of each command that
// parses flags with newFlags; --help prints them with the flags.
var commandHelp = map[string]struct{ what, synopsis, example string }{
	"serve": {"Everything in one process: the API, the executor and in-process workers, on the embedded store in --data by default.",
		"turnstile serve [flags]", "turnstile serve --addr 127.0.0.1:9090 --data ./data --workers 4"},
	"executor": {"The executor as a process of its own on a shared log (one of any number: the one holding the lease decides).",
		"turnstile executor --store URL [flags]", "turnstile executor --store postgres://turnstile:secret@db/turnstile"},
	"worker": {"A worker as a process of its own.",
		"turnstile worker [flags]", "turnstile worker --store postgres://turnstile:secret@db/turnstile --id w1 --slots 16"},
	"migrate": {"Apply the PostgreSQL store's and read model tables' migrations.",
		"turnstile migrate --store URL", "turnstile migrate --store postgres://turnstile:secret@db/turnstile"},
	"healthcheck": {"GET a URL; exit 0 on a 2xx answer (a container health check without curl).",
		"turnstile healthcheck [--timeout 3s] URL", "turnstile healthcheck http://127.0.0.1:8080/readyz"},
	"audit": {"Check the whole log: ownership and the handoff rule, FIFO grants, concurrency limits, no lost or duplicated execution. Exit 1 with a report on any violation. A live log the archiver trimmed is audited from a checkpoint (the report says which, and what it cannot judge) unless --archive makes it the whole history.",
		"turnstile audit (--data DIR | --store URL) [--archive DIR] [--json]", "turnstile audit --data ./data --archive /srv/turnstile/archive"},
	"verify": {"Check the log's hash chain: every event's hash covers the one before it, and each digest given (published earlier by GET /api/v1/log) is a prefix of today's log. Exit 1 naming the first position that does not match.",
		"turnstile verify (--data DIR | --store URL) [--archive DIR] [--digest POSITION:HASH]... [--json]", "turnstile verify --data ./data --digest 41:3f5a…"},
	"replay": {"Print events of the log, or with --state the state they fold into, as of a point.",
		"turnstile replay (--data DIR | --store URL) [--archive DIR] [flags]", "turnstile replay --data ./data --stream execution-0b9d6c1e-… --state"},
	"rebuild": {"Fold the log from position 0 and compare with the live read model (a server's, or offline). Exit 1 on any difference.",
		"turnstile rebuild (--data DIR | --store URL | --server URL [--token T])", "turnstile rebuild --server http://127.0.0.1:8080 --token $ADMIN_TOKEN"},
	"bench lifecycle": {"Drive executions of core.noop through the whole lifecycle and print the throughput and latencies.",
		"turnstile bench lifecycle [flags]", "turnstile bench lifecycle --executions 100000 --actions 100 --max-concurrent 10 --json"},
	"bench waiting": {"Measure the executor with a large backlog of waiting executions.",
		"turnstile bench waiting [flags]", "turnstile bench waiting --json"},
	"bench restart": {"Measure how long a restart takes to be ready on a log of a given size.",
		"turnstile bench restart --store URL --action REF --executions N", "turnstile bench restart --store embedded:///var/tmp/bench --action bench.a0 --executions 100000"},
	"version": {"Print the version, the commit and the Go version this binary was built from.",
		"turnstile version [--json]", "turnstile version"},
}

// clientWhat is what each client command does, for its --help.
var clientWhat = map[string]string{
	"actions create":    "Define an action: its runner and its policy (201; the same definition again is fine; a different one is a conflict, exit 1).",
	"actions get":       "Print an action's policy in force and whether it is paused.",
	"actions list":      "List every action and its policy.",
	"actions policy":    "Change an action's policy: the flags change only the fields they name; it applies from the next grant.",
	"actions pause":     "Stop granting slots to the action's executions (running ones go on, requests still queue).",
	"actions resume":    "Start granting slots again.",
	"exec request":      "Request an execution of ACTION and print its id; with --wait, wait for its end (exit 0 only if it completed).",
	"exec get":          "Print an execution's state, now or as of a log position or time.",
	"exec list":         "List executions, newest first, one page at a time.",
	"exec cancel":       "Request an execution's cancellation.",
	"exec wait":         "Wait for an execution's end and print its final state (exit 0 only if it completed).",
	"exec explain":      "Say why an execution waits: its place in its queue, how many are ahead, and what it waits for.",
	"exec events":       "Print an execution's events, in order: who did what, when (the audit trail).",
	"log status":        "Print where the log stands and the digest of its hash chain, for turnstile verify --digest.",
	"watch queue-stats": "Follow every action's queue statistics, one labelled line per change.",
	"watch executions":  "Follow executions' states, one labelled line per change.",
	"watch events":      "Follow the log's events, one line each, in position order.",
}

// helpRequested reports whether args (before any "--") ask for --help.
func helpRequested(args []string) bool {
	for _, a := range args {
		switch a {
		case "--":
			return false
		case "-h", "-help", "--help":
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
		h, ok := commandHelp[name]
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

// isHelpFlag reports whether args ask for help.
func isHelpFlag(args []string) bool {
	return len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "-help" || strings.EqualFold(args[0], "help"))
}
