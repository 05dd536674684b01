package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/turnstile/turnstile/projections"
)

func cmdAudit(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlags("audit", stderr)
	data := fs.String("data", "", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	if err := parse(fs, args); err != nil {
		fmt.Fprintf(stderr, "turnstile audit: %v\n", err)
		return 2
	}
	store, _, err := openStore(*storeURL, *data)
	if err != nil {
		fmt.Fprintf(stderr, "turnstile audit: %v\n", err)
		return 3
	}
	defer store.Close()
	head, _ := store.Head(ctx)
	progress := func(uint64) {}
	if isTerminal(stderr) && !*asJSON {
		progress = func(pos uint64) {
			if head > 0 {
				fmt.Fprintf(stderr, "\raudit: %d/%d events (%d%%)", pos, head, pos*100/head)
			}
		}
	}
	rep, err := projections.Audit(ctx, store, progress)
	if isTerminal(stderr) && !*asJSON {
		fmt.Fprintln(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "turnstile audit: %v\n", err)
		return 3
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(rep)
	} else {
		fmt.Fprintf(stdout, "events:      %d\nexecutions:  %d (%d ended, %d open)\ngrants:      %d\nby status:   %v\n",
			rep.Events, rep.Executions, rep.Ended, len(rep.Open), rep.Grants, rep.ByStatus)
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

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
