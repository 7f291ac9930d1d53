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

// TestContinueAsNew2000: a workflow of 2,000 sequential activities (about
// 12,000 history events in one run, past Temporal's 10,240-event warning)
// completes under the default policy by continuing as new under the same
// workflow id, and no run's history, fetched from the server, reaches the
// warning.
func TestContinueAsNew2000(t *testing.T) {
	if testing.Short() {
		t.Skip("2,000 activities on a dev server: about a minute")
	}
	const total = 2000
	_, c := devServer(t, client.Options{})
	acts := &stepActivity{}
	q := startWorker(t, c, registerSteps(acts))
	const id = "steps-2000"
	var final StepsState
	first, err := execute(t, c, q, id, &final, stepsWorkflow, StepsState{Total: total})
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

	// Follow the chain of runs from the first, by the continued-as-new
	// event that ends each.
	runID, runs, completed := first, 0, 0
	for runID != "" {
		runs++
		h := historyOf(t, c, id, runID)
		info := describeRun(t, c, id, runID)
		t.Logf("run %d (%s): %d events, %d bytes", runs, runID, info.GetHistoryLength(), info.GetHistorySizeBytes())
		if int64(len(h.Events)) != info.GetHistoryLength() {
			t.Errorf("run %s: fetched %d events, server counts %d", runID, len(h.Events), info.GetHistoryLength())
		}
		if info.GetHistoryLength() >= HistoryWarnEvents || info.GetHistorySizeBytes() >= HistoryWarnBytes {
			t.Errorf("run %s reached Temporal's history warning: %d events, %d bytes", runID, info.GetHistoryLength(), info.GetHistorySizeBytes())
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
	if runs < 3 || runs != final.Runs {
		t.Errorf("%d runs in the chain, the state counted %d; want at least 3 (12,000 events at 4,000 a run)", runs, final.Runs)
	}
	if completed != total {
		t.Errorf("%d activities completed across the runs, want %d", completed, total)
	}
	if n := acts.calls.Load(); n < total {
		t.Errorf("%d activity calls, want at least %d", n, total)
	}
}
