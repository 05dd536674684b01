package api_test

import (
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
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
