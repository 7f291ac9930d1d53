package temporal

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// bigPayloadWorkflow hands data to an activity that returns its sha256 and
// data of its own, and returns both.
func bigPayloadWorkflow(ctx workflow.Context, data []byte) (BigResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute})
	var r BigResult
	err := workflow.ExecuteActivity(ctx, bigPayloadActivity, data).Get(ctx, &r)
	return r, err
}

// BigResult is what bigPayloadActivity returns.
type BigResult struct {
	InputSHA256 string
	Output      []byte
}

func bigPayloadActivity(_ context.Context, data []byte) (BigResult, error) {
	sum := sha256.Sum256(data)
	return BigResult{InputSHA256: hex.EncodeToString(sum[:]), Output: bytes.Repeat([]byte("out!"), 750_000)}, nil
}

// TestBlobCodecThroughWorkflow: a 3 MB workflow input and a 3 MB activity
// result (each over Temporal's 2 MB cap per payload) travel by reference
// through a real workflow; the server refuses the same input without the
// codec; the history stays small.
func TestBlobCodecThroughWorkflow(t *testing.T) {
	blobs := openBlobs(t)
	codec := newCodec(t, blobs, testKey(t))
	srv, c := devServer(t, client.Options{DataConverter: codec.NewDataConverter()})
	// Encoding a multi-megabyte value inside the workflow task (the codec
	// writes it to the blob store) can take longer than the SDK's 1 s
	// deadlock detector on a loaded machine under -race; the engine keeps
	// such values out of workflow code (activities pass blob hashes), this
	// test puts them there on purpose.
	q := startWorkerWith(t, c, worker.Options{DeadlockDetectionTimeout: time.Minute}, func(w worker.Worker) {
		w.RegisterWorkflow(bigPayloadWorkflow)
		w.RegisterActivity(bigPayloadActivity)
	})
	in := bytes.Repeat([]byte("in.."), 750_000)
	var r BigResult
	runID, err := execute(t, c, q, "big-payload", &r, bigPayloadWorkflow, in)
	if err != nil {
		t.Fatalf("workflow with a 3 MB payload: %v", err)
	}
	sum := sha256.Sum256(in)
	if r.InputSHA256 != hex.EncodeToString(sum[:]) || !bytes.Equal(r.Output, bytes.Repeat([]byte("out!"), 750_000)) {
		t.Fatalf("payloads changed on the way: input hash %s, output %d bytes", r.InputSHA256, len(r.Output))
	}
	h := historyOf(t, c, "big-payload", runID)
	size := historyBytes(h)
	serverSize := describeRun(t, c, "big-payload", runID).GetHistorySizeBytes()
	t.Logf("history of a run carrying four payloads of about 4 MB each: %d events, %d bytes fetched, %d bytes by the server's count", len(h.Events), size, serverSize)
	if size > 32<<10 || serverSize > 32<<10 {
		t.Fatalf("history is %d bytes (server: %d), want under 32 KiB", size, serverSize)
	}

	// Without the codec the server refuses the payload: the cap is real.
	plain := srv.Client(t, client.Options{})
	_, err = plain.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: "big-plain", TaskQueue: q}, bigPayloadWorkflow, in)
	if err == nil || !strings.Contains(strings.ToLower(err.Error()), "size") {
		t.Fatalf("start with a 3 MB payload and no codec = %v; want the server to refuse its size", err)
	}
}

// RetryReport is what retryWorkflow returns.
type RetryReport struct {
	Attempts     int32
	NonRetryable bool
	Failed       bool
}

// retryWorkflow calls failing(status) with a fast retry policy and reports
// how many attempts it took.
func retryWorkflow(ctx workflow.Context, status int) (RetryReport, error) {
	ao, err := ActivityPolicy{
		StartToClose:       10 * time.Second,
		InitialInterval:    50 * time.Millisecond,
		BackoffCoefficient: 2,
		MaxInterval:        200 * time.Millisecond,
		MaxAttempts:        5,
	}.Options("")
	if err != nil {
		return RetryReport{}, err
	}
	ctx = workflow.WithActivityOptions(ctx, ao)
	var attempts int32
	err = workflow.ExecuteActivity(ctx, "failing", status).Get(ctx, &attempts)
	if err != nil {
		return RetryReport{Failed: true, NonRetryable: IsNonRetryable(err)}, nil
	}
	return RetryReport{Attempts: attempts}, nil
}

// failingActivities fail the first two attempts of each status with that
// status, then succeed with the attempt number.
type failingActivities struct {
	mu    sync.Mutex
	calls map[int]int
}

func (f *failingActivities) Failing(ctx context.Context, status int) (int32, error) {
	f.mu.Lock()
	f.calls[status]++
	f.mu.Unlock()
	attempt := activity.GetInfo(ctx).Attempt
	if attempt <= 2 {
		switch status {
		case -1: // the non-retryable type without the flag: the policy's list stops it
			return 0, temporal.NewApplicationError("refused", ErrorTypeNonRetryable)
		case http.StatusTooManyRequests:
			return 0, HTTPError(status, 10*time.Millisecond, errors.New("slow down"))
		default:
			return 0, HTTPError(status, 0, errors.New("upstream said no"))
		}
	}
	return attempt, nil
}

