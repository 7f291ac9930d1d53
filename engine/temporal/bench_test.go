package temporal

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
)

// reportLatencies reports the p50 and p99 of ds, in milliseconds, as
// p50-ms and p99-ms (with prefix, when not empty, before them).
func reportLatencies(b *testing.B, prefix string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := min(int(q*float64(len(ds))), len(ds)-1)
		return float64(ds[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), prefix+"p50-ms")
	b.ReportMetric(at(0.99), prefix+"p99-ms")
}

// BenchmarkTemporalActivityRoundTrip measures the raw round trip of one
// activity from a workflow on the dev server: one op is one no-op
// activity of a sequential chain, and each latency is the time between the
// starts of two consecutive activities (the activity's completion reaching
// the server, a workflow task, the next activity's schedule and dispatch).
// Long chains continue as new under the default policy, as the engine will.
func BenchmarkTemporalActivityRoundTrip(b *testing.B) {
	_, c := devServer(b, client.Options{})
	starts := make(chan time.Time, 1<<17)
	acts := &stepActivity{starts: starts}
	q := startWorker(b, c, registerSteps(acts))
	// Warm up the worker's pollers and the server's caches.
	var st StepsState
	if _, err := execute(b, c, q, "warm", &st, stepsWorkflow, StepsState{Total: 5}); err != nil {
		b.Fatal(err)
	}
	b.Run("sequential", func(b *testing.B) {
		if b.N >= cap(starts) {
			b.Fatalf("b.N %d: at most %d activities a run", b.N, cap(starts)-1)
		}
		for len(starts) > 0 {
			<-starts
		}
		b.ResetTimer()
		if _, err := execute(b, c, q, fmt.Sprintf("roundtrip-%d", b.N), &st, stepsWorkflow, StepsState{Total: b.N}); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		var prev time.Time
		var ds []time.Duration
		for len(starts) > 0 {
			s := <-starts
			if !prev.IsZero() {
				ds = append(ds, s.Sub(prev))
			}
			prev = s
		}
		reportLatencies(b, "", ds)
	})
}

// BenchmarkTemporalWorkflow measures a whole workflow of N sequential no-op
// activities, from the client's start to its result: one op is one
// workflow; p50-ms and p99-ms are per workflow, act-ms the mean per
// activity.
func BenchmarkTemporalWorkflow(b *testing.B) {
	_, c := devServer(b, client.Options{})
	acts := &stepActivity{}
	q := startWorker(b, c, registerSteps(acts))
	var st StepsState
	if _, err := execute(b, c, q, "warm", &st, stepsWorkflow, StepsState{Total: 5}); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 10, 50} {
		b.Run(fmt.Sprintf("activities=%d", n), func(b *testing.B) {
			ds := make([]time.Duration, 0, b.N)
			var sum time.Duration
			for i := 0; b.Loop(); i++ {
				t0 := time.Now()
				if _, err := execute(b, c, q, fmt.Sprintf("wf-%d-%d-%d", n, b.N, i), &st, stepsWorkflow, StepsState{Total: n}); err != nil {
					b.Fatal(err)
				}
				d := time.Since(t0)
				ds = append(ds, d)
				sum += d
			}
			reportLatencies(b, "", ds)
			b.ReportMetric(float64(sum)/float64(len(ds)*n)/float64(time.Millisecond), "act-ms")
		})
	}
}

// BenchmarkTemporalEngineStep measures, on one dev server in one run, the
// raw round trip of a sequential activity (a chain of b.N no-op
// activities) and a step of the engine (b.N steps of a loop on the seam:
// a step boundary, then one activity whose result is appended to
// agentplane's log in SQLite, synchronous=full), and reports each mean
// and their ratio: what the engine adds to the round trips a step needs.
func BenchmarkTemporalEngineStep(b *testing.B) {
	_, c := devServer(b, client.Options{})
	q := startWorker(b, c, registerSteps(&stepActivity{}))
	var st StepsState
	if _, err := execute(b, c, q, "warm", &st, stepsWorkflow, StepsState{Total: 5}); err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	s, err := sqlite.Open(ctx, sqlite.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	acts, err := engine.NewActivities(engine.NewActivity("test.count", func(_ context.Context, in countIn) (countOut, error) {
		return countOut{Step: in.Step}, nil
	}))
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	t0 := time.Now()
	if _, err := execute(b, c, q, fmt.Sprintf("raw-%d", b.N), &st, stepsWorkflow, StepsState{Total: b.N}); err != nil {
		b.Fatal(err)
	}
	raw := time.Since(t0)
	e, err := New(Options{Client: c, TaskQueue: "bench-engine", Store: s, Workflow: countingWorkflow(b.N), Activities: acts, Poll: 20 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	id := fmt.Sprintf("steps-%d", b.N)
	if err := s.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		b.Fatal(err)
	}
	t1 := time.Now()
	if err := e.launch(ctx, id); err != nil {
		b.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if err := e.Work(wctx, engine.WorkOptions{Concurrency: 2, UntilIdle: true}); err != nil || wctx.Err() != nil {
		b.Fatalf("work: %v %v", err, wctx.Err())
	}
	steps := time.Since(t1)
	b.StopTimer()
	if r, err := s.GetRun(ctx, id); err != nil || r.Status != store.StatusCompleted {
		b.Fatalf("run: %+v %v", r, err)
	}
	perRaw := float64(raw) / float64(b.N) / float64(time.Millisecond)
	perStep := float64(steps) / float64(b.N) / float64(time.Millisecond)
	b.ReportMetric(perRaw, "raw-ms/activity")
	b.ReportMetric(perStep, "engine-ms/step")
	b.ReportMetric(perStep/perRaw, "step/raw")
}
