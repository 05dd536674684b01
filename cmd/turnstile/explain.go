package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/turnstile/turnstile/client/wire"
)

// "turnstile exec explain ID": why an execution is not running now
// (GET /api/v1/executions/{id}/explain), hooked into the exec commands
// here so the client's own file stays as it is.
func init() { execCommands["explain"] = explainCommand }

var explainCommand = subcommand{[]string{"ID"}, func(*flag.FlagSet) runFunc {
	return func(ctx context.Context, c *client, pos []string) error {
		var e wire.Explanation
		raw, err := c.getJSON(ctx, "/api/v1/executions/"+esc(pos[0])+"/explain", nil, &e)
		if err != nil {
			return err
		}
		c.output(raw, func(w io.Writer) { printExplanation(w, e) })
		return nil
	}
}}

// printExplanation writes an explanation for a person: its status, its
// place, and each reason it waits, in words.
func printExplanation(w io.Writer, e wire.Explanation) {
	fmt.Fprintf(w, "status:\t%s\n", e.Status)
	if e.Position > 0 {
		fmt.Fprintf(w, "position:\t%d (%d ahead)\n", e.Position, e.Ahead)
	}
	if len(e.WaitingFor) == 0 {
		fmt.Fprintf(w, "waiting for:\tnothing\n")
		return
	}
	words := make([]string, len(e.WaitingFor))
	for i, r := range e.WaitingFor {
		words[i] = r
		if d, ok := reasonWords[r]; ok {
			words[i] = r + " (" + d + ")"
		}
	}
	fmt.Fprintf(w, "waiting for:\t%s\n", strings.Join(words, ", "))
}

var reasonWords = map[string]string{
	"slot":       "its key's max_concurrent slots are taken",
	"total_slot": "the action's max_concurrent_total slots are taken",
	"paused":     "the action is paused",
	"rate_limit": "the action's rate limit allows no grant now",
	"backoff":    "backing off after a failed run",
	"run_at":     "its run_at / delay has not come",
	"priority":   "waiters of a higher priority are ahead",
	"no_worker":  "no live worker with a free slot serves its runner",
}
