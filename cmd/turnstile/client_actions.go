package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/turnstile/turnstile/client/wire"
)

// actionsCommands are "turnstile actions …".
var actionsCommands = map[string]subcommand{
	"list": {nil, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *conn, _ []string) error {
			list, err := timed(ctx, c.api.Actions)
			if err != nil {
				return err
			}
			c.output(wire.ActionList{Actions: list}, func(w io.Writer) {
				fmt.Fprintln(w, "REF\tRUNNER\tMAX_CONCURRENT\tMAX_QUEUE\tTIMEOUT\tATTEMPTS\tON_LIMIT\tPAUSED")
				for _, a := range list {
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%gs\t%d\t%s\t%v\n", a.Ref, a.Runner, a.MaxConcurrent, a.MaxQueueLength,
						a.TimeoutSeconds, a.MaxAttempts, a.OnLimit, a.Paused)
				}
			})
			return nil
		}
	}},
	"get": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *conn, pos []string) error {
			return c.showAction(timed(ctx, func(ctx context.Context) (wire.Action, error) { return c.api.Action(ctx, pos[0]) }))
		}
	}},
	"create": {nil, func(fs *flag.FlagSet) runFunc {
		pf := addPolicyFlags(fs, true)
		return func(ctx context.Context, c *conn, _ []string) error {
			p, err := pf.policy(fs, wire.Policy{})
			if err != nil {
				return err
			}
			if p.Ref == "" || p.Runner == "" {
				return usageError{errors.New("an action needs --ref and --runner (or a --file that has them)")}
			}
			return c.showAction(timed(ctx, func(ctx context.Context) (wire.Action, error) {
				a, _, err := c.api.DefineAction(ctx, p)
				return a, err
			}))
		}
	}},
	"policy": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		pf := addPolicyFlags(fs, false)
		return func(ctx context.Context, c *conn, pos []string) error {
			// The server replaces the whole policy: start from the current
			// one (or the file), so that flags change only what they name.
			var current wire.Action
			if pf.file == "" {
				var err error
				if current, err = timed(ctx, func(ctx context.Context) (wire.Action, error) { return c.api.Action(ctx, pos[0]) }); err != nil {
					return err
				}
			}
			p, err := pf.policy(fs, current.Policy)
			if err != nil {
				return err
			}
			p.Ref = pos[0]
			return c.showAction(timed(ctx, func(ctx context.Context) (wire.Action, error) { return c.api.SetPolicy(ctx, pos[0], p) }))
		}
	}},
	"pause": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		reason := fs.String("reason", "", "why (recorded in the log)")
		return func(ctx context.Context, c *conn, pos []string) error {
			return c.showAction(timed(ctx, func(ctx context.Context) (wire.Action, error) { return c.api.PauseAction(ctx, pos[0], *reason) }))
		}
	}},
	"resume": {[]string{"REF"}, func(fs *flag.FlagSet) runFunc {
		return func(ctx context.Context, c *conn, pos []string) error {
			return c.showAction(timed(ctx, func(ctx context.Context) (wire.Action, error) { return c.api.ResumeAction(ctx, pos[0]) }))
		}
	}},
}

// showAction prints an action a command answered, or returns its error.
func (c *conn) showAction(a wire.Action, err error) error {
	if err != nil {
		return err
	}
	c.output(a, func(w io.Writer) {
		fmt.Fprintf(w, "ref:\t%s\nrunner:\t%s\npaused:\t%v\nmax_concurrent:\t%d\nmax_queue_length:\t%d\n", a.Ref, a.Runner, a.Paused, a.MaxConcurrent, a.MaxQueueLength)
		fmt.Fprintf(w, "queue_timeout:\t%gs\ntimeout:\t%gs\nscheduled_timeout:\t%gs\nmax_attempts:\t%d\n", a.QueueTimeoutSeconds, a.TimeoutSeconds, a.ScheduledTimeoutSeconds, a.MaxAttempts)
		if a.RateLimit != nil {
			fmt.Fprintf(w, "rate_limit:\t%d per %gs\n", a.RateLimit.Count, a.RateLimit.PerSeconds)
		}
		if a.ConcurrencyKey != "" {
			fmt.Fprintf(w, "concurrency_key:\t%s\n", a.ConcurrencyKey)
		}
		if len(a.RunnerConfig) > 0 {
			fmt.Fprintf(w, "runner_config:\t%s\n", a.RunnerConfig)
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
	fs.StringVar(&pf.file, "file", "", "a JSON policy (the fields of POST /api/v1/actions, docs/api.md); flags override its fields")
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
func (pf *policyFlags) policy(fs *flag.FlagSet, base wire.Policy) (wire.Policy, error) {
	p := base
	if pf.file != "" {
		data, err := os.ReadFile(pf.file)
		if err != nil {
			return p, usageError{err}
		}
		p = wire.Policy{}
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
			rl := wire.RateLimit(pf.rateLimit)
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
type rateLimit wire.RateLimit

func (r *rateLimit) String() string {
	if r.Count == 0 && r.PerSeconds == 0 {
		return ""
	}
	return fmt.Sprintf("%d/%g", r.Count, r.PerSeconds)
}

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
