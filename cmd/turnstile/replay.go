package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/eventstore"
	"github.com/turnstile/turnstile/internal/jsontext"
	"github.com/turnstile/turnstile/projections"
)

// cmdReplay prints events of the log (filtered by stream, type and range),
// or with --state the state they fold into as of a point.
func cmdReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("replay", stderr)
	data := fs.String("data", "", "data directory of the embedded store")
	storeURL := fs.String("store", "", "store URL")
	stream := fs.String("stream", "", "only this stream (e.g. execution-<id>, queue-<ref>, action-<ref>)")
	typ := fs.String("type", "", "only events of this type (e.g. execution.scheduled)")
	from := fs.Uint64("from", 0, "first position (inclusive)")
	to := fs.Uint64("to", 0, "last position (inclusive; 0: to the end)")
	asOf := fs.String("as-of", "", "stop at this position or RFC 3339 time")
	state := fs.Bool("state", false, "print the state the events fold into (an execution, an action's queue and stats, or every action's stats) instead of the events")
	asJSON := fs.Bool("json", false, "JSON: one event per line, or the state as one document")
	archiveDir := fs.String("archive", "", "archive directory: read archive + live log as one history")
	if err := parse(fs, args); err != nil {
		return err
	}
	cut := projections.Cut{Position: ^uint64(0)}
	if *asOf != "" {
		c, err := projections.ParseCut(*asOf)
		if err != nil {
			return usageError{err}
		}
		cut = c
	}
	if *to > 0 && (cut.ByTime || *to < cut.Position) {
		if cut.ByTime {
			return usageError{errors.New("give --to or a time in --as-of, not both")}
		}
		cut.Position = *to
	}
	store, closeAll, err := openHistory(ctx, *storeURL, *data, *archiveDir)
	if err != nil {
		return err
	}
	defer closeAll()
	if *state {
		return printState(ctx, store, *stream, cut, *asJSON, stdout)
	}
	return printEvents(ctx, store, *stream, *typ, *from, cut, *asJSON, stdout, stderr)
}

func printEvents(ctx context.Context, store eventstore.Store, stream, typ string, from uint64, cut projections.Cut, asJSON bool, stdout, stderr io.Writer) error {
	head, err := store.Head(ctx)
	if err != nil {
		return err
	}
	bar := newProgress(stderr, "replay", head)
	defer bar.done()
	enc := newJSONEncoder(stdout)
	emit := func(env *domain.Envelope) error {
		if typ != "" && env.Type != typ {
			return nil
		}
		if asJSON {
			return enc.Encode(env)
		}
		by := ""
		if p, ok, _ := domain.PrincipalOf(env); ok {
			by = " by " + p.Name
		}
		_, err := fmt.Fprintf(stdout, "%8d  %s  %-44s v%-3d %-26s %s/%s%s  %s\n", env.Position, env.Time.Format(time.RFC3339Nano),
			env.Stream, env.Version, env.Type, env.Owner, env.Writer, by, compact(env.Data))
		return err
	}
	if stream != "" {
		for v := uint64(0); ; {
			batch, err := store.ReadStream(ctx, stream, v, 1000)
			if errors.Is(err, eventstore.ErrStreamNotFound) {
				return fmt.Errorf("no stream %q", stream)
			}
			if err != nil {
				return err
			}
			for i := range batch {
				env := &batch[i]
				if env.Position < from {
					continue
				}
				if !cut.Includes(env) {
					return nil
				}
				if err := emit(env); err != nil {
					return err
				}
			}
			if len(batch) < 1000 {
				return nil
			}
			v += uint64(len(batch))
		}
	}
	for pos := from; ; {
		batch, err := store.ReadAll(ctx, pos, 4096)
		if err != nil {
			return err
		}
		if len(batch) == 0 {
			return nil
		}
		for i := range batch {
			env := &batch[i]
			if !cut.Includes(env) {
				return nil
			}
			if err := emit(env); err != nil {
				return err
			}
			pos = env.Position + 1
		}
		bar.at(pos)
	}
}

func compact(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return string(raw)
	}
	return string(jsontext.UnescapeHTML(b.Bytes()))
}

// printState folds up to the cut and prints an execution, an action's queue
// and stats, or every action's stats.
func printState(ctx context.Context, store eventstore.Store, stream string, cut projections.Cut, asJSON bool, stdout io.Writer) error {
	cat, id := domain.SplitStream(stream)
	var out any
	switch {
	case stream == "":
		v, err := projections.ViewsAsOf(ctx, store, cut)
		if err != nil {
			return err
		}
		out = map[string]any{"position": v.Next(), "queue_stats": v.AllStats(), "workers": v.Workers()}
	case cat == domain.StreamExecution:
		x, found, err := projections.ExecutionAsOf(ctx, store, id, cut)
		if err != nil {
			return err
		}
		if !found {
			return fmt.Errorf("execution %s did not exist then", id)
		}
		out = x
	case cat == domain.StreamAction || cat == domain.StreamQueue:
		v, err := projections.ViewsAsOf(ctx, store, cut)
		if err != nil {
			return err
		}
		st, ok := v.Stats(id)
		if !ok {
			return fmt.Errorf("action %s was not defined then", id)
		}
		q, _ := v.Queue(id)
		a, _ := v.Action(id)
		out = map[string]any{"action": a, "queue_stats": st, "queue": q}
	default:
		return usageError{fmt.Errorf("--state needs an execution-, action- or queue- stream, or none (got %q)", stream)}
	}
	enc := newJSONEncoder(stdout)
	if !asJSON {
		enc.SetIndent("", "  ")
	}
	return enc.Encode(out)
}

