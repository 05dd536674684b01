package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
)

// execCommands are "turnstile exec …".
var execCommands = map[string]subcommand{
	"request": {[]string{"ACTION"}, func(fs *flag.FlagSet) runFunc {
		input := fs.String("input", "", "the input: a JSON object")
		items := fs.String("with-items", "", "a JSON array: one child execution per item, in item order (an object item is merged over --input)")
		window := fs.Int("concurrency", 0, "with --with-items: at most this many children in flight at once (0: all)")
		key := fs.String("idempotency-key", "", "makes a retry of this request safe: the same key answers the same execution")
		wait := fs.Bool("wait", false, "wait for the end; the exit code says how it ended")
		timeout := fs.Duration("timeout", 0, "with --wait: give up after this long (0: never)")
		return func(ctx context.Context, c *conn, pos []string) error {
			req := wire.ExecutionRequest{Action: pos[0], Concurrency: *window}
			if *input != "" {
				if !json.Valid([]byte(*input)) || !strings.HasPrefix(strings.TrimSpace(*input), "{") {
					return usageError{fmt.Errorf("--input %q is not a JSON object", clipArg(*input))}
				}
				req.Input = json.RawMessage(*input)
			}
			switch {
			case *items != "":
				if err := json.Unmarshal([]byte(*items), &req.WithItems); err != nil || !strings.HasPrefix(strings.TrimSpace(*items), "[") {
					return usageError{fmt.Errorf("--with-items %q is not a JSON array", clipArg(*items))}
				}
			case *window != 0:
				return usageError{errors.New("--concurrency needs --with-items")}
			}
			if *window < 0 {
				return usageError{fmt.Errorf("--concurrency %d is negative", *window)}
			}
			var opts []client.RequestOption
			if *key != "" {
				opts = append(opts, client.WithIdempotencyKey(*key))
			}
			r, err := timed(ctx, func(ctx context.Context) (client.Requested, error) { return c.api.RequestExecution(ctx, req, opts...) })
			if err != nil {
				return err
			}
			if !*wait {
				c.output(wire.Accepted{ID: r.ID, Status: r.Status}, func(w io.Writer) { fmt.Fprintln(w, r.ID) })
				return nil
			}
			if !c.asJSON {
				fmt.Fprintln(c.stdout, r.ID)
			}
			return c.wait(ctx, r.ID, *timeout)
		}
	}},
	"get": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		asOf := fs.String("as-of", "", "the state as of a log position or an RFC 3339 time")
		return func(ctx context.Context, c *conn, pos []string) error {
			var opts []client.ReadOption
			if *asOf != "" {
				opts = append(opts, client.AsOf(*asOf))
			}
			x, err := timed(ctx, func(ctx context.Context) (wire.Execution, error) { return c.api.Execution(ctx, pos[0], opts...) })
			if err != nil {
				return err
			}
			c.output(x, func(w io.Writer) { printExecution(w, x) })
			return nil
		}
	}},
	"list": {nil, func(fs *flag.FlagSet) runFunc {
		var o client.ListOptions
		fs.StringVar(&o.Action, "action", "", "only this action's executions")
		fs.StringVar(&o.Status, "status", "", "only executions in this state")
		fs.StringVar(&o.Parent, "parent", "", "only this with_items parent's children")
		fs.IntVar(&o.Limit, "limit", 0, "page size (1..1000; default 100)")
		fs.StringVar(&o.After, "after", "", "the next page after this id (printed at the end of a full page)")
		return func(ctx context.Context, c *conn, _ []string) error {
			page, err := timed(ctx, func(ctx context.Context) (wire.ExecutionList, error) { return c.api.Executions(ctx, o) })
			if err != nil {
				return err
			}
			c.output(page, func(w io.Writer) {
				fmt.Fprintln(w, "ID\tACTION\tSTATUS\tATTEMPT\tWORKER\tREQUESTED\tENDED")
				for _, x := range page.Executions {
					fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", x.ID, x.Action, x.Status, x.Attempt, dash(x.Worker), stamp(x.RequestedAt), stamp(x.EndedAt))
				}
			})
			if page.Next != "" && !c.asJSON {
				fmt.Fprintf(c.stderr, "more: --after %s\n", page.Next)
			}
			return nil
		}
	}},
	"cancel": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why (recorded in the log)")
		return func(ctx context.Context, c *conn, pos []string) error {
			acc, err := timed(ctx, func(ctx context.Context) (wire.Accepted, error) { return c.api.Cancel(ctx, pos[0], *reason) })
			if err != nil {
				return err
			}
			c.output(acc, func(w io.Writer) { fmt.Fprintf(w, "cancellation requested: %s (now %s)\n", acc.ID, acc.Status) })
			return nil
		}
	}},
	"wait": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		timeout := fs.Duration("timeout", 0, "give up after this long (0: never)")
		return func(ctx context.Context, c *conn, pos []string) error {
			return c.wait(ctx, pos[0], *timeout)
		}
	}},
	"explain": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *conn, pos []string) error {
			e, err := timed(ctx, func(ctx context.Context) (client.Explanation, error) { return c.api.Explain(ctx, pos[0]) })
			if err != nil {
				return err
			}
			c.output(e, func(w io.Writer) {
				fmt.Fprintf(w, "status:\t%s\nqueue_place:\t%d\nahead:\t%d\nwaiting_for:\t%s\n", e.Status, e.QueuePlace, e.Ahead, dash(strings.Join(e.WaitingFor, " ")))
			})
			return nil
		}
	}},
	"events": {[]string{"ID"}, func(fs *flag.FlagSet) runFunc {
		from := fs.Uint64("from", 0, "the stream version to start at")
		limit := fs.Int("limit", 0, "page size (1..1000; default 100)")
		return func(ctx context.Context, c *conn, pos []string) error {
			page, err := timed(ctx, func(ctx context.Context) (wire.EventPage, error) {
				return c.api.ExecutionEvents(ctx, pos[0], *from, *limit)
			})
			if err != nil {
				return err
			}
			c.output(page, func(w io.Writer) {
				fmt.Fprintln(w, "VERSION\tPOSITION\tTIME\tTYPE\tOWNER\tWRITER")
				for _, e := range page.Events {
					fmt.Fprintf(w, "%d\t%d\t%s\t%s\t%s\t%s\n", e.Version, e.Position, stamp(&e.Time), e.Type, e.Owner, dash(e.Writer))
				}
			})
			pageSize := *limit
			if pageSize == 0 {
				pageSize = 100
			}
			more := len(page.Events) == pageSize
			if !more && len(page.Events) > 0 && !c.asJSON {
				// A page also ends at its byte budget (docs/api.md): a
				// short one may not be the last.
				rest, err := c.api.ExecutionEvents(ctx, pos[0], page.Next, 1)
				more = err == nil && len(rest.Events) > 0
			}
			if more && !c.asJSON {
				fmt.Fprintf(c.stderr, "more: --from %d\n", page.Next)
			}
			return nil
		}
	}},
}

