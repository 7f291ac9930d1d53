package temporal

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

var recordHistory = flag.Bool("record-temporal-history", false,
	"record testdata/"+v1Fixture+" from a dev server run of the old sample workflow (once, when the fixture is created; never otherwise)")

const (
	v1Fixture = "versioning-v1.history.json"
	// sampleWorkflowName is the one name every version registers under, as
	// a deployed workflow type keeps its name across releases.
	sampleWorkflowName = "agentplane.sample"
	// auditChange names the change v2 made, for GetVersion.
	auditChange = "audit-before-send"
)

func sampleOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
}

// sampleV1 is the old code: draft, then send.
func sampleV1(ctx workflow.Context, task string) (string, error) {
	ctx = sampleOptions(ctx)
	var draft, sent string
	if err := workflow.ExecuteActivity(ctx, "draft", task).Get(ctx, &draft); err != nil {
		return "", err
	}
	err := workflow.ExecuteActivity(ctx, "send", draft).Get(ctx, &sent)
	return sent, err
}

// sampleV2 is the new code: an audit between draft and send, behind
// GetVersion, so that a run recorded by v1 replays along v1's path.
func sampleV2(ctx workflow.Context, task string) (string, error) {
	ctx = sampleOptions(ctx)
	var draft, sent string
	if err := workflow.ExecuteActivity(ctx, "draft", task).Get(ctx, &draft); err != nil {
		return "", err
	}
	if v := workflow.GetVersion(ctx, auditChange, workflow.DefaultVersion, 1); v == 1 {
		if err := workflow.ExecuteActivity(ctx, "audit", draft).Get(ctx, &draft); err != nil {
			return "", err
		}
	}
	err := workflow.ExecuteActivity(ctx, "send", draft).Get(ctx, &sent)
	return sent, err
}

// sampleV2Unversioned is the same change made without GetVersion.
func sampleV2Unversioned(ctx workflow.Context, task string) (string, error) {
	ctx = sampleOptions(ctx)
	var draft, sent string
	if err := workflow.ExecuteActivity(ctx, "draft", task).Get(ctx, &draft); err != nil {
		return "", err
	}
	if err := workflow.ExecuteActivity(ctx, "audit", draft).Get(ctx, &draft); err != nil {
		return "", err
	}
	err := workflow.ExecuteActivity(ctx, "send", draft).Get(ctx, &sent)
	return sent, err
}

func registerSampleActivities(w worker.Worker) {
	w.RegisterActivityWithOptions(func(_ context.Context, s string) (string, error) { return "draft of " + s, nil }, activity.RegisterOptions{Name: "draft"})
	w.RegisterActivityWithOptions(func(_ context.Context, s string) (string, error) { return s + " (audited)", nil }, activity.RegisterOptions{Name: "audit"})
	w.RegisterActivityWithOptions(func(_ context.Context, s string) (string, error) { return "sent: " + s, nil }, activity.RegisterOptions{Name: "send"})
}

// replay replays the history in file under wf registered as the sample.
func replay(t *testing.T, file string, wf any) error {
	t.Helper()
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(wf, workflow.RegisterOptions{Name: sampleWorkflowName})
	return r.ReplayWorkflowHistoryFromJSONFile(tlog.NewStructuredLogger(discardLogger), file)
}

// TestReplayOldHistory: a history recorded by the old code (committed
// fixture) replays under the new code, whose change is behind GetVersion;
// the same change made without GetVersion is detected as nondeterminism.
func TestReplayOldHistory(t *testing.T) {
	fixture := filepath.Join("testdata", v1Fixture)
	if *recordHistory {
		recordV1(t, fixture)
	}
	if _, err := os.Stat(fixture); err != nil {
		t.Fatalf("fixture: %v (record it once with go test -run TestReplayOldHistory -record-temporal-history)", err)
	}
	if err := replay(t, fixture, sampleV1); err != nil {
		t.Fatalf("the old history does not replay under the old code: %v", err)
	}
	if err := replay(t, fixture, sampleV2); err != nil {
		t.Fatalf("the old history does not replay under the versioned new code: %v", err)
	}
	err := replay(t, fixture, sampleV2Unversioned)
	if err == nil {
		t.Fatal("the unversioned change replayed the old history without complaint")
	}
	if !strings.Contains(strings.ToLower(err.Error()), "nondetermin") {
		t.Fatalf("the unversioned change failed with %v; want a nondeterminism error", err)
	}
}

// TestVersionedRunReplays: the new code run live takes the new path (its
// history holds the version marker and the audit), and that history
// replays under the new code too.
func TestVersionedRunReplays(t *testing.T) {
	_, c := devServer(t, client.Options{})
	q := startWorker(t, c, func(w worker.Worker) {
		w.RegisterWorkflowWithOptions(sampleV2, workflow.RegisterOptions{Name: sampleWorkflowName})
		registerSampleActivities(w)
	})
	var out string
	runID, err := execute(t, c, q, "sample-v2", &out, sampleWorkflowName, "refund")
	if err != nil || out != "sent: draft of refund (audited)" {
		t.Fatalf("v2 run: %q, %v", out, err)
	}
	file := filepath.Join(t.TempDir(), "v2.json")
	writeHistory(t, c, "sample-v2", runID, file)
	if err := replay(t, file, sampleV2); err != nil {
		t.Fatalf("a v2 history does not replay under v2: %v", err)
	}
	if err := replay(t, file, sampleV1); err == nil {
		t.Fatal("a v2 history replayed under v1, which lacks the audit")
	}
}

// recordV1 runs the old code on a dev server and writes its history to file.
func recordV1(t *testing.T, file string) {
	_, c := devServer(t, client.Options{})
	q := startWorker(t, c, func(w worker.Worker) {
		w.RegisterWorkflowWithOptions(sampleV1, workflow.RegisterOptions{Name: sampleWorkflowName})
		registerSampleActivities(w)
	})
	var out string
	runID, err := execute(t, c, q, "sample-v1", &out, sampleWorkflowName, "refund")
	if err != nil || out != "sent: draft of refund" {
		t.Fatalf("v1 run: %q, %v", out, err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	writeHistory(t, c, "sample-v1", runID, file)
	t.Logf("recorded %s", file)
}

func writeHistory(t *testing.T, c client.Client, id, runID, file string) {
	t.Helper()
	h := historyOf(t, c, id, runID)
	data, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}
