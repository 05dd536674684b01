package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"golang.org/x/term"

	"github.com/turnstile/turnstile/client/wire"
)

// A watch on a terminal draws the state a feed describes as one table that
// is redrawn in place: the cursor goes home, each line is written over the
// last frame's and cleared to its end, and the rest of the screen is
// cleared. It redraws at most once per watchRedraw after a change, and once
// per watchRefresh without one (the title's clock moves on, and a resized
// terminal is filled again).

// watchRedraw is the shortest time between two frames.
const watchRedraw = 100 * time.Millisecond

// watchRefresh is the longest time between two frames.
const watchRefresh = time.Second

// ANSI control sequences of the screen.
const (
	ansiHome       = "\x1b[H"    // cursor to the top left corner
	ansiClear      = "\x1b[2J"   // clear the whole screen
	ansiClearLine  = "\x1b[K"    // clear to the end of the line
	ansiClearBelow = "\x1b[J"    // clear from the cursor to the end of the screen
	ansiHideCursor = "\x1b[?25l" // while frames are drawn
	ansiShowCursor = "\x1b[?25h"
)

// watchTable folds a state feed's messages into the rows of a table.
type watchTable interface {
	// update folds one message (a JSON document as the server wrote it).
	update(data []byte) error
	// header is the line of column labels, tab separated.
	header() string
	// rows are the table's rows, tab separated, in display order.
	rows() []string
}

// terminalOf returns the file descriptor of w when w is a terminal.
func terminalOf(w io.Writer) (int, bool) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return 0, false
	}
	return int(f.Fd()), true
}

// screen draws a watchTable on a terminal. Its methods may be called from
// several goroutines.
type screen struct {
	out   io.Writer
	fd    int
	title string
	table watchTable

	mu       sync.Mutex
	dirty    bool
	drawn    time.Time // when the last frame was drawn
	position uint64    // of the last message
	messages int
}

// start clears the screen, hides the cursor and draws the empty table, so
// the watch shows something before the first message.
func (s *screen) start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _ = io.WriteString(s.out, ansiHideCursor+ansiClear)
	s.drawLocked()
}

// update folds one message into the table; the next tick draws it.
func (s *screen) update(id uint64, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.table.update(data); err != nil {
		return err
	}
	s.position, s.dirty = id, true
	s.messages++
	return nil
}

// run draws the table whenever it changed, at most once per watchRedraw,
// until stop is closed; then it draws the last frame and shows the cursor.
func (s *screen) run(stop <-chan struct{}) {
	tick := time.NewTicker(watchRedraw)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			s.mu.Lock()
			if s.dirty || time.Since(s.drawn) >= watchRefresh {
				s.drawLocked()
			}
			s.mu.Unlock()
		case <-stop:
			s.mu.Lock()
			s.drawLocked()
			_, _ = io.WriteString(s.out, ansiShowCursor)
			s.mu.Unlock()
			return
		}
	}
}

// drawLocked writes one frame; s.mu is held.
func (s *screen) drawLocked() {
	s.dirty, s.drawn = false, time.Now()
	width, height, err := term.GetSize(s.fd)
	if err != nil || width <= 0 || height <= 0 {
		width, height = 80, 24
	}
	status := "waiting for the first message"
	if s.messages > 0 {
		status = fmt.Sprintf("as of log position %d", s.position)
	}
	lines := []string{fmt.Sprintf("%s · %s · %s", s.title, status, time.Now().UTC().Format("15:04:05Z")), ""}

	rows := s.table.rows()
	room := height - len(lines) - 2 // the header, and the last line of the screen kept free (writing it would scroll)
	var hidden int
	if room < 1 {
		room = 1
	}
	if len(rows) > room {
		room-- // for the line that says how many are not shown
		hidden, rows = len(rows)-room, rows[len(rows)-room:]
	}
	var tab bytes.Buffer
	tw := tabwriter.NewWriter(&tab, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, s.table.header())
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	_ = tw.Flush()
	table := strings.Split(strings.TrimSuffix(tab.String(), "\n"), "\n")
	lines = append(lines, table[0])
	if hidden > 0 {
		lines = append(lines, fmt.Sprintf("… %d earlier rows not shown", hidden))
	}
	lines = append(lines, table[1:]...)

	var frame strings.Builder
	frame.WriteString(ansiHome)
	for _, l := range lines {
		frame.WriteString(clipWidth(l, width))
		frame.WriteString(ansiClearLine + "\r\n")
	}
	frame.WriteString(ansiClearBelow)
	_, _ = io.WriteString(s.out, frame.String())
}

