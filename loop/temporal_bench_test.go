package loop_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/engine/temporal"
	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// rawChain is the raw round trip a step is compared with: n sequential
// no-op activities from one workflow.
func rawChain(ctx workflow.Context, n int) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for i := range n {
		if err := workflow.ExecuteActivity(ctx, "bench.noop", i).Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkTemporalLoopStep measures a step of the real agent loop on the
// Temporal engine (the platform with a temporal:// engine: a zero-latency
// scripted model, the no-op tier-1 tool echo, the durable SQLite log)
// against the raw round trip of a no-op activity, interleaved on one dev
// server: each op is one raw chain, then one run of the loop. It reports
//
//	step-ms, step-p50-ms       a step (the gaps between step_started events)
//	raw-ms, raw-p50-ms         one activity of the raw chain
//	acts/step                  the loop's activities a step executes (from
//	                           the run's Temporal history)
//	appends/step, wft/step     the engine's own append activities and the
//	                           workflow tasks a step costs
//	ratio, ratio-p50           step / (acts/step x raw), on means and medians
//	wft-ms/step, exec-ms/step, sched-ms/step
//	                           where a step's time goes on the server's clock:
//	                           workflow tasks (scheduled to completed), the
//	                           activities' own run (started to completed) and
//	                           their schedule-to-start, summed per step
//	raw-wft-ms/act, raw-exec-ms/act, raw-sched-ms/act
//	                           the same for one activity of the raw chain
func BenchmarkTemporalLoopStep(b *testing.B) {
	srv := temporaltest.Start(b, temporaltest.Options{})
	c := srv.Client(b, client.Options{})
	const steps = 40
	url := "temporal://" + srv.HostPort + "?namespace=" + temporaltest.Namespace + "&task_queue=bench-loop"
	f := newFixture(&testing.T{}, fixtureOptions{budgets: benchBudgets, models: benchModel{steps: steps, tool: "echo"}, dir: b.TempDir(), engine: url})
	defer f.p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	worked := make(chan error, 1)
	go func() { worked <- f.p.Engine.Work(ctx, engine.WorkOptions{Concurrency: 4}) }()
	defer func() {
		cancel()
		if err := <-worked; err != nil {
			b.Error(err)
		}
	}()

	starts := make(chan time.Time, 1<<14)
	w := worker.New(c, "bench-raw", worker.Options{})
	w.RegisterWorkflowWithOptions(rawChain, workflow.RegisterOptions{Name: "bench.raw_chain"})
	w.RegisterActivityWithOptions(func(_ context.Context, i int) (int, error) {
		select {
		case starts <- time.Now():
		default:
		}
		return i, nil
	}, activity.RegisterOptions{Name: "bench.noop"})
	if err := w.Start(); err != nil {
		b.Fatal(err)
	}
	defer w.Stop()

	raw := func(id string) []time.Duration {
		for len(starts) > 0 {
			<-starts
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Minute)
		defer rcancel()
		run, err := c.ExecuteWorkflow(rctx, client.StartWorkflowOptions{ID: id, TaskQueue: "bench-raw"}, "bench.raw_chain", 3*steps)
		if err == nil {
			err = run.Get(rctx, nil)
		}
		if err != nil {
			b.Fatalf("raw chain: %v", err)
		}
		var ds []time.Duration
		var prev time.Time
		for len(starts) > 0 {
			s := <-starts
			if !prev.IsZero() {
				ds = append(ds, s.Sub(prev))
			}
			prev = s
		}
		return ds
	}
	loopRun := func() (string, []time.Duration) {
		r, err := f.p.Runs.Start(ctx, runs.StartRequest{Agent: "tester@1", Task: "bench", Tenant: "t1", User: "alice"})
		if err != nil {
			b.Fatal(err)
		}
		// The workflow id is the run id: wait on the server (a long poll),
		// not by polling the store.
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Minute)
		err = c.GetWorkflow(wctx, r.ID, "").Get(wctx, nil)
		wcancel()
		if err != nil {
			b.Fatalf("run %s: %v", r.ID, err)
		}
		if got, err := f.p.Store.GetRun(ctx, r.ID); err != nil || got.Status != store.StatusCompleted {
			b.Fatalf("run %s: %+v %v", r.ID, got, err)
		}
		evs, err := f.p.Store.Events(ctx, r.ID, 0, 0)
		if err != nil {
			b.Fatal(err)
		}
		var ds []time.Duration
		var prev time.Time
		for _, ev := range evs {
			if ev.Type == trace.EvStepStarted {
				if !prev.IsZero() {
					ds = append(ds, ev.At.Sub(prev))
				}
				prev = ev.At
			}
		}
		return r.ID, ds
	}
	// Warm both workers, the server's caches and the store.
	raw("raw-warm")
	loopRun()

	var rawDs, stepDs []time.Duration
	var tally, rawTally historyTally
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rid := fmt.Sprintf("raw-%d-%d", b.N, i)
		rawDs = append(rawDs, raw(rid)...)
		rawTally.add(b, c, rid)
		id, ds := loopRun()
		stepDs = append(stepDs, ds...)
		tally.add(b, c, id)
	}
	b.StopTimer()
	nSteps := float64(tally.steps)
	acts := float64(tally.loopActs) / nSteps
	rawMean, rawP50 := meanMs(rawDs), p50Ms(rawDs)
	stepMean, stepP50 := meanMs(stepDs), p50Ms(stepDs)
	b.ReportMetric(stepMean, "step-ms")
	b.ReportMetric(stepP50, "step-p50-ms")
	b.ReportMetric(rawMean, "raw-ms")
	b.ReportMetric(rawP50, "raw-p50-ms")
	b.ReportMetric(acts, "acts/step")
	b.ReportMetric(float64(tally.appends)/nSteps, "appends/step")
	b.ReportMetric(float64(tally.wfts)/nSteps, "wft/step")
	b.ReportMetric(stepMean/(acts*rawMean), "ratio")
	b.ReportMetric(stepP50/(acts*rawP50), "ratio-p50")
	b.ReportMetric(ms(tally.wft)/nSteps, "wft-ms/step")
	b.ReportMetric(ms(tally.exec)/nSteps, "exec-ms/step")
	b.ReportMetric(ms(tally.sched)/nSteps, "sched-ms/step")
	rawActs := float64(rawTally.loopActs)
	b.ReportMetric(ms(rawTally.wft)/rawActs, "raw-wft-ms/act")
	b.ReportMetric(ms(rawTally.exec)/rawActs, "raw-exec-ms/act")
	b.ReportMetric(ms(rawTally.sched)/rawActs, "raw-sched-ms/act")
	b.ReportMetric(0, "ns/op")
}

