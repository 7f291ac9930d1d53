package eval_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
)

// BenchmarkEvalTask runs one eval task (a duplicate charge, seven steps,
// two approvals) per op, alone: what one task costs end to end, and how
// much of it is building the environment.
func BenchmarkEvalTask(b *testing.B) {
	k := loadKit(b)
	set, err := k.set.Filter("dup-electronics-needs-approval")
	if err != nil {
		b.Fatal(err)
	}
	d := loadAgent(b, "v7.yaml")
	var setup, total time.Duration
	b.ResetTimer()
	for range b.N {
		rep, err := eval.Run(context.Background(), eval.Options{Set: set, Agent: d, Tools: k.tools, Gateway: k.gw, Rates: k.rates, Parallel: 1, WorkDir: b.TempDir()})
		if err != nil || rep.Failed() != 0 {
			b.Fatalf("%v %s", err, failures(rep))
		}
		setup += rep.Results[0].Setup
		total += rep.Results[0].Duration
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/task")
	b.ReportMetric(float64(setup.Milliseconds())/float64(b.N), "setup-ms/task")
}

// BenchmarkEvalSet runs the whole card-dispute set per op with two tasks
// at a time (one per core).
func BenchmarkEvalSet(b *testing.B) {
	k := loadKit(b)
	d := loadAgent(b, "v7.yaml")
	var el time.Duration
	n := 0
	b.ResetTimer()
	for range b.N {
		rep, err := eval.Run(context.Background(), eval.Options{Set: k.set, Agent: d, Tools: k.tools, Gateway: k.gw, Rates: k.rates, Parallel: 2, WorkDir: b.TempDir()})
		if err != nil || rep.Failed() != 0 {
			b.Fatalf("%v %s", err, failures(rep))
		}
		el += rep.Elapsed
		n += len(rep.Results)
	}
	b.ReportMetric(float64(n)/el.Seconds(), "tasks/s")
	b.ReportMetric(float64(n)/float64(b.N), "tasks/op")
}

// BenchmarkReplay replays one recorded run on two versions per op (what
// eval compare does for each run), in fresh environments.
func BenchmarkReplay(b *testing.B) {
	ctx := context.Background()
	k := loadKit(b)
	set, _ := k.set.Filter("dup-electronics-needs-approval")
	dir := b.TempDir()
	src, err := platform.Open(ctx, platform.Options{DataDir: dir, Gateway: k.gw, Rates: k.rates})
	if err != nil {
		b.Fatal(err)
	}
	defer src.Close()
	base, cand := loadAgent(b, "v7.yaml"), loadAgent(b, "v8-reworded.yaml")
	if _, err := eval.Run(ctx, eval.Options{Set: set, Agent: base, Tools: k.tools, Gateway: k.gw, Rates: k.rates, WorkDir: dir,
		Record: func(ctx context.Context, p *platform.Platform, id string) error {
			return eval.CopyRun(ctx, p.Store, src.Store, id)
		}}); err != nil {
		b.Fatal(err)
	}
	runs, err := eval.SelectRuns(ctx, src.Store, eval.RunQuery{})
	if err != nil || len(runs) != 1 {
		b.Fatalf("%d runs, %v", len(runs), err)
	}
	var setup, total time.Duration
	b.ResetTimer()
	for range b.N {
		c, err := eval.Compare(ctx, eval.CompareOptions{Set: set, Base: base, Candidate: cand, Source: src, Runs: []*store.Run{runs[0]},
			Tools: k.tools, Gateway: k.gw, Rates: k.rates, Parallel: 1, WorkDir: b.TempDir(), Thresholds: eval.DefaultThresholds()})
		if err != nil || len(c.Regressions) != 0 {
			b.Fatalf("%v %v", err, c.Regressions)
		}
		for _, r := range append(c.Base.Results, c.Candidate.Results...) {
			setup += r.Setup
			total += r.Duration
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(2*b.N), "ms/replay")
	b.ReportMetric(float64(setup.Milliseconds())/float64(2*b.N), "setup-ms/replay")
}
