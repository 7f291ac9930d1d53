package temporal

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

type countIn struct {
	Key  string `json:"key"`
	Step int    `json:"step"`
}

type countOut struct {
	Step int `json:"step"`
}

// countingWorkflow runs n steps of one activity each; each step starts at
// a step boundary (Signals), where a long run continues as new.
func countingWorkflow(n int) engine.Workflow {
	return func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		sum := 0
		for step := 1; step <= n; step++ {
			if _, err := env.Signals(ctx, step); err != nil {
				return engine.Outcome{}, err
			}
			ev, err := env.Execute(ctx, engine.Call{Activity: "test.count", Event: "counted", Step: step, Durability: engine.Durable,
				Input: countIn{Key: engine.IdempotencyKey(env.Run().ID, step, 0), Step: step}})
			if err != nil {
				return engine.Outcome{}, err
			}
			var out countOut
			if err := json.Unmarshal(ev.Payload, &out); err != nil {
				return engine.Outcome{}, err
			}
			sum += out.Step
			env.Report(engine.Counters{Steps: step})
		}
		if _, err := env.Record(ctx, "ended", n, engine.Durable, sum); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: fmt.Sprint(sum)}, nil
	}
}

// TestLongRunContinuesAsNew: a 2,000-step run on the Temporal engine
// continues as new under the same workflow (= run) id whenever its
// history reaches the policy's bound, and completes; every run of the
// chain stays far below Temporal's history warning; no activity ran twice
// across the continuations; agentplane's log verifies and re-runs.
func TestLongRunContinuesAsNew(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 steps on a dev server: a few minutes")
	}
	const total = 2000
	_, c := devServer(t, client.Options{})
	ctx := context.Background()
	st := tempStore(t)
	var calls atomic.Int64
	seen := make([]atomic.Int32, total+1)
	acts, err := engine.NewActivities(engine.NewActivity("test.count", func(_ context.Context, in countIn) (countOut, error) {
		calls.Add(1)
		seen[in.Step].Add(1)
		return countOut{Step: in.Step}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Client: c, TaskQueue: "long", Store: st, Workflow: countingWorkflow(total), Activities: acts, Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const id = "long-run"
	if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "count", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	if err := e.launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	begun := time.Now()
	if err := e.Work(wctx, engine.WorkOptions{Concurrency: 4, UntilIdle: true}); err != nil || wctx.Err() != nil {
		t.Fatalf("work: %v %v", err, wctx.Err())
	}
	elapsed := time.Since(begun)
	run, err := st.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprint(total * (total + 1) / 2); run.Status != store.StatusCompleted || run.Result != want || run.Steps != total {
		t.Fatalf("run = %s %q, %d steps; want completed %s after %d", run.Status, run.Result, run.Steps, want, total)
	}
	for step := 1; step <= total; step++ {
		if n := seen[step].Load(); n != 1 {
			t.Fatalf("step %d's activity ran %d times, want once (a continuation repeated or skipped it)", step, n)
		}
	}
	evs, err := st.Events(ctx, id, 0, 0)
	if err != nil || len(evs) != total+1 {
		t.Fatalf("%d events in agentplane's log (%v), want %d", len(evs), err, total+1)
	}
	if err := trace.CheckLog(ctx, st.Blobs("t"), evs); err != nil {
		t.Fatalf("the log does not verify: %v", err)
	}
	if v, err := e.Verify(ctx, id); err != nil || v.Events != total+1 {
		t.Fatalf("verify: %+v %v", v, err)
	}

	// Follow the chain of Temporal runs under the one workflow id.
	runID := describeRun(t, c, id, "").GetFirstRunId()
	runs, maxEvents, maxBytes := 0, int64(0), int64(0)
	for runID != "" {
		runs++
		info := describeRun(t, c, id, runID)
		maxEvents, maxBytes = max(maxEvents, info.GetHistoryLength()), max(maxBytes, info.GetHistorySizeBytes())
		if info.GetHistoryLength() >= HistoryWarnEvents/2 || info.GetHistorySizeBytes() >= HistoryWarnBytes/2 {
			t.Errorf("run %s: %d events, %d bytes: not far below the warning (%d events, %d bytes)",
				runID, info.GetHistoryLength(), info.GetHistorySizeBytes(), HistoryWarnEvents, HistoryWarnBytes)
		}
		next := ""
		for _, ev := range historyOf(t, c, id, runID).Events {
			if ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW {
				next = ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
			}
		}
		runID = next
	}
	if runs < 2 {
		t.Fatalf("%d Temporal runs: the run never continued as new", runs)
	}
	t.Logf("%d steps in %v (%.1f ms a step), %d Temporal runs, largest %d events / %d bytes", total, elapsed.Round(time.Second),
		float64(elapsed.Milliseconds())/total, runs, maxEvents, maxBytes)
}