// historyTally sums, over runs' Temporal histories, what their steps cost
// on the server.
type historyTally struct {
	steps, loopActs, appends, wfts int
	wft, exec, sched               time.Duration
}

// add fetches the history of the run id (a run this short does not
// continue as new) and adds it up.
func (h *historyTally) add(b *testing.B, c client.Client, id string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	byID := map[int64]*historypb.HistoryEvent{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			b.Fatalf("history of %s: %v", id, err)
		}
		byID[ev.GetEventId()] = ev
		at := ev.GetEventTime().AsTime()
		switch ev.GetEventType() {
		case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			name := ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
			switch name {
			case temporal.ActivityAppend:
				h.appends++
			case "loop.model_call":
				// One model call a step.
				h.steps++
				h.loopActs++
			default:
				h.loopActs++
			}
		case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if s := byID[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; s != nil {
				h.sched += at.Sub(s.GetEventTime().AsTime())
			}
		case enums.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			if s := byID[ev.GetActivityTaskCompletedEventAttributes().GetStartedEventId()]; s != nil {
				h.exec += at.Sub(s.GetEventTime().AsTime())
			}
		case enums.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			h.wfts++
		case enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
			if s := byID[ev.GetWorkflowTaskCompletedEventAttributes().GetScheduledEventId()]; s != nil {
				h.wft += at.Sub(s.GetEventTime().AsTime())
			}
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func meanMs(ds []time.Duration) float64 {
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return ms(sum) / float64(max(1, len(ds)))
}

func p50Ms(ds []time.Duration) float64 {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return ms(s[len(s)/2])
}
