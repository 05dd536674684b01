package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// Server-Sent Events. The SSE id of every message is a log position. A
// client resumes with Last-Event-ID (a browser's EventSource does so by
// itself), which wins over ?from=; without either a feed starts now.
//
// /feeds/events sends every event (or those of one action) exactly once, in
// log order: each client reads the log through its own subscription, so a
// slow client only slows itself and catches up from the log.
//
// /feeds/executions and /feeds/queue-stats are conflated state feeds: each
// message is the current state of one execution (or one action's queue
// statistics) with the position of its latest change; a client that resumes
// after id P receives every execution (action) that changed after P, once,
// with its latest state. It may skip states superseded meanwhile, never a
// final one. Without Last-Event-ID or ?from= they start with the state:
// every defined action's statistics, or every execution that has not ended,
// in the order of their latest changes, then the changes from there.

// feedWriteTimeout is Config.FeedStallTimeout's default: it bounds one write
// to a feed client; a client that does not read for that long is cut (it
// may reconnect and resume with Last-Event-ID).
const feedWriteTimeout = 30 * time.Second

// feedBatch bounds how many states a conflated feed reads per lock.
const feedBatch = 256

type sseWriter struct {
	mu    sync.Mutex
	w     http.ResponseWriter
	rc    *http.ResponseController
	stall time.Duration
	last  uint64 // the id of the last message sent (0: none)
	sent  bool
}

func (s *Server) startSSE(w http.ResponseWriter) *sseWriter {
	out := startSSE(w)
	out.stall = s.cfg.FeedStallTimeout
	return out
}

// cut logs why a feed ended early, with the position the client resumes
// after (the id of the last message it was sent).
func (s *Server) feedCut(r *http.Request, out *sseWriter, err error) {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return // the client left, or the server is stopping
	}
	out.mu.Lock()
	last, sent := out.last, out.sent
	out.mu.Unlock()
	if sent {
		s.log.Warn("feed client cut: it did not read in time; it resumes with Last-Event-ID", "path", r.URL.Path, "remote", r.RemoteAddr, "last_event_id", last, "err", err)
	} else {
		s.log.Warn("feed client cut: it did not read in time", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
	}
}

func startSSE(w http.ResponseWriter) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	s := &sseWriter{w: w, rc: http.NewResponseController(w), stall: feedWriteTimeout}
	_ = s.write(": turnstile feed\nretry: 2000\n\n")
	return s
}

func (s *sseWriter) write(text string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.stall))
	if _, err := fmt.Fprint(s.w, text); err != nil {
		return err
	}
	return s.rc.Flush()
}

// send writes one message; data is JSON (one line).
func (s *sseWriter) send(id uint64, event string, v any) error {
	if err := s.write(fmt.Sprintf("id: %d\nevent: %s\ndata: %s\n\n", id, event, bytes.TrimRight(marshal(v), "\n"))); err != nil {
		return err
	}
	s.mu.Lock()
	s.last, s.sent = id, true
	s.mu.Unlock()
	return nil
}

// feedStart reads where a feed starts: after Last-Event-ID, else at ?from=,
// else at now.
func feedStart(r *http.Request, now func() (uint64, error)) (uint64, *Problem) {
	if last := r.Header.Get("Last-Event-ID"); last != "" {
		id, err := strconv.ParseUint(last, 10, 64)
		if err != nil || id == math.MaxUint64 { // no position follows the largest
			return 0, typed(typeInvalid, http.StatusBadRequest, "Last-Event-ID %q is not a log position", clip(last))
		}
		return id + 1, nil
	}
	if r.URL.Query().Get("from") != "" {
		return queryUint(r, "from", 0)
	}
	n, err := now()
	if err != nil {
		return 0, typed(typeUnavailable, http.StatusServiceUnavailable, "the log is not readable: %v", err)
	}
	return n, nil
}

func (s *Server) feedParams(r *http.Request, now func() (uint64, error)) (from uint64, action string, p *Problem) {
	if p = queryOnly(r, "from", "action"); p != nil {
		return 0, "", p
	}
	if action = r.URL.Query().Get("action"); action != "" {
		if err := domain.ValidateRef(action); err != nil {
			return 0, "", typed(typeInvalid, http.StatusBadRequest, "action: %v", err)
		}
	}
	if p = mayFollow(r, action); p != nil {
		return 0, "", p
	}
	if from, p = feedStart(r, now); p != nil {
		return 0, "", p
	}
	return from, action, s.notBeyondHead(r, from)
}

