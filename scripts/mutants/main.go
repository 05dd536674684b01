// Command mutants plants each bug of a curated list (mutants.txt) into a
// scratch copy of the tree, one at a time, and runs the fast test subset the
// list names for it: every mutant must make that subset fail within its time
// bound. A mutant the tests survive, one whose patch no longer applies (the
// code moved: the list must move with it), one that does not compile and one
// whose tests hang past the bound all fail the run. It prints a table:
// mutant, verdict, the tests that killed it, seconds.
//
//	go run ./scripts/mutants                 # every mutant (make mutants)
//	go run ./scripts/mutants -rotate 8       # 8 of them, chosen by the day (make test)
//	go run ./scripts/mutants -only fifo,limit
//	go run ./scripts/mutants -list
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	listPath := flag.String("file", "scripts/mutants/mutants.txt", "the curated list of mutants")
	rotate := flag.Int("rotate", 0, "run only this many mutants, a window of the list chosen by the day (0: all)")
	day := flag.Int64("day", 0, "with -rotate: the day number choosing the window (0: today's, UTC)")
	only := flag.String("only", "", "comma-separated names of the mutants to run")
	list := flag.Bool("list", false, "print the mutants and exit")
	baseline := flag.Bool("baseline", true, "first run every chosen test subset on the unmutated copy: it must pass")
	keep := flag.Bool("keep", false, "keep the scratch copy (its path is printed)")
	flag.Parse()

	root, err := os.Getwd()
	if err != nil {
		fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, *listPath))
	if err != nil {
		fatal(err)
	}
	all, err := parse(string(text))
	if err != nil {
		fatal(fmt.Errorf("%s: %w", *listPath, err))
	}
	if *list {
		for _, m := range all {
			fmt.Printf("%-28s %-44s %s\n", m.Name, m.File, m.Why)
		}
		return
	}
	chosen, err := choose(all, *only, *rotate, *day)
	if err != nil {
		fatal(err)
	}
	scratch, err := os.MkdirTemp("", "turnstile-mutants-")
	if err != nil {
		fatal(err)
	}
	if *keep {
		fmt.Println("scratch copy:", scratch)
	} else {
		defer os.RemoveAll(scratch)
	}
	if err := copyTree(root, scratch); err != nil {
		fatal(err)
	}
	start := time.Now()
	fmt.Printf("%d of %d mutants, in a scratch copy of the tree (%s)\n", len(chosen), len(all), scratch)
	if *baseline {
		if err := runBaseline(scratch, chosen); err != nil {
			fmt.Println(err)
			os.Exit(1)
		}
	}
	results := make([]result, 0, len(chosen))
	for _, m := range chosen {
		r := runMutant(scratch, m)
		fmt.Printf("  %-28s %-9s %6.1fs  %s\n", m.Name, r.Verdict, r.Seconds, r.Detail)
		results = append(results, r)
	}
	failed := printTable(results)
	fmt.Printf("%d mutants in %s\n", len(results), time.Since(start).Round(time.Second))
	if failed > 0 {
		fmt.Printf("FAIL: %d of %d mutants were not killed by their tests (see the table; a moved patch must be moved in %s)\n", failed, len(results), *listPath)
		os.Exit(1)
	}
}

// choose picks the mutants to run: by name, or a window of -rotate of them
// starting at day*rotate (mod the list's length), so that consecutive days
// cover the whole list.
func choose(all []*mutant, only string, rotate int, day int64) ([]*mutant, error) {
	if only != "" {
		var out []*mutant
		for _, name := range strings.Split(only, ",") {
			found := false
			for _, m := range all {
				if m.Name == strings.TrimSpace(name) {
					out, found = append(out, m), true
				}
			}
			if !found {
				return nil, fmt.Errorf("no mutant named %q", name)
			}
		}
		return out, nil
	}
	if rotate <= 0 || rotate >= len(all) {
		return all, nil
	}
	if day == 0 {
		day = time.Now().UTC().Unix() / 86400
	}
	first := int((day * int64(rotate)) % int64(len(all)))
	out := make([]*mutant, 0, rotate)
	for i := 0; i < rotate; i++ {
		out = append(out, all[(first+i)%len(all)])
	}
	return out, nil
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "mutants:", err)
	os.Exit(2)
}
