package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/turnstile/turnstile/client"
	"github.com/turnstile/turnstile/client/wire"
)

// watchFeeds maps a watch command to its feed, a one-line rendering of a
// message with every field labelled (name=value), and, for a state feed,
// the table a terminal shows.
var watchFeeds = map[string]struct {
	feed  client.Feed
	line  func(data []byte) (string, error)
	table func() watchTable // nil: lines on a terminal too
}{
	"queue-stats": {client.FeedQueueStats, func(data []byte) (string, error) {
		var s wire.QueueStats
		err := json.Unmarshal(data, &s)
		return fmt.Sprintf("position=%d action=%s queue=%d active=%d max=%d enqueued=%d completed=%d failed=%d timed_out=%d rejected=%d cancelled=%d wait_p50=%gms wait_p95=%gms paused=%v",
			s.Position, s.Action, s.QueueLength, s.ActiveCount, s.MaxConcurrent, s.TotalEnqueued, s.TotalCompleted, s.TotalFailed,
			s.TotalTimedOut, s.TotalRejected, s.TotalCancelled, s.WaitP50Ms, s.WaitP95Ms, s.Paused), err
	}, func() watchTable { return &queueStatsTable{} }},
	"executions": {client.FeedExecutions, func(data []byte) (string, error) {
		var x wire.Execution
		err := json.Unmarshal(data, &x)
		line := fmt.Sprintf("position=%d id=%s action=%s status=%s attempt=%d worker=%s", x.Position, x.ID, x.Action, x.Status, x.Attempt, dash(x.Worker))
		if x.Error != "" {
			line += fmt.Sprintf(" error=%q", x.Error)
		}
		return line, err
	}, func() watchTable { return &executionsTable{} }},
	"events": {client.FeedEvents, func(data []byte) (string, error) {
		var e wire.Event
		err := json.Unmarshal(data, &e)
		return fmt.Sprintf("position=%d time=%s stream=%s version=%d type=%s owner=%s", e.Position, stamp(&e.Time), e.Stream, e.Version, e.Type, dash(e.Owner)), err
	}, nil},
}

// watchCommands are "turnstile watch …".
var watchCommands = func() map[string]subcommand {
	cmds := map[string]subcommand{}
	for name, feed := range watchFeeds {
		cmds[name] = subcommand{nil, func(fs *flag.FlagSet) runFunc {
			action := fs.String("action", "", "only what belongs to this action")
			from := fs.String("from", "", "start at this log position (default: now)")
			count := fs.Int("count", 0, "stop after this many messages (0: run until interrupted)")
			return func(ctx context.Context, c *conn, _ []string) error {
				opts := client.FeedOptions{Action: *action, OnReconnect: func(err error, lastID string) {
					fmt.Fprintf(c.stderr, "turnstile: feed %s: %v; reconnecting after id %s\n", name, err, dash(lastID))
				}}
				if *from != "" {
					p, err := strconv.ParseUint(*from, 10, 64)
					if err != nil {
						return usageError{fmt.Errorf("--from %q is not a log position", clipArg(*from))}
					}
					opts.Start = client.FromPosition(p)
				}
				var scr *screen
				if fd, ok := terminalOf(c.stdout); ok && !c.asJSON && feed.table != nil {
					scr = &screen{out: c.stdout, fd: fd, title: "turnstile watch " + name, table: feed.table()}
					if *action != "" {
						scr.title += " --action " + *action
					}
					scr.start()
					stop, drawn := make(chan struct{}), make(chan struct{})
					go func() { scr.run(stop); close(drawn) }()
					defer func() { close(stop); <-drawn }() // the last frame, and the cursor back
				}
				n := 0
				err := c.api.Follow(ctx, feed.feed, opts, func(m client.Message) error {
					switch {
					case c.asJSON:
						fmt.Fprintf(c.stdout, "%s\n", m.Data) // as the server wrote it
					case scr != nil:
						if err := scr.update(m.ID, m.Data); err != nil {
							return fmt.Errorf("%s feed: message %d: %w", name, m.ID, err)
						}
					default:
						line, err := feed.line(m.Data)
						if err != nil {
							return fmt.Errorf("%s feed: message %d: %w", name, m.ID, err)
						}
						fmt.Fprintln(c.stdout, line)
					}
					if n++; *count > 0 && n >= *count {
						return client.ErrStop
					}
					return nil
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
