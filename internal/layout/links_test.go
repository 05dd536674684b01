package layout

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDocLinksResolve fails when a relative link of the README, BENCHMARKS.md,
// CHANGELOG.md or a page of docs/ names a file that does not exist.
func TestDocLinksResolve(t *testing.T) {
	pages, _ := filepath.Glob("../../docs/*.md")
	pages = append(pages, "../../README.md", "../../BENCHMARKS.md", "../../CHANGELOG.md")
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	checked := 0
	for _, page := range pages {
		raw, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(raw), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "#") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			target, _, _ = strings.Cut(target, "#")
			checked++
			if _, err := os.Stat(filepath.Join(filepath.Dir(page), target)); err != nil {
				t.Errorf("%s links to %s, which does not exist", strings.TrimPrefix(page, "../../"), m[1])
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d links checked: the pages are not where this test looks", checked)
	}
}
