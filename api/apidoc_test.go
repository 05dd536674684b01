package api_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/turnstile/turnstile/client/wire"
	"github.com/turnstile/turnstile/domain"
	"github.com/turnstile/turnstile/projections"
)

// docRoute finds a route in docs/api.md: a table row that starts with
// `METHOD /path`.
var docRoute = regexp.MustCompile("(?m)^\\| `(GET|POST|PUT|PATCH|DELETE) (/[^` ]*)` \\|")

// TestAPIDocMatchesOpenAPI fails when a route of the OpenAPI document the
// server serves is missing from docs/api.md, or docs/api.md lists a route
// the document does not have.
func TestAPIDocMatchesOpenAPI(t *testing.T) {
	a, _ := newTestAPI(t, nil)
	doc := loadOpenAPI(t, a.srv.Handler())
	served := map[string]bool{}
	for path, ops := range doc.Paths {
		for method := range ops {
			switch m := strings.ToUpper(method); m {
			case "GET", "POST", "PUT", "PATCH", "DELETE":
				served[m+" "+path] = true
			}
		}
	}
	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docRoute.FindAllStringSubmatch(string(raw), -1) {
		documented[m[1]+" "+m[2]] = true
	}
	if len(served) == 0 || len(documented) == 0 {
		t.Fatalf("%d routes served, %d documented", len(served), len(documented))
	}
	var missing, extra []string
	for r := range served {
		if !documented[r] {
			missing = append(missing, r)
		}
	}
	for r := range documented {
		if !served[r] {
			extra = append(extra, r)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	for _, r := range missing {
		t.Errorf("the OpenAPI document has %s; docs/api.md does not (add a row \"| `%s` | … |\")", r, r)
	}
	for _, r := range extra {
		t.Errorf("docs/api.md lists %s; the OpenAPI document served at /api/v1/openapi.json does not", r)
	}
}

// docTableRows returns the rows of the docs/api.md table whose header row
// is header, up to the first line that is not a row.
func docTableRows(t *testing.T, doc, header string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+header+"\n")
	if !ok {
		t.Fatalf("docs/api.md has no table headed %q", header)
	}
	var rows []string
	for _, line := range strings.Split(rest, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if !strings.HasPrefix(line, "|---") {
			rows = append(rows, line)
		}
	}
	return rows
}

// TestAPIDocPolicyTable fails when a field of the policy document (the
// body of POST /api/v1/actions, as the Go client and the server decode
// it) has no row in docs/api.md's policy table, or a field of retry or
// rate_limit is missing from its row.
func TestAPIDocPolicyTable(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := docTableRows(t, string(raw), "| field | default | range |")
	rowOf := func(field string) string {
		for _, r := range rows {
			first, _, _ := strings.Cut(strings.TrimPrefix(r, "|"), "|")
			if strings.Contains(first, "`"+field+"`") {
				return r
			}
		}
		return ""
	}
	fields := map[string]bool{}
	for _, f := range append(jsonFields(reflect.TypeOf(wire.Policy{})), jsonFields(reflect.TypeOf(domain.Policy{}))...) {
		fields[f] = true
	}
	for f := range fields {
		if rowOf(f) == "" {
			t.Errorf("the policy field %q has no row in docs/api.md's policy table", f)
		}
	}
	for field, typ := range map[string]reflect.Type{"retry": reflect.TypeOf(wire.Retry{}), "rate_limit": reflect.TypeOf(wire.RateLimit{})} {
		row := rowOf(field)
		for _, sub := range jsonFields(typ) {
			if row != "" && !strings.Contains(row, `"`+sub+`"`) {
				t.Errorf("docs/api.md's %s row does not show %q", field, sub)
			}
		}
	}
}

// TestAPIDocAnswerFields fails when an answer's row in docs/api.md does not
// name every field of the document the route answers.
func TestAPIDocAnswerFields(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	policy := map[string]bool{}
	for _, f := range jsonFields(reflect.TypeOf(wire.Policy{})) {
		policy[f] = true // the policy table has them
	}
	for route, typ := range map[string]reflect.Type{
		"GET /api/v1/executions/{id}/explain":   reflect.TypeOf(wire.Explanation{}),
		"GET /api/v1/actions/{ref}/queue-stats": reflect.TypeOf(wire.QueueStats{}),
		"GET /api/v1/actions/{ref}":             reflect.TypeOf(wire.Action{}),
	} {
		var row string
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, "| `"+route+"` |") {
				row = line
			}
		}
		if row == "" {
			t.Errorf("docs/api.md has no row for %s", route)
			continue
		}
		for _, f := range jsonFields(typ) {
			if !policy[f] && !strings.Contains(row, `"`+f+`"`) && !strings.Contains(row, "`"+f+"`") {
				t.Errorf("docs/api.md's row for %s does not name %q", route, f)
			}
		}
	}
}

// TestAPIDocProblemTypes fails when a problem type the server can answer
// (any "https://turnstile.dev/problems/…" in the package's code) is not
// listed in docs/api.md.
func TestAPIDocProblemTypes(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	problem := regexp.MustCompile(`https://turnstile\.dev/problems/([a-z0-9-]+)`)
	seen := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range problem.FindAllStringSubmatch(string(src), -1) {
			if !seen[m[1]] && !strings.Contains(string(raw), "…/"+m[1]+"`") && !strings.Contains(string(raw), m[0]+"`") {
				t.Errorf("docs/api.md does not list the problem type %s (%s)", m[0], f)
			}
			seen[m[1]] = true
		}
	}
	if len(seen) < 10 {
		t.Fatalf("found %d problem types in the code", len(seen))
	}
}

// TestAPIDocExecutionState fails when docs/api.md's paragraph on an
// execution's state does not name a field the server answers, or a code it
// may carry.
func TestAPIDocExecutionState(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, para, ok := strings.Cut(string(raw), "\nAn execution's state: ")
	if !ok {
		t.Fatal(`docs/api.md has no paragraph "An execution's state: …"`)
	}
	para, _, _ = strings.Cut(para, "\n\n")
	for _, f := range jsonFields(reflect.TypeOf(projections.ExecutionView{})) {
		if !strings.Contains(para, "`"+f+"`") {
			t.Errorf("docs/api.md's execution state does not name %q", f)
		}
	}
	for _, code := range []string{domain.RejectUnknownAction, domain.RejectQueueFull, domain.RejectNoSlot, domain.RejectInvalidInput,
		domain.RejectRateLimited, domain.FailScheduledTimeout, domain.FailWorkerLost, domain.FailDrain, domain.FailItems,
		domain.CancelRequested, domain.CancelQueueTimeout, domain.CancelParentCancelled} {
		if !strings.Contains(para, "`"+code+"`") {
			t.Errorf("docs/api.md's execution state does not list the code %q", code)
		}
	}
}
