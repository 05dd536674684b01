package bus_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"go.uber.org/goleak"

	"github.com/turnstile/turnstile/services/bus"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type records struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec)
	r.mu.Unlock()
	return nil
}
func (r *records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *records) WithGroup(string) slog.Handler      { return r }

func (r *records) levelOf(msg string) (slog.Level, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.recs {
		if rec.Message == msg {
			return rec.Level, true
		}
	}
	return 0, false
}

// TestStopLogsNoError: a process that stops closes the bus under a running
// router. That is a clean stop: nothing is logged at error level (watermill
// says "All handlers stopped" at error), and watermill's chatter is debug.
func TestStopLogsNoError(t *testing.T) {
	logs := &records{}
	b := bus.NewInProcess(slog.New(logs))
	r, err := b.NewRouter()
	if err != nil {
		t.Fatal(err)
	}
	r.AddConsumerHandler("h", "topic", b.Subscriber, func(*message.Message) error { return nil })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- r.Run(ctx) }()
	<-r.Running()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ran: // the router closed itself once its handlers stopped
	case <-time.After(10 * time.Second):
		t.Fatal("the router did not stop")
	}
	logs.mu.Lock()
	for _, rec := range logs.recs {
		if rec.Level >= slog.LevelError {
			t.Errorf("logged at %s: %s", rec.Level, rec.Message)
		}
	}
	logs.mu.Unlock()
	if lvl, ok := logs.levelOf("bus: router closing: its subscriptions were closed"); !ok || lvl != slog.LevelInfo {
		t.Errorf("the router's stop logged at %v (found %v), want info", lvl, ok)
	}
	if lvl, ok := logs.levelOf("Starting handler"); !ok || lvl != slog.LevelDebug {
		t.Errorf("watermill's info logged at %v (found %v), want debug", lvl, ok)
	}
}

// TestLoggerLevels: watermill's levels map to slog's as NewLogger says
// (info → debug, debug and trace → trace), and a level that is off writes
// nothing while one that is on writes, through With too.
func TestLoggerLevels(t *testing.T) {
	for _, c := range []struct {
		level                      slog.Level
		wantTrace, wantDebug, info bool
	}{
		{slog.LevelInfo, false, false, false},
		{slog.LevelDebug, false, false, true},
		{watermill.LevelTrace, true, true, true},
	} {
		var buf bytes.Buffer
		l := bus.NewLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: c.level}))).With(watermill.LogFields{"k": "v"})
		l.Trace("a trace", watermill.LogFields{"n": 1})
		l.Debug("a debug", nil)
		l.Info("an info", nil)
		l.Error("an error", errors.New("boom"), nil)
		out := buf.String()
		for msg, want := range map[string]bool{"a trace": c.wantTrace, "a debug": c.wantDebug, "an info": c.info, "an error": true} {
			if got := strings.Contains(out, msg); got != want {
				t.Errorf("level %v: %q written: %v, want %v\n%s", c.level, msg, got, want, out)
			}
		}
		if !strings.Contains(out, "k=v") {
			t.Errorf("level %v: the With field is missing:\n%s", c.level, out)
		}
	}
}