// cmdRebuild folds the log from position 0 and compares the result with the
// live read model: the server's (--server, through POST /api/v1/admin/rebuild),
// or, offline, a fold of the same log in small batches (the way a live
// process receives it). Exit 1 on any difference.
func cmdRebuild(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("rebuild", stderr)
	data := fs.String("data", "", "data directory of the embedded store (offline)")
	storeURL := fs.String("store", "", "store URL (offline)")
	server := fs.String("server", os.Getenv("TURNSTILE_SERVER"), "a running server to compare with")
	token := fs.String("token", "", "bearer token (admin) for --server (default $TURNSTILE_TOKEN; not shown here)")
	sqlCheck := fs.Bool("sql-views", false, "with a postgres:// store: compare the executions and queue_stats tables with a rebuild from position 0")
	sqlReset := fs.Bool("sql-views-reset", false, "with a postgres:// store: empty those tables and fold them again from position 0")
	if err := parse(fs, args); err != nil {
		return 2, err
	}
	if *token == "" {
		*token = os.Getenv("TURNSTILE_TOKEN")
	}
	if *sqlCheck || *sqlReset {
		if kind, _, err := storeLocation(*storeURL, ""); err != nil || kind != "postgres" || *sqlCheck == *sqlReset {
			return 2, usageError{errors.New("--sql-views or --sql-views-reset (one of them) needs --store postgres://…")}
		}
		return rebuildSQLViews(ctx, *storeURL, *sqlReset, stdout)
	}
	var res struct {
		Position    uint64   `json:"position"`
		Equal       bool     `json:"equal"`
		Differences []string `json:"differences"`
	}
	if *server != "" && *data == "" && *storeURL == "" {
		req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(*server, "/")+"/api/v1/admin/rebuild", nil)
		if err != nil {
			return 2, usageError{err}
		}
		if *token != "" {
			req.Header.Set("Authorization", "Bearer "+*token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 3, err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return 3, fmt.Errorf("%s: %d %s", req.URL, resp.StatusCode, bytes.TrimSpace(body))
		}
		if err := json.Unmarshal(body, &res); err != nil {
			return 3, err
		}
	} else {
		store, _, err := openStore(*storeURL, *data)
		if err != nil {
			return 3, err
		}
		defer store.Close()
		head, err := store.Head(ctx)
		if err != nil {
			return 3, err
		}
		bar := newProgress(stderr, "rebuild", head)
		whole := projections.NewViews()
		if err := whole.CatchUpTo(ctx, store, head); err != nil {
			return 3, err
		}
		bar.at(head / 2)
		live := projections.NewViews()
		for pos, n := uint64(0), 1; pos < head; n = n%97 + 1 {
			batch, err := store.ReadAll(ctx, pos, n)
			if err != nil {
				return 3, err
			}
			if len(batch) == 0 {
				break
			}
			if err := live.Apply(batch); err != nil {
				return 3, err
			}
			pos = batch[len(batch)-1].Position + 1
		}
		bar.at(head)
		bar.done()
		res.Position = whole.Next()
		res.Differences = projections.Compare(whole, live, 20)
		res.Equal = len(res.Differences) == 0
	}
	if res.Equal {
		fmt.Fprintf(stdout, "rebuild: the read model rebuilt from position 0 equals the live one at position %d\n", res.Position)
		return 0, nil
	}
	fmt.Fprintf(stdout, "rebuild: %d DIFFERENCES at position %d\n", len(res.Differences), res.Position)
	for _, d := range res.Differences {
		fmt.Fprintln(stdout, "  "+d)
	}
	return 1, nil
}

// progress draws a progress line on a terminal and nothing otherwise.
type progress struct {
	w     io.Writer
	name  string
	total uint64
	on    bool
	last  time.Time
}

func newProgress(w io.Writer, name string, total uint64) *progress {
	return &progress{w: w, name: name, total: total, on: isTerminal(w) && total > 0}
}

func (p *progress) at(pos uint64) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	fmt.Fprintf(p.w, "\r%s: %d/%d events (%d%%)", p.name, min(pos, p.total), p.total, min(pos, p.total)*100/p.total)
}

func (p *progress) done() {
	if p.on {
		fmt.Fprintf(p.w, "\r%s: %d/%d events (100%%)\n", p.name, p.total, p.total)
		p.on = false
	}
}
