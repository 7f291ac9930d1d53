package temporal

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/agentplane/agentplane/engine"
)

func TestHTTPErrorClasses(t *testing.T) {
	for status, retryable := range map[int]bool{400: false, 401: false, 403: false, 404: false, 422: false, 408: true, 429: true, 500: true, 502: true, 503: true, 599: true} {
		err := HTTPError(status, 0, errors.New("x"))
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) {
			t.Fatalf("HTTPError(%d) = %T, want an application error", status, err)
		}
		if IsNonRetryable(err) == retryable || ae.NonRetryable() == retryable {
			t.Errorf("HTTPError(%d): non-retryable %v, want %v", status, ae.NonRetryable(), !retryable)
		}
		if !strings.Contains(err.Error(), "HTTP ") {
			t.Errorf("HTTPError(%d) = %q, want the status in the message", status, err)
		}
	}
	// A server's Retry-After sets the next delay, bounded to 5 minutes.
	var ae *temporal.ApplicationError
	if !errors.As(HTTPError(429, time.Hour, nil), &ae) || ae.NextRetryDelay() != maxRetryAfter {
		t.Fatalf("Retry-After of an hour: next delay %v, want %v", ae.NextRetryDelay(), maxRetryAfter)
	}
}

func TestActivityPolicyOptions(t *testing.T) {
	o, err := ToolCallPolicy(time.Minute).Options("tools")
	if err != nil {
		t.Fatal(err)
	}
	if o.TaskQueue != "tools" || o.StartToCloseTimeout != 90*time.Second || o.HeartbeatTimeout != 20*time.Second || o.RetryPolicy.MaximumAttempts != 5 {
		t.Errorf("tool call options %+v", o)
	}
	if !slices.Contains(o.RetryPolicy.NonRetryableErrorTypes, ErrorTypeNonRetryable) {
		t.Errorf("retry policy %+v does not list %s", o.RetryPolicy, ErrorTypeNonRetryable)
	}
	// An attempt on a worker that died is retried after the heartbeat
	// timeout, not after minutes of start-to-close.
	for name, p := range map[string]ActivityPolicy{"model call": ModelCallPolicy(), "default": DefaultPolicy(engine.RetryPolicy{})} {
		o, err := p.Options("")
		if err != nil {
			t.Fatal(err)
		}
		if o.HeartbeatTimeout != DeadWorkerTimeout || o.StartToCloseTimeout <= DeadWorkerTimeout {
			t.Errorf("%s: heartbeat timeout %v, start-to-close %v; want a dead worker noticed after %v", name, o.HeartbeatTimeout, o.StartToCloseTimeout, DeadWorkerTimeout)
		}
	}
	for name, p := range map[string]ActivityPolicy{
		"backoff":   {BackoffCoefficient: 0.5},
		"interval":  {InitialInterval: time.Minute, MaxInterval: time.Second},
		"schedule":  {StartToClose: time.Minute, ScheduleToClose: time.Second},
		"heartbeat": {StartToClose: time.Second, Heartbeat: time.Minute},
		"attempts":  {MaxAttempts: -1},
	} {
		if _, err := p.Options(""); err == nil {
			t.Errorf("%s: policy %+v accepted", name, p)
		}
	}
	if err := (ContinueAsNewPolicy{MaxEvents: HistoryWarnEvents, MaxBytes: 1 << 20}).Validate(); err == nil {
		t.Error("a continue-as-new policy at the warning was accepted")
	}
	if err := DefaultContinueAsNewPolicy().Validate(); err != nil {
		t.Error(err)
	}
}
