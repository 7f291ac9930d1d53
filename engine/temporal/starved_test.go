package temporal

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// TestStarvedWorkflowIsNoDeadlock: workflow code that runs for 1.5 s
// without yielding, as the loop's deterministic code does when a loaded
// machine starves it of the CPU, completes its run. With the SDK's 1 s
// deadlock detection the panic policy failed such a run for good (seen in
// api.TestCardDisputeScenarios with its rows in parallel).
func TestStarvedWorkflowIsNoDeadlock(t *testing.T) {
	_, c := devServer(t, client.Options{})
	ctx := context.Background()
	st := tempStore(t)
	acts, err := engine.NewActivities()
	if err != nil {
		t.Fatal(err)
	}
	starved := func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		if _, err := env.Signals(ctx, 1); err != nil {
			return engine.Outcome{}, err
		}
		for begun := time.Now(); time.Since(begun) < 1500*time.Millisecond; {
			// busy: no yield to the SDK's scheduler
		}
		if _, err := env.Record(ctx, "ended", 1, engine.Durable, "done"); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: "done"}, nil
	}
	e, err := New(Options{Client: c, TaskQueue: "starved", Store: st, Workflow: starved, Activities: acts, Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const id = "starved-run"
	if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "spin", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	if err := e.launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := e.Work(wctx, engine.WorkOptions{Concurrency: 1, UntilIdle: true}); err != nil || wctx.Err() != nil {
		t.Fatalf("work: %v %v", err, wctx.Err())
	}
	run, err := st.GetRun(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != store.StatusCompleted || run.Result != "done" {
		t.Fatalf("run = %s %q; want completed (a starved workflow is not a deadlock)", run.Status, run.Result)
	}
}
