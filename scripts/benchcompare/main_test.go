package main

import (
	"slices"
	"testing"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{0.9, 1.2, 0.8, 1.1, 1.0}, 1.0},
	} {
		in := slices.Clone(c.xs)
		if got := median(c.xs); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.xs, got, c.want)
		}
		if !slices.Equal(in, c.xs) {
			t.Errorf("median changed its input: %v, was %v", c.xs, in)
		}
	}
}

func TestRatio(t *testing.T) {
	t.Parallel()
	if got := ratio(3, 2); got != 1.5 {
		t.Errorf("ratio(3, 2) = %v, want 1.5 (head / base)", got)
	}
	if got := ratio(3, 0); got != 0 {
		t.Errorf("ratio(3, 0) = %v, want 0 (no base figure)", got)
	}
}

func TestPairsAlternateWhichGoesFirst(t *testing.T) {
	t.Parallel()
	firsts := map[string]int{}
	for i := 0; i < 6; i++ {
		o := order(i)
		if o[0] == o[1] || (o[0] != "base" && o[0] != "head") || (o[1] != "base" && o[1] != "head") {
			t.Fatalf("order(%d) = %v: want base and head once each", i, o)
		}
		if i > 0 && order(i - 1)[0] == o[0] {
			t.Errorf("pairs %d and %d both start with %s", i-1, i, o[0])
		}
		firsts[o[0]]++
	}
	if firsts["base"] != 3 || firsts["head"] != 3 {
		t.Errorf("in 6 pairs base went first %d times and head %d: want 3 each", firsts["base"], firsts["head"])
	}
	if order(0)[0] != "base" {
		t.Errorf("the first pair starts with %s, want base", order(0)[0])
	}
}

func TestPickAndSetFlag(t *testing.T) {
	t.Parallel()
	bs, err := pick("freeslot, lifecycle")
	if err != nil || len(bs) != 2 || bs[0].name != "freeslot" || bs[1].name != "lifecycle" {
		t.Fatalf("pick = %v, %v; want freeslot then lifecycle", bs, err)
	}
	if _, err := pick("lifecycle,nope"); err == nil {
		t.Error("pick accepted an unknown benchmark")
	}
	args := setFlag(benches[0].args, "--executions", "500")
	if i := slices.Index(args, "--executions"); i < 0 || args[i+1] != "500" || benches[0].args[i+1] != "100000" {
		t.Errorf("setFlag = %v (and the table's own %v): want --executions 500 in a copy", args, benches[0].args)
	}
	if got := setFlag([]string{"--json"}, "--rate", "9"); !slices.Equal(got, []string{"--json", "--rate", "9"}) {
		t.Errorf("setFlag on a missing flag = %v", got)
	}
}
