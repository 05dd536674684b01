package domain_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/domain"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite the generated handoff-rule table in the docs")

const (
	ruleBegin = "<!-- BEGIN handoff-rule: generated from domain/rule.go; `go test ./domain -run TestRuleTableInDocs -update-docs` rewrites it -->"
	ruleEnd   = "<!-- END handoff-rule -->"
)

// renderRuleTable renders domain.HandoffRule as a Markdown table.
func renderRuleTable() string {
	var b strings.Builder
	b.WriteString("| event | from | written by | to | only for |\n|---|---|---|---|---|\n")
	// A worker row means the worker named in the current handoff (the text
	// around the table says so); "=" keeps the state.
	for _, r := range domain.HandoffRule() {
		from := make([]string, len(r.From))
		for i, s := range r.From {
			from[i] = "`" + string(s) + "`"
			if s == domain.StatusNew {
				from[i] = "(new stream)"
			}
		}
		owner := string(r.Owner)
		to := "="
		if r.To != "" {
			to = "`" + string(r.To) + "`"
		}
		guard := ""
		switch r.Guard {
		case domain.GuardPlain:
			guard = "run by a worker"
		case domain.GuardParent:
			guard = "`with_items` parent"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Event, strings.Join(from, ", "), owner, to, guard)
	}
	return b.String()
}

// TestRuleTableInDocs fails when the handoff rule in the docs drifts from
// domain/rule.go: every generated block in README.md and docs/*.md must be
// the table rendered from the code, and docs/handoff-rule.md must hold one.
func TestRuleTableInDocs(t *testing.T) {
	want := ruleBegin + "\n" + renderRuleTable() + ruleEnd
	files, _ := filepath.Glob("../docs/*.md")
	files = append(files, "../README.md")
	found := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		text := string(raw)
		var out strings.Builder
		for {
			i := strings.Index(text, ruleBegin)
			if i < 0 {
				out.WriteString(text)
				break
			}
			j := strings.Index(text[i:], ruleEnd)
			if j < 0 {
				t.Fatalf("%s: %q without %q", f, ruleBegin, ruleEnd)
			}
			found[f] = true
			got := text[i : i+j+len(ruleEnd)]
			if got != want && !*updateDocs {
				t.Errorf("%s: the handoff-rule table differs from domain/rule.go; run `go test ./domain -run TestRuleTableInDocs -update-docs`\ngot:\n%s\nwant:\n%s", f, got, want)
			}
			out.WriteString(text[:i] + want)
			text = text[i+j+len(ruleEnd):]
		}
		if *updateDocs && found[f] && out.String() != string(raw) {
			if err := os.WriteFile(f, []byte(out.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !found["../docs/handoff-rule.md"] {
		t.Errorf("docs/handoff-rule.md holds no generated handoff-rule table")
	}
}

// TestRuleTableCoversEveryExecutionEvent: each execution event has a row.
func TestRuleTableCoversEveryExecutionEvent(t *testing.T) {
	rows := map[string]bool{}
	for _, r := range domain.HandoffRule() {
		rows[r.Event] = true
		if len(r.From) == 0 {
			t.Errorf("%s by %s: a row with no from-state can never apply", r.Event, r.Owner)
		}
	}
	for _, typ := range domain.ExecutionEventTypes() {
		if !rows[typ] {
			t.Errorf("no handoff-rule row for %s", typ)
		}
	}
	if len(rows) != len(domain.ExecutionEventTypes()) {
		t.Errorf("%d event types have rows, %d are execution events", len(rows), len(domain.ExecutionEventTypes()))
	}
}
