// Command benchcompare compares the whole-system benchmarks of two builds of
// turnstile: a base revision and the current tree. It builds both (the base
// from `git archive` of --base into a temporary directory, the current tree
// as it is on disk, uncommitted changes included), then runs interleaved
// pairs of `turnstile bench lifecycle`, base and head alternating which goes
// first, and prints for each pair and as the median over the pairs: the
// throughput ratio, the CPU per execution ratio (the process's user + system
// time from its rusage, so the figure holds on a busy machine better than
// the wall clock), and the request → running p50 and p99 ratios. Each ratio
// is head / base: below 1 is better for CPU and latency, above 1 for
// throughput.
//
// Benchmarks (--bench, comma-separated):
//
//	lifecycle  embedded, 100 actions × max_concurrent 10, 100,000 executions
//	freeslot   embedded, 20,000 executions requested at 1,000/s (a free slot's latency)
//	postgres   PostgreSQL, River's pattern: 10 × 10, 20,000 executions, 64 submitters
//	           (needs TURNSTILE_POSTGRES_URL: run under scripts/with-postgres.sh;
//	           the CPU is the turnstile process's alone, not the cluster's)
//
// Only flags that every build since 4dcdc68 has are passed, so an older base
// runs the same command. `make bench-compare BASE=<rev>` runs it.
//
//	go run ./scripts/benchcompare --base 4dcdc68 --pairs 5 --bench lifecycle,freeslot
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// bench is one benchmark: the arguments after `turnstile bench lifecycle`.
type bench struct {
	name     string
	args     []string
	postgres bool
}

var benches = []bench{
	{name: "lifecycle", args: []string{"--executions", "100000", "--actions", "100", "--max-concurrent", "10"}},
	{name: "freeslot", args: []string{"--executions", "20000", "--rate", "1000"}},
	{name: "postgres", args: []string{"--executions", "20000", "--actions", "10", "--max-concurrent", "10", "--submitters", "64"}, postgres: true},
}

// result is one run: the JSON line's figures and the process's CPU.
type result struct {
	Executions     int     `json:"executions"`
	ExecutionsPerS float64 `json:"executions_per_s"`
	P50Millis      float64 `json:"p50_ms"`
	P99Millis      float64 `json:"p99_ms"`
	CPU            time.Duration
}

// cpuPerExec is the run's CPU per execution in µs.
func (r result) cpuPerExec() float64 {
	if r.Executions == 0 {
		return 0
	}
	return float64(r.CPU.Microseconds()) / float64(r.Executions)
}

func main() {
	base := flag.String("base", "", "the base revision (any git revision: a hash, a tag, HEAD~3)")
	pairs := flag.Int("pairs", 5, "interleaved pairs per benchmark")
	which := flag.String("bench", "lifecycle,freeslot", "benchmarks, comma-separated: lifecycle, freeslot, postgres")
	executions := flag.Int("executions", 0, "executions per run instead of each benchmark's own count (0: its own)")
	flag.Parse()
	if *base == "" || *pairs < 1 || *executions < 0 {
		fmt.Fprintln(os.Stderr, "usage: benchcompare --base REV [--pairs N] [--bench lifecycle,freeslot,postgres] [--executions N]")
		os.Exit(2)
	}
	chosen, err := pick(*which)
	check(err)
	for _, b := range chosen {
		if b.postgres && os.Getenv("TURNSTILE_POSTGRES_URL") == "" {
			check(errors.New("the postgres benchmark needs TURNSTILE_POSTGRES_URL (run under scripts/with-postgres.sh)"))
		}
	}

	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "benchcompare-")
	check(err)
	defer os.RemoveAll(tmp)
	rev, err := output(ctx, "git", "rev-parse", "--short", *base+"^{commit}")
	check(err)
	head, err := output(ctx, "git", "rev-parse", "--short", "HEAD")
	check(err)
	if dirty, _ := output(ctx, "git", "status", "--porcelain", "--untracked-files=no"); dirty != "" {
		head += "+changes"
	}
	bins := map[string]string{"base": filepath.Join(tmp, "turnstile-base"), "head": filepath.Join(tmp, "turnstile-head")}
	fmt.Fprintf(os.Stderr, "benchcompare: building base %s and head %s\n", rev, head)
	check(buildBase(ctx, rev, filepath.Join(tmp, "src"), bins["base"]))
	check(run(ctx, "", "go", "build", "-o", bins["head"], "./cmd/turnstile"))

	fmt.Printf("base %s, head %s; ratios are head / base (CPU and latency: < 1 is better; throughput: > 1)\n", rev, head)
	for _, b := range chosen {
		args := append([]string{"bench", "lifecycle", "--json"}, b.args...)
		if *executions > 0 {
			args = setFlag(args, "--executions", strconv.Itoa(*executions))
		}
		if b.postgres {
			args = append(args, "--store", os.Getenv("TURNSTILE_POSTGRES_URL"))
		}
		fmt.Printf("\n%s: turnstile %s\n", b.name, strings.Join(redact(args), " "))
		fmt.Printf("%-5s %-10s %10s %10s %7s %9s %9s %7s %8s %8s %7s %8s %8s %7s\n",
			"pair", "first", "base/s", "head/s", "ratio", "base µs", "head µs", "ratio", "base p50", "head p50", "ratio", "base p99", "head p99", "ratio")
		var rs [4][]float64
		for i := 0; i < *pairs; i++ {
			got := map[string]result{}
			for _, side := range order(i) {
				r, err := runBench(ctx, bins[side], args)
				check(err)
				got[side] = r
			}
			bs, hs := got["base"], got["head"]
			row := [4]float64{
				ratio(hs.ExecutionsPerS, bs.ExecutionsPerS),
				ratio(hs.cpuPerExec(), bs.cpuPerExec()),
				ratio(hs.P50Millis, bs.P50Millis),
				ratio(hs.P99Millis, bs.P99Millis),
			}
			for k := range rs {
				rs[k] = append(rs[k], row[k])
			}
			fmt.Printf("%-5d %-10s %10.0f %10.0f %7.3f %9.1f %9.1f %7.3f %8.3f %8.3f %7.3f %8.3f %8.3f %7.3f\n",
				i+1, order(i)[0], bs.ExecutionsPerS, hs.ExecutionsPerS, row[0], bs.cpuPerExec(), hs.cpuPerExec(), row[1],
				bs.P50Millis, hs.P50Millis, row[2], bs.P99Millis, hs.P99Millis, row[3])
		}
		fmt.Printf("median of %d pairs: throughput %.3f, CPU/execution %.3f, p50 %.3f, p99 %.3f\n",
			*pairs, median(rs[0]), median(rs[1]), median(rs[2]), median(rs[3]))
	}
}

