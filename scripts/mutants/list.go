package main

import (
	"fmt"
	"strings"
	"time"
)

// mutant is one planted bug: exact search/replace hunks on one file, and
// the test subset that must fail with it in place.
type mutant struct {
	Name    string
	Why     string
	File    string // slash path from the repository's root
	Pkg     string // the package whose tests must fail, e.g. ./domain
	Run     string // go test -run's pattern
	Timeout time.Duration
	Hunks   []hunk
	Line    int // where the mutant starts in the list
}

type hunk struct{ Old, New string }

// parse reads the list. Its format, one block per mutant:
//
//	=== name
//	why: one line on the bug it plants
//	file: path/from/root.go
//	test: ./pkg ^TestA$|^TestB$
//	timeout: 120s              (optional; 120s by default)
//	<<<<<<<
//	the exact text to find (it must occur exactly once)
//	=======
//	the text that replaces it
//	>>>>>>>
//
// Several <<<<<<< hunks may follow one another. Lines starting with # out
// of a hunk are comments.
func parse(text string) ([]*mutant, error) {
	var out []*mutant
	var cur *mutant
	lines := strings.Split(text, "\n")
	names := map[string]bool{}
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "=== "):
			cur = &mutant{Name: strings.TrimSpace(line[4:]), Timeout: 120 * time.Second, Line: i + 1}
			if names[cur.Name] {
				return nil, fmt.Errorf("line %d: mutant %q twice", i+1, cur.Name)
			}
			names[cur.Name] = true
			out = append(out, cur)
		case strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#"):
		case cur == nil:
			return nil, fmt.Errorf("line %d: %q before the first === mutant", i+1, line)
		case line == "<<<<<<<":
			var old, neu []string
			j := i + 1
			for ; j < len(lines) && lines[j] != "======="; j++ {
				old = append(old, lines[j])
			}
			k := j + 1
			for ; k < len(lines) && lines[k] != ">>>>>>>"; k++ {
				neu = append(neu, lines[k])
			}
			if k >= len(lines) {
				return nil, fmt.Errorf("line %d: hunk of %s has no ======= and >>>>>>>", i+1, cur.Name)
			}
			if len(old) == 0 {
				return nil, fmt.Errorf("line %d: hunk of %s finds nothing", i+1, cur.Name)
			}
			cur.Hunks = append(cur.Hunks, hunk{Old: strings.Join(old, "\n"), New: strings.Join(neu, "\n")})
			i = k
		default:
			key, val, ok := strings.Cut(line, ":")
			val = strings.TrimSpace(val)
			switch {
			case !ok:
				return nil, fmt.Errorf("line %d: %q is no key: value", i+1, line)
			case key == "why":
				cur.Why = val
			case key == "file":
				cur.File = val
			case key == "test":
				pkg, run, _ := strings.Cut(val, " ")
				cur.Pkg, cur.Run = pkg, strings.TrimSpace(run)
			case key == "timeout":
				d, err := time.ParseDuration(val)
				if err != nil {
					return nil, fmt.Errorf("line %d: %v", i+1, err)
				}
				cur.Timeout = d
			default:
				return nil, fmt.Errorf("line %d: unknown key %q", i+1, key)
			}
		}
	}
	for _, m := range out {
		if m.File == "" || m.Pkg == "" || m.Run == "" || len(m.Hunks) == 0 {
			return nil, fmt.Errorf("line %d: mutant %s needs file, test (package and pattern) and a hunk", m.Line, m.Name)
		}
	}
	return out, nil
}
