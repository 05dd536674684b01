package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// result is one mutant's verdict.
type result struct {
	Name     string
	Verdict  string // killed, SURVIVED, MOVED, NO-BUILD, HUNG
	KilledBy string
	Seconds  float64
	Detail   string
}

func (r result) ok() bool { return r.Verdict == "killed" }

// copyTree copies the repository's files (not .git, bin or data) to dst.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			switch rel {
			case ".git", "bin", "data":
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, info.Mode().Perm())
	})
}

// goTest runs one test subset in dir with a bound; it returns the output,
// whether it failed, and whether it hit the bound.
func goTest(dir, pkg, run string, bound time.Duration) (out string, failed, hung bool) {
	ctx, cancel := context.WithTimeout(context.Background(), bound+30*time.Second)
	defer cancel()
	// go test's own -timeout makes a hang a panic with every goroutine's stack.
	cmd := exec.CommandContext(ctx, "go", "test", "-count=1", "-timeout", bound.String(), "-run", run, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "TURNSTILE_MUTANT=1")
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	err := cmd.Run()
	out = buf.String()
	hung = ctx.Err() != nil || strings.Contains(out, "panic: test timed out after")
	return out, err != nil, hung
}

var failLine = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// killers are the failed tests, top-level names first-seen order.
func killers(out string) string {
	var names []string
	seen := map[string]bool{}
	for _, m := range failLine.FindAllStringSubmatch(out, -1) {
		n := m[1]
		if top, _, ok := strings.Cut(n, "/"); ok && seen[top] {
			continue
		}
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	if len(names) > 3 {
		names = append(names[:3], fmt.Sprintf("+%d", len(names)-3))
	}
	return strings.Join(names, " ")
}

// runBaseline runs each distinct test subset once on the unmutated copy:
// a subset that fails without a mutant would kill every mutant.
func runBaseline(dir string, ms []*mutant) error {
	done := map[string]bool{}
	for _, m := range ms {
		key := m.Pkg + " " + m.Run
		if done[key] {
			continue
		}
		done[key] = true
		start := time.Now()
		out, failed, hung := goTest(dir, m.Pkg, m.Run, m.Timeout)
		fmt.Printf("  baseline %-24s %-40s %5.1fs\n", m.Pkg, m.Run, time.Since(start).Seconds())
		if failed || hung {
			return fmt.Errorf("FAIL: the unmutated tree fails %s -run %q (so it proves nothing about %s):\n%s", m.Pkg, m.Run, m.Name, tail(out, 40))
		}
	}
	return nil
}

// runMutant plants m in dir, runs its tests, and restores the file.
func runMutant(dir string, m *mutant) result {
	r := result{Name: m.Name}
	path := filepath.Join(dir, filepath.FromSlash(m.File))
	orig, err := os.ReadFile(path)
	if err != nil {
		r.Verdict, r.Detail = "MOVED", fmt.Sprintf("%s: %v (mutants.txt line %d must follow the code)", m.File, err, m.Line)
		return r
	}
	text := string(orig)
	for i, h := range m.Hunks {
		switch n := strings.Count(text, h.Old); n {
		case 1:
			text = strings.Replace(text, h.Old, h.New, 1)
		default:
			r.Verdict = "MOVED"
			r.Detail = fmt.Sprintf("hunk %d of mutants.txt line %d occurs %d times in %s, not once: the code moved; move the mutant with it", i+1, m.Line, n, m.File)
			return r
		}
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		r.Verdict, r.Detail = "MOVED", err.Error()
		return r
	}
	defer func() {
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			fatal(fmt.Errorf("restoring %s: %w", m.File, err))
		}
	}()
	start := time.Now()
	out, failed, hung := goTest(dir, m.Pkg, m.Run, m.Timeout)
	r.Seconds = time.Since(start).Seconds()
	switch {
	case strings.Contains(out, "[build failed]") || strings.Contains(out, "[setup failed]") || isVetFail(out):
		r.Verdict, r.Detail = "NO-BUILD", "the mutant does not compile: "+firstLine(out)
	case hung:
		r.Verdict, r.Detail = "HUNG", fmt.Sprintf("the tests hung past %s instead of failing", m.Timeout)
	case !failed:
		r.Verdict, r.Detail = "SURVIVED", fmt.Sprintf("%s -run %q passed with the bug in %s", m.Pkg, m.Run, m.File)
	default:
		r.Verdict, r.KilledBy = "killed", killers(out)
		if r.KilledBy == "" {
			r.KilledBy = firstLine(out)
		}
		r.Detail = r.KilledBy
	}
	return r
}

func isVetFail(out string) bool {
	return strings.Contains(out, "go vet") || strings.Contains(out, "vet:")
}

func firstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return l
		}
	}
	return ""
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// printTable prints the results as a markdown table and returns how many
// were not killed.
func printTable(rs []result) int {
	fmt.Println()
	fmt.Println("| mutant | verdict | killed by | seconds |")
	fmt.Println("|---|---|---|---|")
	bad := 0
	for _, r := range rs {
		by := r.KilledBy
		if !r.ok() {
			bad++
			by = r.Detail
		}
		fmt.Printf("| %s | %s | %s | %.1f |\n", r.Name, r.Verdict, by, r.Seconds)
	}
	return bad
}
