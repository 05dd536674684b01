package remote_test

import (
	"context"
	"fmt"
	"github.com/turnstile/turnstile/services/remote"
	"testing"
)

// BenchmarkSessionRuns: what the serial fence costs a session's runs, on
// memstore with and without atomic multi-stream appends. One op is one
// run: its start (a running report, or a start poll of up to 32) and its
// completed report; the handoffs are written and polled outside the timer.
// appends/run counts every append the runs made (worker stream included).
func BenchmarkSessionRuns(b *testing.B) {
	for _, single := range []bool{false, true} {
		for _, start := range []string{"report", "poll32"} {
			log := "atomic"
			if single {
				log = "single-stream"
			}
			b.Run(fmt.Sprintf("%s/%s", log, start), func(b *testing.B) { benchSessionRuns(b, single, start == "poll32") })
		}
	}
}

func benchSessionRuns(b *testing.B, single, poll bool) {
	ctx := context.Background()
	f := newFixture(b, single)
	op, err := f.rs.Register(ctx, remote.Registration{Name: "w1", Runners: []string{"my.job"}, Slots: 32}, "127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	ss, err := f.rs.Authenticate("w1", op.Session)
	if err != nil {
		b.Fatal(err)
	}
	var appends, runs uint64
	for done := 0; done < b.N; {
		n := min(32, b.N-done)
		b.StopTimer()
		ids := make([]string, n)
		for i := range ids {
			ids[i] = fmt.Sprintf("x%d", done+i)
			f.request(b, ids[i])
			f.hand(b, ids[i], ss.Incarnation())
		}
		f.pollFor(b, ss, ids...) // delivered: a start poll without wait returns them (not reported on yet)
		h := f.head(b)
		b.StartTimer()
		if poll {
			res, err := f.rs.PollStart(ctx, ss, -1, 0)
			if err != nil || len(res.Assignments) != n {
				b.Fatalf("start poll: %d of %d, %v", len(res.Assignments), n, err)
			}
		}
		for _, id := range ids {
			if !poll {
				if _, err := f.rs.Report(ctx, ss, remote.Report{Execution: id, Status: remote.ReportRunning}); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := f.rs.Report(ctx, ss, remote.Report{Execution: id, Status: remote.ReportCompleted}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		appends += f.head(b) - h
		runs += uint64(n)
		done += n
		b.StartTimer()
	}
	b.ReportMetric(float64(appends)/float64(runs), "appends/run")
}