// notBeyondHead refuses a feed asked to start (by Last-Event-ID or ?from=)
// beyond the position the next event will take: no such position exists
// yet, and a feed would wait in silence for it. The head is the log's, not
// this server's views', so a resume on a server whose views lag is never
// refused.
func (s *Server) notBeyondHead(r *http.Request, from uint64) *Problem {
	if r.Header.Get("Last-Event-ID") == "" && r.URL.Query().Get("from") == "" {
		return nil // it starts now
	}
	head, err := s.cfg.Queries.Head(r.Context())
	if err != nil {
		if p := asProblem(err); p != nil {
			return p
		}
		return typed(typeUnavailable, http.StatusServiceUnavailable, "the log is not readable now")
	}
	if from <= head {
		return nil
	}
	if r.Header.Get("Last-Event-ID") != "" {
		last := "the log is empty"
		if head > 0 {
			last = fmt.Sprintf("its last position is %d", head-1)
		}
		return typed(typeInvalid, http.StatusBadRequest, "Last-Event-ID %s is beyond the log's head: %s (resume without Last-Event-ID, or from 0, if the log was replaced)", clip(r.Header.Get("Last-Event-ID")), last)
	}
	return typed(typeInvalid, http.StatusBadRequest, "from=%d is beyond the log's head: the next event will take position %d", from, head)
}

func (s *Server) viewsNow() (uint64, error) { return s.cfg.Queries.Views().Next(), nil }

func (s *Server) feedExecutions(w http.ResponseWriter, r *http.Request) {
	conflatedFeed(s, w, r, "execution", s.cfg.Queries.Views().CurrentExecutions, s.cfg.Queries.Views().ExecutionsSince, executionOut,
		func(x projections.ExecutionView) uint64 { return x.Position })
}

func (s *Server) feedQueueStats(w http.ResponseWriter, r *http.Request) {
	conflatedFeed(s, w, r, "queue-stats", s.cfg.Queries.Views().CurrentStats, s.cfg.Queries.Views().StatsSince, statsOut,
		func(st projections.QueueStats) uint64 { return st.Position })
}

// conflatedFeed runs a state feed: read what changed since the cursor, send
// each state with its position as the SSE id, wait for the views to change
// (with heartbeats), repeat. conv gives a state's wire document. A feed
// given no start (no Last-Event-ID, no ?from=) first sends the pages
// current returns, then the changes from the position it returns.
func conflatedFeed[T, W any](s *Server, w http.ResponseWriter, r *http.Request, event string,
	current func(action string) (pages func(max int) []T, next uint64),
	since func(from uint64, action string, max int) ([]T, uint64), conv func(T) W, position func(T) uint64) {
	from, action, p := s.feedParams(r, s.viewsNow)
	if p != nil {
		writeProblem(w, p)
		return
	}
	release, p := s.feeds.acquire(r)
	if p != nil {
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeProblem(w, p)
		return
	}
	defer release()
	// The state is taken before the client sees the feed open (the
	// response's header), so anything that happens once it is open comes
	// with the changes: nothing falls between the state and the changes.
	var pages func(int) []T
	if r.Header.Get("Last-Event-ID") == "" && r.URL.Query().Get("from") == "" {
		pages, from = current(action)
	}
	s.metrics.feeds.Inc()
	defer s.metrics.feeds.Dec()
	out := s.startSSE(w)
	if pages != nil {
		for items := pages(feedBatch); len(items) > 0; items = pages(feedBatch) {
			for _, it := range items {
				if err := out.send(position(it), event, conv(it)); err != nil {
					return
				}
			}
		}
	}
	beat := time.NewTicker(s.cfg.FeedHeartbeat)
	defer beat.Stop()
	for {
		changed := s.cfg.Queries.Views().Changed()
		items, next := since(from, action, feedBatch)
		for _, it := range items {
			if err := out.send(position(it), event, conv(it)); err != nil {
				s.feedCut(r, out, err)
				return
			}
		}
		from = next
		if len(items) > 0 {
			continue
		}
		select {
		case <-changed:
		case <-beat.C:
			if err := out.write(": heartbeat\n\n"); err != nil {
				s.feedCut(r, out, err)
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// feedEvents streams raw events through a subscription of its own.
func (s *Server) feedEvents(w http.ResponseWriter, r *http.Request) {
	from, action, p := s.feedParams(r, func() (uint64, error) { return s.cfg.Queries.Head(r.Context()) })
	if p != nil {
		writeProblem(w, p)
		return
	}
	release, p := s.feeds.acquire(r)
	if p != nil {
		w.Header().Set("Retry-After", retryAfterSeconds)
		writeProblem(w, p)
		return
	}
	defer release()
	s.metrics.feeds.Inc()
	defer s.metrics.feeds.Dec()
	out := s.startSSE(w)
	ctx, cancel := context.WithCancel(r.Context())
	var beats sync.WaitGroup
	defer beats.Wait() // no write after the handler returns
	defer cancel()
	beats.Add(1)
	go func() {
		defer beats.Done()
		beat := time.NewTicker(s.cfg.FeedHeartbeat)
		defer beat.Stop()
		for {
			select {
			case <-beat.C:
				if err := out.write(": heartbeat\n\n"); err != nil {
					cancel()
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	err := s.cfg.Queries.FollowEvents(ctx, from, action, func(env *domain.Envelope) error {
		return out.send(env.Position, "event", eventOut(env))
	})
	s.feedCut(r, out, err)
}
