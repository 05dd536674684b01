package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestListApplies checks the whole curated list against the tree as it is,
// in a second, on every `go test ./...`: each mutant's hunks occur exactly
// once in its file (code that moved is found here, not only on the day the
// rotation reaches the mutant), its package exists, and every test its
// pattern names at the top level is a test function of that package.
func TestListApplies(t *testing.T) {
	root := filepath.Join("..", "..")
	text, err := os.ReadFile("mutants.txt")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := parse(string(text))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 20 {
		t.Fatalf("%d mutants in the list", len(ms))
	}
	name := regexp.MustCompile(`Test[A-Za-z0-9_]+`)
	for _, m := range ms {
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m.File)))
		if err != nil {
			t.Errorf("%s (mutants.txt line %d): %v", m.Name, m.Line, err)
			continue
		}
		for i, h := range m.Hunks {
			if n := strings.Count(string(src), h.Old); n != 1 {
				t.Errorf("%s (mutants.txt line %d): hunk %d occurs %d times in %s, want once: the code moved, move the mutant with it", m.Name, m.Line, i+1, n, m.File)
			}
		}
		dir := filepath.Join(root, filepath.FromSlash(strings.TrimPrefix(m.Pkg, "./")))
		files, _ := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if len(files) == 0 {
			t.Errorf("%s: package %s has no tests", m.Name, m.Pkg)
			continue
		}
		var all strings.Builder
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			all.Write(b)
		}
		top, _, _ := strings.Cut(m.Run, "/")
		for _, test := range name.FindAllString(top, -1) {
			if !strings.Contains(all.String(), "func "+test+"(t *testing.T)") {
				t.Errorf("%s (mutants.txt line %d): %s names %s, which %s does not define", m.Name, m.Line, m.Run, test, m.Pkg)
			}
		}
		if m.Timeout > 2*time.Minute {
			t.Errorf("%s: timeout %s; the list's tests must be fast", m.Name, m.Timeout)
		}
	}
}

// TestChooseRotates: -rotate picks consecutive windows on consecutive
// days, so that the list is covered in len/rotate days, and -only by name.
func TestChooseRotates(t *testing.T) {
	var all []*mutant
	for _, n := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		all = append(all, &mutant{Name: n})
	}
	names := func(ms []*mutant) (s string) {
		for _, m := range ms {
			s += m.Name
		}
		return s
	}
	seen := map[string]bool{}
	for day := int64(1); day <= 3; day++ {
		ms, err := choose(all, "", 3, day)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 3 {
			t.Fatalf("day %d: %s", day, names(ms))
		}
		for _, m := range ms {
			seen[m.Name] = true
		}
	}
	if len(seen) != len(all) {
		t.Fatalf("3 days of 3 cover %d of %d mutants", len(seen), len(all))
	}
	if ms, err := choose(all, "", 3, 1); err != nil || names(ms) != "def" {
		t.Fatalf("day 1: %s, %v", names(ms), err)
	}
	if ms, err := choose(all, "g,a", 0, 0); err != nil || names(ms) != "ga" {
		t.Fatalf("-only g,a: %s, %v", names(ms), err)
	}
	if _, err := choose(all, "zz", 0, 0); err == nil {
		t.Fatal("-only of an unknown name: no error")
	}
}

// TestParseRefusesBadLists: a list with a hunk that finds nothing, a
// mutant without a test, or a name twice is refused with its line.
func TestParseRefusesBadLists(t *testing.T) {
	for _, bad := range []string{
		"=== a\nfile: x.go\ntest: ./x .\n<<<<<<<\n=======\nnew\n>>>>>>>\n",
		"=== a\nfile: x.go\n<<<<<<<\nold\n=======\nnew\n>>>>>>>\n",
		"=== a\nfile: x.go\ntest: ./x .\n<<<<<<<\nold\n=======\nnew\n>>>>>>>\n=== a\nfile: x.go\ntest: ./x .\n<<<<<<<\nold\n=======\nnew\n>>>>>>>\n",
		"=== a\nfile: x.go\ntest: ./x .\n<<<<<<<\nold\n",
		"=== a\nbogus: 1\n",
	} {
		if _, err := parse(bad); err == nil {
			t.Errorf("parse accepted %q", bad)
		}
	}
}

// TestMutantFiguresInDocs: the figures the docs repeat about the list are
// the list's. BENCHMARKS.md's mutant-suite row counts the mutants of
// mutants.txt (its time was measured with that many: a mutant added means
// running make mutants again and recording both), and the daily window
// that README.md and BENCHMARKS.md state is the Makefile's -rotate.
func TestMutantFiguresInDocs(t *testing.T) {
	root := filepath.Join("..", "..")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	text := read("scripts/mutants/mutants.txt")
	ms, err := parse(text)
	if err != nil {
		t.Fatal(err)
	}
	if entries := len(regexp.MustCompile(`(?m)^=== `).FindAllString(text, -1)); entries != len(ms) {
		t.Fatalf("mutants.txt has %d \"=== \" entries, parse found %d mutants", entries, len(ms))
	}
	figure := func(file, pattern string) int {
		t.Helper()
		m := regexp.MustCompile(pattern).FindStringSubmatch(read(file))
		if m == nil {
			t.Fatalf("%s has no %s", file, pattern)
		}
		n, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := figure("BENCHMARKS.md", `\*\*(\d+) mutants, all killed\*\*`); n != len(ms) {
		t.Errorf("BENCHMARKS.md says %d mutants, all killed; mutants.txt holds %d: run make mutants and record its count and time", n, len(ms))
	}
	rotate := figure("Makefile", `scripts/mutants -rotate (\d+)`)
	if n := figure("README.md", `make test .*, (\d+) mutants, `); n != rotate {
		t.Errorf("README.md says make test runs %d mutants; the Makefile's -rotate is %d", n, rotate)
	}
	if n := figure("BENCHMARKS.md", `a daily window of (\d+) `); n != rotate {
		t.Errorf("BENCHMARKS.md says a daily window of %d mutants; the Makefile's -rotate is %d", n, rotate)
	}
}
