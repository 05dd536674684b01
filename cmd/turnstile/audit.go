package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"github.com/turnstile/turnstile/projections"
)

func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("audit", stderr)
	data := fs.String("data", "", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	archiveDir := fs.String("archive", "", "archive directory: audit archive + live log as one history")
	if err := parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "turnstile audit: %v\n", err)
		return 2
	}
	store, closeAll, err := openHistory(ctx, *storeURL, *data, *archiveDir)
	if err != nil {
		fmt.Fprintf(stderr, "turnstile audit: %v\n", err)
		if errors.As(err, new(usageError)) {
			return 2
		}
		return 3
	}
	defer closeAll()
	head, _ := store.Head(ctx)
	progress := func(uint64) {}
	if isTerminal(stderr) && !*asJSON {
		progress = func(pos uint64) {
			if head > 0 {
				fmt.Fprintf(stderr, "\raudit: %d/%d events (%d%%)", pos, head, pos*100/head)
			}
		}
	}
	audit := projections.AuditLive // the live log alone: from a checkpoint once trimmed
	if *archiveDir != "" {
		audit = projections.Audit // archive + live log from position 0
	}
	rep, err := audit(ctx, store, progress)
	if isTerminal(stderr) && !*asJSON {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "turnstile audit: %v\n", err)
		return 3
	}
	if *asJSON {
		enc := newJSONEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		printAuditStart(stdout, rep.From)
		printAudit(stdout, rep)
		if len(rep.Principals) > 0 {
			fmt.Fprintf(stdout, "principals:  %v (events written for each token)\n", rep.Principals)
		}
		if rep.OK() {
			fmt.Fprintln(stdout, "result:      OK — every event follows the handoff rule, FIFO order and the concurrency limits")
		} else {
			fmt.Fprintf(stdout, "result:      %d VIOLATIONS\n", len(rep.Violations))
			for _, v := range rep.Violations {
				by := ""
				if v.Principal != "" {
					by = " (by " + v.Principal + ")"
				}
				fmt.Fprintf(stdout, "  position %d %s %s%s: [%s] %s\n", v.Position, v.Stream, v.Type, by, v.Rule, v.Detail)
			}
		}
	}
	if !rep.OK() {
		return 1
	}
	return 0
}

// printAuditStart says where an audit of a trimmed live log started and
// what it could not judge (nothing for a whole audit).
func printAuditStart(w io.Writer, from *projections.AuditStart) {
	if from == nil {
		return
	}
	fmt.Fprintf(w, "started at:  the checkpoint at %d (its marker at %d); the live log starts at %d. Without --archive the events before %d are not audited: their state is the checkpoint's\n",
		from.Checkpoint, from.Marker, from.LiveStart, from.Checkpoint)
	fmt.Fprintf(w, "not judged:  (audit --archive DIR judges all of it)\n")
	for _, s := range from.NotJudged {
		fmt.Fprintf(w, "  - %s\n", s)
	}
	if from.Unjudged > 0 {
		fmt.Fprintf(w, "  - %d grants of executions not live at the checkpoint nor requested since\n", from.Unjudged)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// statusOrder is the lifecycle's order, in which the audit lists statuses.
var statusOrder = []string{"requested", "scheduling", "scheduled", "running", "completed", "failed", "timed_out", "cancelled", "rejected"}

// maxOpenShown bounds the open executions the report names.
const maxOpenShown = 10

// printAudit prints the report's figures, one labelled line each.
func printAudit(w io.Writer, rep *projections.AuditReport) {
	fmt.Fprintf(w, "events:      %d\nexecutions:  %d (%d ended, %d open)\n", rep.Events, rep.Executions, rep.Ended, len(rep.Open))
	if rep.VoidGrants > 0 {
		fmt.Fprintf(w, "grants:      %d (and %d void: of executions that had already ended)\n", rep.Grants, rep.VoidGrants)
	} else {
		fmt.Fprintf(w, "grants:      %d\n", rep.Grants)
	}
	statuses := make([]string, 0, len(rep.ByStatus))
	for s := range rep.ByStatus {
		statuses = append(statuses, s)
	}
	rank := func(s string) int {
		if i := slices.Index(statusOrder, s); i >= 0 {
			return i
		}
		return len(statusOrder)
	}
	slices.SortFunc(statuses, func(a, b string) int {
		if d := rank(a) - rank(b); d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	parts := make([]string, len(statuses))
	for i, s := range statuses {
		parts[i] = fmt.Sprintf("%d %s", rep.ByStatus[s], s)
	}
	if len(parts) == 0 {
		parts = []string{"none"}
	}
	fmt.Fprintf(w, "by status:   %s\n", strings.Join(parts, ", "))
	if n := len(rep.Open); n > 0 {
		shown := rep.Open[:min(n, maxOpenShown)]
		more := ""
		if n > len(shown) {
			more = fmt.Sprintf(" … and %d more (--json lists them all)", n-len(shown))
		}
		fmt.Fprintf(w, "open:        %s%s\n", strings.Join(shown, ", "), more)
	}
}
