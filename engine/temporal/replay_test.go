package temporal

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
)

// engineFixture is a history the Temporal engine recorded of
// approvalSteps: committed once, replayed by every later version of the
// engine's workflow code.
const engineFixture = "engine-v1.history.json"

// approvalSteps is a small loop on the seam: a step's activity, a wait
// for a decision (with a deadline), then two more steps.
func approvalSteps(extraRecord bool) engine.Workflow {
	return func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		for step := 1; step <= 3; step++ {
			if _, err := env.Signals(ctx, step); err != nil {
				return engine.Outcome{}, err
			}
			if extraRecord && step == 2 {
				// A change made without regard for recorded runs.
				if _, err := env.Record(ctx, "note", step, engine.Durable, "new code"); err != nil {
					return engine.Outcome{}, err
				}
			}
			if _, err := env.Execute(ctx, engine.Call{Activity: "test.count", Event: "counted", Step: step, Durability: engine.Durable,
				Input: countIn{Key: engine.IdempotencyKey(env.Run().ID, step, 0), Step: step}}); err != nil {
				return engine.Outcome{}, err
			}
			if step == 1 {
				req, err := env.Record(ctx, "approval_requested", step, engine.Durable, map[string]string{"tool": "issue_refund"})
				if err != nil {
					return engine.Outcome{}, err
				}
				sigs, err := env.Await(ctx, step, req.At.Add(24*time.Hour))
				if err != nil {
					return engine.Outcome{}, err
				}
				if _, err := env.Record(ctx, "approval_decided", step, engine.Durable, len(sigs)); err != nil {
					return engine.Outcome{}, err
				}
			}
		}
		if _, err := env.Record(ctx, "ended", 3, engine.Durable, "ok"); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: "ok"}, nil
	}
}

func countActivities(t testing.TB) *engine.Activities {
	acts, err := engine.NewActivities(engine.NewActivity("test.count", func(_ context.Context, in countIn) (countOut, error) {
		return countOut{Step: in.Step}, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	return acts
}

// replayEngine replays the history in file under the engine's workflow
// running wf, with no server and no store.
func replayEngine(t *testing.T, file string, wf engine.Workflow) error {
	t.Helper()
	e := &Engine{o: Options{Workflow: wf, Activities: countActivities(t)}, can: DefaultContinueAsNewPolicy()}
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(e.run, workflow.RegisterOptions{Name: WorkflowName})
	return r.ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(discardLogger), file)
}

// TestReplayEngineHistory: a history the engine recorded (committed
// fixture: a step, an approval wait decided by a signal, two more steps)
// replays under the engine's current workflow code with the same loop,
// and the same loop changed without versioning is refused as
// nondeterministic.
func TestReplayEngineHistory(t *testing.T) {
	fixture := filepath.Join("testdata", engineFixture)
	if *recordHistory {
		recordEngineHistory(t, fixture)
	}
	if _, err := os.Stat(fixture); err != nil {
		t.Fatalf("fixture: %v (record it once with go test -run TestReplayEngineHistory -record-temporal-history)", err)
	}
	if err := replayEngine(t, fixture, approvalSteps(false)); err != nil {
		t.Fatalf("the recorded history does not replay under the current engine: %v", err)
	}
	err := replayEngine(t, fixture, approvalSteps(true))
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "nondetermin") {
		t.Fatalf("the changed loop replayed the recorded history: %v; want a nondeterminism error", err)
	}
}

// recordEngineHistory runs approvalSteps on the engine against a dev
// server and writes its history to file.
func recordEngineHistory(t *testing.T, file string) {
	_, c := devServer(t, client.Options{})
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	e, err := New(Options{Client: c, TaskQueue: "record", Store: st, Workflow: approvalSteps(false), Activities: countActivities(t), Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const id = "recorded"
	if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	if err := e.launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	work := func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := e.Work(wctx, engine.WorkOptions{UntilIdle: true}); err != nil || wctx.Err() != nil {
			t.Fatalf("work: %v %v", err, wctx.Err())
		}
	}
	work()
	p, _ := json.Marshal(map[string]string{"decision": "approve"})
	if err := e.Signal(ctx, id, engine.Signal{Kind: "approval", Payload: p, Key: "a1"}); err != nil {
		t.Fatal(err)
	}
	work()
	if r, err := st.GetRun(ctx, id); err != nil || r.Status != store.StatusCompleted {
		t.Fatalf("recorded run: %+v %v", r, err)
	}
	// The row ends with the workflow's last activity; the workflow itself
	// completes a task later.
	gctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var out engine.Outcome
	if err := c.GetWorkflow(gctx, id, "").Get(gctx, &out); err != nil || out.Result != "ok" {
		t.Fatalf("recorded workflow: %+v %v", out, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	writeHistory(t, c, id, describeRun(t, c, id, "").GetFirstRunId(), file)
	t.Logf("recorded %s", file)
}