// TestRetryClassification: 429 and 5xx errors are retried with backoff until
// the activity succeeds; a 400, a 403 and the non-retryable type are not
// retried: one attempt, and the workflow sees a non-retryable error.
func TestRetryClassification(t *testing.T) {
	_, c := devServer(t, client.Options{})
	acts := &failingActivities{calls: map[int]int{}}
	q := startWorker(t, c, func(w worker.Worker) {
		w.RegisterWorkflow(retryWorkflow)
		w.RegisterActivityWithOptions(acts.Failing, activity.RegisterOptions{Name: "failing"})
	})
	for _, tc := range []struct {
		status    int
		retryable bool
	}{
		{http.StatusTooManyRequests, true},
		{http.StatusServiceUnavailable, true},
		{http.StatusInternalServerError, true},
		{http.StatusBadRequest, false},
		{http.StatusForbidden, false},
		{-1, false},
	} {
		var r RetryReport
		if _, err := execute(t, c, q, "retry-"+http.StatusText(tc.status)+"-"+itoa(tc.status), &r, retryWorkflow, tc.status); err != nil {
			t.Fatalf("status %d: workflow: %v", tc.status, err)
		}
		acts.mu.Lock()
		calls := acts.calls[tc.status]
		acts.mu.Unlock()
		if tc.retryable {
			if r.Failed || r.Attempts != 3 || calls != 3 {
				t.Errorf("status %d: %+v after %d calls; want success on attempt 3", tc.status, r, calls)
			}
		} else if !r.Failed || !r.NonRetryable || calls != 1 {
			t.Errorf("status %d: %+v after %d calls; want one attempt and a non-retryable failure", tc.status, r, calls)
		}
	}
}

func itoa(n int) string {
	if n < 0 {
		return "m" + itoa(-n)
	}
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
		if n == 0 {
			return string(b)
		}
	}
}

// heartbeatWorkflow runs "slow" for d with a 1 s heartbeat timeout and one
// attempt; when cancelAfter > 0 it cancels the activity after that long.
func heartbeatWorkflow(ctx workflow.Context, name string, d, cancelAfter time.Duration) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: time.Minute,
		HeartbeatTimeout:    time.Second,
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	actx, cancel := workflow.WithCancel(ctx)
	f := workflow.ExecuteActivity(actx, name, d)
	if cancelAfter > 0 {
		if err := workflow.Sleep(ctx, cancelAfter); err != nil {
			return "", err
		}
		cancel()
	}
	var out string
	err := f.Get(ctx, &out)
	var te *temporal.TimeoutError
	var ce *temporal.CanceledError
	switch {
	case errors.As(err, &te):
		return "timeout:" + te.TimeoutType().String(), nil
	case errors.As(err, &ce):
		return "canceled", nil
	case err != nil:
		return "", err
	}
	return out, nil
}

type slowActivities struct {
	sawCancel atomic.Bool
	beats     atomic.Int64
}

// WithHeartbeat runs for d inside Heartbeat, or until cancelled.
func (s *slowActivities) WithHeartbeat(ctx context.Context, d time.Duration) (string, error) {
	return Heartbeat(ctx, 100*time.Millisecond, func() any { return s.beats.Add(1) }, func(ctx context.Context) (string, error) {
		select {
		case <-time.After(d):
			return "done", nil
		case <-ctx.Done():
			s.sawCancel.Store(true)
			return "", ctx.Err()
		}
	})
}

// Silent runs for d without heartbeating.
func (s *slowActivities) Silent(ctx context.Context, d time.Duration) (string, error) {
	select {
	case <-time.After(d):
		return "done", nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// TestHeartbeat: an activity running 4 s under a 1 s heartbeat timeout
// completes inside Heartbeat and times out (HEARTBEAT) without it; a
// cancelled activity inside Heartbeat sees its context end and the workflow
// sees the cancellation.
func TestHeartbeat(t *testing.T) {
	_, c := devServer(t, client.Options{})
	acts := &slowActivities{}
	q := startWorker(t, c, func(w worker.Worker) {
		w.RegisterWorkflow(heartbeatWorkflow)
		w.RegisterActivityWithOptions(acts.WithHeartbeat, activity.RegisterOptions{Name: "with-heartbeat"})
		w.RegisterActivityWithOptions(acts.Silent, activity.RegisterOptions{Name: "silent"})
	})
	var got string
	if _, err := execute(t, c, q, "hb-long", &got, heartbeatWorkflow, "with-heartbeat", 4*time.Second, time.Duration(0)); err != nil || got != "done" {
		t.Fatalf("heartbeating activity: %q, %v; want done", got, err)
	}
	if n := acts.beats.Load(); n < 2 {
		t.Errorf("%d heartbeats over 4 s", n)
	}
	if _, err := execute(t, c, q, "hb-silent", &got, heartbeatWorkflow, "silent", 4*time.Second, time.Duration(0)); err != nil || got != "timeout:"+enums.TIMEOUT_TYPE_HEARTBEAT.String() {
		t.Fatalf("silent activity: %q, %v; want a heartbeat timeout", got, err)
	}
	if _, err := execute(t, c, q, "hb-cancel", &got, heartbeatWorkflow, "with-heartbeat", 5*time.Minute, 500*time.Millisecond); err != nil || got != "canceled" {
		t.Fatalf("cancelled activity: %q, %v; want canceled", got, err)
	}
	if !acts.sawCancel.Load() {
		t.Fatal("the cancelled activity's function never saw its context end")
	}
}
