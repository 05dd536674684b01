package sqlviews

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/turnstile/turnstile/projections"
)

// execColumns are the executions table's columns in the order of the
// upsert's parameters.
var execColumns = []string{"id", "action", "status", "concurrency_key", "parent", "item_index", "items", "concurrency",
	"children", "children_requested", "worker", "attempt", "cancel_requested", "input", "result", "error", "code",
	"requested_at", "scheduling_at", "scheduled_at", "running_at", "ended_at", "version", "requested_position", "position"}

// execTypes are the parameters' array types, in the same order. children,
// input and result travel as JSON text (an array of ids, a document).
var execTypes = []string{"text", "text", "text", "text", "text", "int4", "int4", "int4",
	"text", "int4", "text", "int4", "bool", "text", "text", "text", "text",
	"timestamptz", "timestamptz", "timestamptz", "timestamptz", "timestamptz", "int8", "int8", "int8"}

// execRows holds a batch of executions rows column by column, the shape
// unnest takes: one array parameter per column, one statement per batch.
type execRows struct {
	id, action, status                 []string
	key, parent                        []*string
	itemIndex, items, concurrency      []*int32
	children                           []*string
	childrenAsked                      []*int32
	worker                             []*string
	attempt                            []int32
	cancelAsked                        []bool
	input, result, errMsg, code        []*string
	requested, granted, scheduled, run []*time.Time
	ended                              []*time.Time
	version                            []int64
	requestedPos                       []*int64
	position                           []int64
}

func (r *execRows) len() int { return len(r.id) }

// add appends the row of one execution as the API shows it. reqPos is the
// position of its execution.requested if that is in this batch (nil: the row
// exists and keeps the position it has).
func (r *execRows) add(x projections.ExecutionView, reqPos *int64) {
	r.id = append(r.id, clean(x.ID))
	r.action = append(r.action, clean(x.Action))
	r.status = append(r.status, clean(string(x.Status)))
	r.key = append(r.key, optText(x.ConcurrencyKey))
	r.parent = append(r.parent, optText(x.Parent))
	var itemIndex, items, concurrency, asked *int32
	var children *string
	if x.Parent != "" {
		itemIndex = ptr(int32(x.ItemIndex))
	}
	if x.Items > 0 { // a with_items parent
		items, asked = ptr(int32(x.Items)), ptr(int32(x.ChildrenAsked))
		if x.Concurrency > 0 {
			concurrency = ptr(int32(x.Concurrency))
		}
		ids := make([]string, len(x.Children))
		for i, c := range x.Children {
			ids[i] = clean(c)
		}
		b, _ := json.Marshal(ids) // strings always marshal
		children = ptr(string(b))
	}
	r.itemIndex = append(r.itemIndex, itemIndex)
	r.items = append(r.items, items)
	r.concurrency = append(r.concurrency, concurrency)
	r.children = append(r.children, children)
	r.childrenAsked = append(r.childrenAsked, asked)
	r.worker = append(r.worker, optText(x.Worker))
	r.attempt = append(r.attempt, int32(x.Attempt))
	r.cancelAsked = append(r.cancelAsked, x.CancelAsked)
	r.input = append(r.input, jsonText(x.Input))
	r.result = append(r.result, jsonText(x.Result))
	r.errMsg = append(r.errMsg, optText(x.Error))
	r.code = append(r.code, optText(x.Code))
	r.requested = append(r.requested, x.RequestedAt)
	r.granted = append(r.granted, x.SchedulingAt)
	r.scheduled = append(r.scheduled, x.ScheduledAt)
	r.run = append(r.run, x.RunningAt)
	r.ended = append(r.ended, x.EndedAt)
	r.version = append(r.version, x.Version)
	r.requestedPos = append(r.requestedPos, reqPos)
	r.position = append(r.position, int64(x.Position))
}

