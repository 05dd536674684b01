package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestGuaranteesNameRealTests fails when docs/guarantees.md names a test
// that no _test.go file of the repository declares (`func TestName(`), or
// has a promise row that names no test at all: a promise there is only
// as good as the test that proves it.
func TestGuaranteesNameRealTests(t *testing.T) {
	raw, err := os.ReadFile("../../docs/guarantees.md")
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	decl := regexp.MustCompile(`(?m)^func (Test\w+)\(`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range decl.FindAllSubmatch(src, -1) {
			declared[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	named := regexp.MustCompile("`(Test\\w+)`")
	rows := 0
	for i, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| promise") || strings.HasPrefix(line, "|---") {
			continue
		}
		rows++
		cells := strings.Split(line, "|")
		last := cells[len(cells)-2]
		tests := named.FindAllStringSubmatch(last, -1)
		if len(tests) == 0 {
			t.Errorf("docs/guarantees.md:%d: a promise without a test: %s", i+1, line)
		}
		for _, m := range tests {
			if !declared[m[1]] {
				t.Errorf("docs/guarantees.md:%d: %s is not a test of this repository (no func %s( in a _test.go file)", i+1, m[1], m[1])
			}
		}
	}
	if rows < 20 {
		t.Errorf("docs/guarantees.md holds %d promises; the test reads too few to be the page", rows)
	}
}