// clipWidth cuts line to at most width characters (a wrapped line would
// push the frame down).
func clipWidth(line string, width int) string {
	if utf8.RuneCountInString(line) <= width {
		return line
	}
	r := []rune(line)
	return string(r[:width])
}

// queueStatsTable is the latest statistics of each action, by action.
type queueStatsTable struct {
	stats map[string]wire.QueueStats
}

func (t *queueStatsTable) update(data []byte) error {
	var s wire.QueueStats
	if err := json.Unmarshal(data, &s); err != nil {
		return err
	}
	if t.stats == nil {
		t.stats = map[string]wire.QueueStats{}
	}
	t.stats[s.Action] = s
	return nil
}

func (t *queueStatsTable) header() string {
	return "ACTION\tQUEUE\tACTIVE\tMAX\tENQUEUED\tCOMPLETED\tFAILED\tTIMED_OUT\tREJECTED\tCANCELLED\tWAIT_P50\tWAIT_P95\tPAUSED\tPOSITION"
}

func (t *queueStatsTable) rows() []string {
	actions := make([]string, 0, len(t.stats))
	for a := range t.stats {
		actions = append(actions, a)
	}
	sort.Strings(actions)
	rows := make([]string, 0, len(actions))
	for _, a := range actions {
		s := t.stats[a]
		rows = append(rows, fmt.Sprintf("%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%gms\t%gms\t%v\t%d",
			s.Action, s.QueueLength, s.ActiveCount, s.MaxConcurrent, s.TotalEnqueued, s.TotalCompleted, s.TotalFailed,
			s.TotalTimedOut, s.TotalRejected, s.TotalCancelled, s.WaitP50Ms, s.WaitP95Ms, s.Paused, s.Position))
	}
	return rows
}

// executionsKept bounds how many executions the executions table keeps:
// past it, the ended ones whose latest change is oldest are forgotten.
const executionsKept = 1000

// executionsTable is the latest state of each execution, in the order of
// their latest changes (the newest last).
type executionsTable struct {
	execs map[string]wire.Execution
}

func (t *executionsTable) update(data []byte) error {
	var x wire.Execution
	if err := json.Unmarshal(data, &x); err != nil {
		return err
	}
	if t.execs == nil {
		t.execs = map[string]wire.Execution{}
	}
	t.execs[x.ID] = x
	if len(t.execs) > executionsKept {
		ended := t.sorted(func(x wire.Execution) bool { return x.EndedAt != nil })
		for _, old := range ended[:min(len(ended), len(t.execs)-executionsKept)] {
			delete(t.execs, old.ID)
		}
	}
	return nil
}

// sorted returns the executions that keep says, by position.
func (t *executionsTable) sorted(keep func(wire.Execution) bool) []wire.Execution {
	var xs []wire.Execution
	for _, x := range t.execs {
		if keep(x) {
			xs = append(xs, x)
		}
	}
	sort.Slice(xs, func(i, j int) bool {
		if xs[i].Position != xs[j].Position {
			return xs[i].Position < xs[j].Position
		}
		return xs[i].ID < xs[j].ID
	})
	return xs
}

func (t *executionsTable) header() string {
	return "ID\tACTION\tSTATUS\tATTEMPT\tWORKER\tPOSITION\tERROR"
}

func (t *executionsTable) rows() []string {
	xs := t.sorted(func(wire.Execution) bool { return true })
	rows := make([]string, 0, len(xs))
	for _, x := range xs {
		errText := dash(x.Error)
		if x.Error != "" {
			errText = fmt.Sprintf("%q", x.Error)
		}
		rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%d\t%s\t%d\t%s", x.ID, x.Action, x.Status, x.Attempt, dash(x.Worker), x.Position, errText))
	}
	return rows
}
