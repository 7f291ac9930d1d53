package temporal

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// StepsState is the compact state a long workflow carries into its next
// run: counters and a digest of every result so far, never the results.
type StepsState struct {
	Total  int
	Done   int
	Digest string
	// Runs counts the runs so far, this one included.
	Runs int
	// Policy is the continue-as-new policy (zero: the default).
	Policy ContinueAsNewPolicy
}

// fold adds one step's result to the digest.
func fold(digest string, i, result int) string {
	s := sha256.Sum256([]byte(digest + ":" + strconv.Itoa(i) + "=" + strconv.Itoa(result)))
	return hex.EncodeToString(s[:])
}

// stepsWorkflow runs st.Total sequential "step" activities, continuing as
// new under its policy at a step boundary.
func stepsWorkflow(ctx workflow.Context, st StepsState) (StepsState, error) {
	if st.Policy == (ContinueAsNewPolicy{}) {
		st.Policy = DefaultContinueAsNewPolicy()
	}
	if err := st.Policy.Validate(); err != nil {
		return st, err
	}
	st.Runs++
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	for st.Done < st.Total {
		var r int
		if err := workflow.ExecuteActivity(ctx, "step", st.Done).Get(ctx, &r); err != nil {
			return st, err
		}
		st.Digest = fold(st.Digest, st.Done, r)
		st.Done++
		if st.Done < st.Total && st.Policy.Due(ctx) {
			return st, workflow.NewContinueAsNewError(ctx, stepsWorkflow, st)
		}
	}
	return st, nil
}

// stepActivity returns 3i+1 and counts its calls.
type stepActivity struct {
	calls  atomic.Int64
	starts chan<- time.Time // when set, the start time of every call
}

func (s *stepActivity) Step(_ context.Context, i int) (int, error) {
	s.calls.Add(1)
	if s.starts != nil {
		s.starts <- time.Now()
	}
	return 3*i + 1, nil
}

func registerSteps(acts *stepActivity) func(worker.Worker) {
	return func(w worker.Worker) {
		w.RegisterWorkflow(stepsWorkflow)
		w.RegisterActivityWithOptions(acts.Step, activity.RegisterOptions{Name: "step"})
	}
}

// TestContinueAsNewPolicy: a workflow of sequential activities under a
// policy with small bounds continues as new under the same workflow id each
// time its history reaches the bound, and completes with every result
// folded in. Each run's history, fetched from the server, stays within the
// bound plus the one step in flight; the chain of runs is followed by the
// continued-as-new event that ends each. (The engine's own 2,000-step run
// under the default policy is TestLongRunContinuesAsNew.)
func TestContinueAsNewPolicy(t *testing.T) {
	const (
		total = 40
		// One activity adds six events (scheduled, started, completed and
		// the workflow task's three), so a run holds about eight steps.
		maxEvents = 50
		inFlight  = 6
	)
	policy := ContinueAsNewPolicy{MaxEvents: maxEvents, MaxBytes: 1 << 20}
	_, c := devServer(t, client.Options{})
	acts := &stepActivity{}
	q := startWorker(t, c, registerSteps(acts))
	const id = "steps-small-policy"
	var final StepsState
	first, err := execute(t, c, q, id, &final, stepsWorkflow, StepsState{Total: total, Policy: policy})
	if err != nil {
		t.Fatalf("workflow: %v", err)
	}
	want := ""
	for i := range total {
		want = fold(want, i, 3*i+1)
	}
	if final.Done != total || final.Digest != want {
		t.Fatalf("final state %+v; want %d steps with digest %s", final, total, want)
	}

	runID, runs, completed := first, 0, 0
	for runID != "" {
		runs++
		h := historyOf(t, c, id, runID)
		info := describeRun(t, c, id, runID)
		if int64(len(h.Events)) != info.GetHistoryLength() {
			t.Errorf("run %s: fetched %d events, server counts %d", runID, len(h.Events), info.GetHistoryLength())
		}
		if n := info.GetHistoryLength(); n > maxEvents+inFlight {
			t.Errorf("run %s: %d events, past the policy's %d and the step in flight", runID, n, maxEvents)
		}
		runID = ""
		for _, ev := range h.Events {
			switch ev.GetEventType() {
			case enums.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
				completed++
			case enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				runID = ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
			}
		}
	}
	// 40 steps of 6 events at 50 events a run: at least 4 runs.
	if runs < 4 || runs != final.Runs {
		t.Errorf("%d runs in the chain, the state counted %d; want at least 4", runs, final.Runs)
	}
	if completed != total {
		t.Errorf("%d activities completed across the runs, want %d", completed, total)
	}
	if n := acts.calls.Load(); n < total {
		t.Errorf("%d activity calls, want at least %d", n, total)
	}
}