func (r *execRows) args() []any {
	return []any{r.id, r.action, r.status, r.key, r.parent, r.itemIndex, r.items, r.concurrency,
		r.children, r.childrenAsked, r.worker, r.attempt, r.cancelAsked, r.input, r.result, r.errMsg, r.code,
		r.requested, r.granted, r.scheduled, r.run, r.ended, r.version, r.requestedPos, r.position}
}

// upsertExecutions is the statement that writes execRows. A row's
// requested_position is set once, when the row is made.
func upsertExecutions(schema string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + pgx.Identifier{schema, "executions"}.Sanitize() + " (" + strings.Join(execColumns, ", ") + ")\nSELECT ")
	for i, c := range execColumns {
		if i > 0 {
			b.WriteString(", ")
		}
		switch c {
		case "children":
			b.WriteString("CASE WHEN r.children IS NULL THEN NULL ELSE ARRAY(SELECT jsonb_array_elements_text(r.children::jsonb)) END")
		case "input", "result":
			b.WriteString("r." + c + "::jsonb")
		default:
			b.WriteString("r." + c)
		}
	}
	b.WriteString("\nFROM unnest(")
	for i, t := range execTypes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1) + "::" + t + "[]")
	}
	b.WriteString(") AS r(" + strings.Join(execColumns, ", ") + ")\nON CONFLICT (id) DO UPDATE SET ")
	first := true
	for _, c := range execColumns {
		if c == "id" {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		if c == "requested_position" {
			b.WriteString("requested_position = coalesce(executions.requested_position, EXCLUDED.requested_position)")
			continue
		}
		b.WriteString(c + " = EXCLUDED." + c)
	}
	return b.String()
}

// statsColumns are the queue_stats table's columns, in parameter order.
var statsColumns = []string{"action", "queue_length", "active_count", "max_concurrent", "paused", "oldest_enqueued_at",
	"total_enqueued", "total_granted", "total_completed", "total_failed", "total_timed_out", "total_rejected", "total_cancelled",
	"wait_p50_ms", "wait_p95_ms", "position"}

var statsTypes = []string{"text", "int4", "int4", "int4", "bool", "timestamptz",
	"int8", "int8", "int8", "int8", "int8", "int8", "int8", "float8", "float8", "int8"}

type statsRows struct {
	action                               []string
	queueLength, active, maxConcurrent   []int32
	paused                               []bool
	oldest                               []*time.Time
	enqueued, granted, completed, failed []int64
	timedOut, rejected, cancelled        []int64
	p50, p95                             []float64
	position                             []int64
}

func (r *statsRows) len() int { return len(r.action) }

func (r *statsRows) add(s projections.QueueStats) {
	r.action = append(r.action, clean(s.Action))
	r.queueLength = append(r.queueLength, int32(s.QueueLength))
	r.active = append(r.active, int32(s.ActiveCount))
	r.maxConcurrent = append(r.maxConcurrent, int32(s.MaxConcurrent))
	r.paused = append(r.paused, s.Paused)
	r.oldest = append(r.oldest, s.OldestEnqueuedAt)
	r.enqueued = append(r.enqueued, int64(s.TotalEnqueued))
	r.granted = append(r.granted, int64(s.TotalGranted))
	r.completed = append(r.completed, int64(s.TotalCompleted))
	r.failed = append(r.failed, int64(s.TotalFailed))
	r.timedOut = append(r.timedOut, int64(s.TotalTimedOut))
	r.rejected = append(r.rejected, int64(s.TotalRejected))
	r.cancelled = append(r.cancelled, int64(s.TotalCancelled))
	r.p50 = append(r.p50, s.WaitP50Ms)
	r.p95 = append(r.p95, s.WaitP95Ms)
	r.position = append(r.position, int64(s.Position))
}