// wait waits for execution id to end and prints its final state. A
// completed execution is success; any other end is a findingError.
func (c *conn) wait(ctx context.Context, id string, timeout time.Duration) error {
	parent := ctx
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	x, err := c.api.Wait(ctx, id)
	switch {
	case err != nil && ctx.Err() != nil && parent.Err() == nil && x.ID != "":
		return fmt.Errorf("execution %s is still %s after %s: gave up waiting", id, x.Status, timeout)
	case err != nil && ctx.Err() != nil && parent.Err() == nil:
		return fmt.Errorf("execution %s: no answer from the server within %s: gave up waiting", id, timeout)
	case err != nil:
		return err
	}
	c.output(x, func(w io.Writer) { printExecution(w, x) })
	if x.Status != "completed" {
		return findingError{fmt.Sprintf("execution %s %s", id, x.Status)}
	}
	return nil
}

func printExecution(w io.Writer, x wire.Execution) {
	fmt.Fprintf(w, "id:\t%s\naction:\t%s\nstatus:\t%s\nattempt:\t%d\n", x.ID, x.Action, x.Status, x.Attempt)
	for _, kv := range [][2]string{{"concurrency_key", x.ConcurrencyKey}, {"parent", x.Parent}, {"worker", x.Worker}, {"code", x.Code}} {
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