// pick returns the benchmarks named in list, in the order named.
func pick(list string) ([]bench, error) {
	var out []bench
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		i := slices.IndexFunc(benches, func(b bench) bool { return b.name == name })
		if i < 0 {
			return nil, fmt.Errorf("unknown benchmark %q (lifecycle, freeslot, postgres)", name)
		}
		out = append(out, benches[i])
	}
	return out, nil
}

// order returns which build runs first in pair i: base first in even pairs,
// head first in odd ones, so neither always gets the warmer machine.
func order(i int) [2]string {
	if i%2 == 0 {
		return [2]string{"base", "head"}
	}
	return [2]string{"head", "base"}
}

// ratio returns a / b, 0 when b is 0 (no figure to compare).
func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

// median returns the median of xs (the mean of the middle two for an even
// count), 0 for none; xs is not changed.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// setFlag returns args with flag's value replaced by value.
func setFlag(args []string, flag, value string) []string {
	out := slices.Clone(args)
	for i := 0; i+1 < len(out); i++ {
		if out[i] == flag {
			out[i+1] = value
			return out
		}
	}
	return append(out, flag, value)
}

// redact hides a store URL's password in what is printed.
func redact(args []string) []string {
	out := slices.Clone(args)
	for i := range out {
		if i > 0 && out[i-1] == "--store" {
			out[i] = "$TURNSTILE_POSTGRES_URL"
		}
	}
	return out
}

// runBench runs one benchmark with bin and returns its JSON line's figures
// and the process's CPU time.
func runBench(ctx context.Context, bin string, args []string) (result, error) {
	cmd := exec.CommandContext(ctx, bin, args...)
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr := &tail{}
	cmd.Stderr = stderr
	if err := cmd.Run(); err != nil {
		return result{}, fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(redact(args), " "), err, stderr.buf)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r result
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return result{}, fmt.Errorf("%s: the last line is not the JSON result: %w", bin, err)
	}
	r.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	return r, nil
}

// buildBase writes revision rev's tree into dir and builds its turnstile
// into bin.
func buildBase(ctx context.Context, rev, dir, bin string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	archive := exec.CommandContext(ctx, "git", "archive", rev)
	untar := exec.CommandContext(ctx, "tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	if err := untar.Wait(); err != nil {
		return fmt.Errorf("untar %s: %w", rev, err)
	}
	return run(ctx, dir, "go", "build", "-o", bin, "./cmd/turnstile")
}

func run(ctx context.Context, dir, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return nil
}

func output(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// tail keeps the last 4 KiB written to it (a failed run's stderr).
type tail struct{ buf []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	return len(p), nil
}

var _ io.Writer = (*tail)(nil)

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}
