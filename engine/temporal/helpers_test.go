package temporal

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/proto"

	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
	"github.com/agentplane/agentplane/store/sqlite"
)

var queueSeq atomic.Int64

// startWorker starts a worker on a fresh task queue of c with what register
// adds, stops it when the test ends, and returns the queue.
func startWorker(t testing.TB, c client.Client, register func(worker.Worker)) string {
	t.Helper()
	return startWorkerWith(t, c, worker.Options{}, register)
}

// startWorkerWith is startWorker with worker options o.
func startWorkerWith(t testing.TB, c client.Client, o worker.Options, register func(worker.Worker)) string {
	t.Helper()
	q := fmt.Sprintf("test-%s-%d", sanitize(t.Name()), queueSeq.Add(1))
	w := worker.New(c, q, o)
	register(w)
	if err := w.Start(); err != nil {
		t.Fatalf("start worker: %v", err)
	}
	t.Cleanup(w.Stop)
	return q
}

func sanitize(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}

// devServer starts a dev server and dials it with o.
func devServer(t testing.TB, o client.Options) (*temporaltest.Server, client.Client) {
	t.Helper()
	srv := temporaltest.Start(t, temporaltest.Options{})
	return srv, srv.Client(t, o)
}

// execute runs workflow wf on queue q with id and args, waits (bounded) for
// its result into out, and returns its first run id.
func execute(t testing.TB, c client.Client, q, id string, out any, wf any, args ...any) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: q, WorkflowExecutionTimeout: 8 * time.Minute}, wf, args...)
	if err != nil {
		return "", err
	}
	return run.GetRunID(), run.Get(ctx, out)
}

// historyOf fetches one run's full history from the server.
func historyOf(t testing.TB, c client.Client, id, runID string) *historypb.History {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, id, runID, false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatalf("history of %s/%s: %v", id, runID, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

// historyBytes is the encoded size of a history, as the server stores it.
func historyBytes(h *historypb.History) int { return proto.Size(h) }

// describeRun returns the server's description of one run.
func describeRun(t testing.TB, c client.Client, id, runID string) *workflowpb.WorkflowExecutionInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := c.DescribeWorkflow(ctx, id, runID)
	if err != nil {
		t.Fatalf("describe %s/%s: %v", id, runID, err)
	}
	return d.RawResponse.GetWorkflowExecutionInfo()
}

// tempStore opens a SQLite store in a temporary folder, closed when the
// test ends.
func tempStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