func (r *statsRows) args() []any {
	return []any{r.action, r.queueLength, r.active, r.maxConcurrent, r.paused, r.oldest,
		r.enqueued, r.granted, r.completed, r.failed, r.timedOut, r.rejected, r.cancelled, r.p50, r.p95, r.position}
}

func upsertStats(schema string) string {
	var b strings.Builder
	b.WriteString("INSERT INTO " + pgx.Identifier{schema, "queue_stats"}.Sanitize() + " (" + strings.Join(statsColumns, ", ") + ")\nSELECT * FROM unnest(")
	for i, t := range statsTypes {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("$" + strconv.Itoa(i+1) + "::" + t + "[]")
	}
	b.WriteString(")\nON CONFLICT (action) DO UPDATE SET ")
	for i, c := range statsColumns[1:] {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(c + " = EXCLUDED." + c)
	}
	return b.String()
}

// ---- values PostgreSQL can hold ----

// clean returns s as PostgreSQL text can hold it: valid UTF-8 without NUL
// (each NUL and invalid byte becomes U+FFFD). Strings from the log's JSON
// are valid UTF-8 already; NUL is the one they may contain.
func clean(s string) string {
	if strings.IndexByte(s, 0) < 0 && utf8.ValidString(s) {
		return s
	}
	return strings.ToValidUTF8(strings.ReplaceAll(s, "\x00", "\uFFFD"), "\uFFFD")
}

func optText(s string) *string {
	if s == "" {
		return nil
	}
	return ptr(clean(s))
}

// maxNumberLen bounds a JSON number's literal that goes into jsonb as a
// number; longer ones (and exponents past ±maxExponent) could overflow
// PostgreSQL's numeric and are kept as JSON strings.
const (
	maxNumberLen = 1000
	maxExponent  = 1000
)

// jsonText returns a JSON document as jsonb can hold it, or nil for none.
// Strings lose NUL characters (U+FFFD instead, as in clean) and numbers that
// numeric cannot hold become strings; everything else is the same document
// (jsonb then normalises whitespace and key order, as it always does).
func jsonText(raw json.RawMessage) *string {
	if len(raw) == 0 {
		return nil
	}
	if !needsFix(raw) {
		return ptr(string(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return ptr(string(raw)) // not JSON: let the database say so
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(fixJSON(v)); err != nil {
		return ptr(string(raw))
	}
	return ptr(strings.TrimSuffix(buf.String(), "\n"))
}

// needsFix reports whether a JSON document may hold what jsonb refuses: an
// escape in a string (\u0000 among them), an exponent or a long number.
func needsFix(raw []byte) bool {
	inString, run := false, 0 // run: length of the number literal being read
	for _, c := range raw {
		if inString {
			switch c {
			case '\\':
				return true
			case '"':
				inString = false
			}
			continue
		}
		switch {
		case c == '"':
			inString, run = true, 0
		case c >= '0' && c <= '9' || c == '.' || c == '-' || c == '+':
			if run++; run > maxNumberLen {
				return true
			}
		case (c == 'e' || c == 'E') && run > 0:
			return true
		default:
			run = 0
		}
	}
	return false
}

func fixJSON(v any) any {
	switch t := v.(type) {
	case string:
		return clean(t)
	case json.Number:
		if numericOK(string(t)) {
			return t
		}
		return string(t)
	case []any:
		for i := range t {
			t[i] = fixJSON(t[i])
		}
		return t
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[clean(k)] = fixJSON(e)
		}
		return out
	}
	return v
}

// numericOK reports whether PostgreSQL's numeric surely holds a JSON number.
func numericOK(n string) bool {
	if len(n) > maxNumberLen {
		return false
	}
	i := strings.IndexAny(n, "eE")
	if i < 0 {
		return true
	}
	exp := strings.TrimLeft(n[i+1:], "+-")
	exp = strings.TrimLeft(exp, "0")
	return len(exp) < 4 || (len(exp) == 4 && exp <= "1000")
}

func ptr[T any](v T) *T { return &v }
