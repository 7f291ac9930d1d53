package temporal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// Error types that activity errors carry across the Temporal boundary, as
// the Type of a temporal.ApplicationError. ErrorTypeNonRetryable is also
// listed in every retry policy's NonRetryableErrorTypes, so it is never
// retried even if an error of that type was built without the
// non-retryable flag.
const (
	ErrorTypeRetryable    = "agentplane.Retryable"
	ErrorTypeNonRetryable = "agentplane.NonRetryable"
)

// maxRetryAfter bounds the delay a server's Retry-After may impose on the
// next attempt.
const maxRetryAfter = 5 * time.Minute

// RetryableError marks err as worth retrying (a 429, a 5xx, a timeout):
// the activity's retry policy backs off and tries again.
func RetryableError(err error) error {
	return temporal.NewApplicationErrorWithCause(err.Error(), ErrorTypeRetryable, err)
}

// NonRetryableError marks err as final (a 400, a refused argument): the
// activity fails at once and the workflow sees the error.
func NonRetryableError(err error) error {
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrorTypeNonRetryable, err)
}

// HTTPError classifies an error answered with an HTTP status: 408, 429 and
// 5xx are retryable (a 429's retryAfter, bounded to 5 minutes, sets the
// next attempt's delay when positive); every other status is not.
func HTTPError(status int, retryAfter time.Duration, err error) error {
	if err == nil {
		err = errors.New(http.StatusText(status))
	}
	err = fmt.Errorf("HTTP %d: %w", status, err)
	if status == http.StatusTooManyRequests || status == http.StatusRequestTimeout || status >= 500 && status <= 599 {
		if retryAfter > 0 {
			return temporal.NewApplicationErrorWithOptions(err.Error(), ErrorTypeRetryable, temporal.ApplicationErrorOptions{
				Cause:          err,
				NextRetryDelay: min(retryAfter, maxRetryAfter),
			})
		}
		return RetryableError(err)
	}
	return NonRetryableError(err)
}

// IsNonRetryable reports whether err (as a workflow sees an activity's
// failure) was classified as not worth retrying.
func IsNonRetryable(err error) bool {
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && (ae.NonRetryable() || ae.Type() == ErrorTypeNonRetryable)
}

// ActivityPolicy is how long one kind of activity may take and how it is
// retried. A zero StartToClose, InitialInterval, BackoffCoefficient or
// MaxInterval takes ModelCallPolicy's; a zero ScheduleToClose, Heartbeat or
// MaxAttempts means none (without Heartbeat, an attempt on a worker that
// died is retried only after StartToClose).
type ActivityPolicy struct {
	// StartToClose bounds one attempt.
	StartToClose time.Duration
	// ScheduleToClose bounds all attempts together, backoff included.
	ScheduleToClose time.Duration
	// Heartbeat, when set, fails an attempt whose worker has not
	// heartbeated for that long (see Heartbeat); long tools need it so that
	// a dead worker's attempt is retried before StartToClose passes.
	Heartbeat time.Duration
	// InitialInterval, BackoffCoefficient and MaxInterval shape the backoff
	// between attempts; MaxAttempts bounds them (0: no bound but
	// ScheduleToClose).
	InitialInterval    time.Duration
	BackoffCoefficient float64
	MaxInterval        time.Duration
	MaxAttempts        int32
}

// DeadWorkerTimeout is the heartbeat timeout of every activity but a
// tool's: how long an attempt whose worker died (SIGKILL, a lost machine)
// goes unnoticed before the server retries it. Without a heartbeat timeout
// the server waits for the attempt's start-to-close timeout, minutes.
const DeadWorkerTimeout = 10 * time.Second

// ModelCallPolicy is the policy of a model call: five minutes an attempt
// (a long generation), a dead worker noticed after DeadWorkerTimeout,
// backoff from 1 s doubling to 1 minute, 8 attempts within 30 minutes.
func ModelCallPolicy() ActivityPolicy {
	return ActivityPolicy{
		StartToClose:       5 * time.Minute,
		ScheduleToClose:    30 * time.Minute,
		Heartbeat:          DeadWorkerTimeout,
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaxInterval:        time.Minute,
		MaxAttempts:        8,
	}
}

// ToolCallPolicy is the policy of a tool call whose manifest allows
// timeout: an attempt gets the manifest's timeout plus 30 s of margin for
// the broker, heartbeats every 20 s at most, and 5 attempts within
// 10 attempts' worth of time. The tool's own timeout stays the broker's to
// enforce; this bound catches a worker that died.
func ToolCallPolicy(timeout time.Duration) ActivityPolicy {
	attempt := timeout + 30*time.Second
	return ActivityPolicy{
		StartToClose:       attempt,
		ScheduleToClose:    10 * attempt,
		Heartbeat:          20 * time.Second,
		InitialInterval:    time.Second,
		BackoffCoefficient: 2,
		MaxInterval:        time.Minute,
		MaxAttempts:        5,
	}
}

// Options returns the activity options of p on taskQueue (empty: the
// workflow's own). Its retry policy never retries ErrorTypeNonRetryable.
func (p ActivityPolicy) Options(taskQueue string) (workflow.ActivityOptions, error) {
	d := ModelCallPolicy()
	if p.StartToClose <= 0 {
		p.StartToClose = d.StartToClose
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = d.InitialInterval
	}
	if p.BackoffCoefficient == 0 {
		p.BackoffCoefficient = d.BackoffCoefficient
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = d.MaxInterval
	}
	switch {
	case p.BackoffCoefficient < 1:
		return workflow.ActivityOptions{}, fmt.Errorf("activity policy: backoff coefficient %v is below 1", p.BackoffCoefficient)
	case p.MaxInterval < p.InitialInterval:
		return workflow.ActivityOptions{}, fmt.Errorf("activity policy: max interval %v is below the initial interval %v", p.MaxInterval, p.InitialInterval)
	case p.ScheduleToClose > 0 && p.ScheduleToClose < p.StartToClose:
		return workflow.ActivityOptions{}, fmt.Errorf("activity policy: schedule-to-close %v is below start-to-close %v", p.ScheduleToClose, p.StartToClose)
	case p.Heartbeat < 0 || p.Heartbeat > p.StartToClose:
		return workflow.ActivityOptions{}, fmt.Errorf("activity policy: heartbeat timeout %v is outside 0..start-to-close %v", p.Heartbeat, p.StartToClose)
	case p.MaxAttempts < 0:
		return workflow.ActivityOptions{}, fmt.Errorf("activity policy: max attempts %d is negative", p.MaxAttempts)
	}
	return workflow.ActivityOptions{
		TaskQueue:              taskQueue,
		StartToCloseTimeout:    p.StartToClose,
		ScheduleToCloseTimeout: p.ScheduleToClose,
		HeartbeatTimeout:       p.Heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        p.InitialInterval,
			BackoffCoefficient:     p.BackoffCoefficient,
			MaximumInterval:        p.MaxInterval,
			MaximumAttempts:        p.MaxAttempts,
			NonRetryableErrorTypes: []string{ErrorTypeNonRetryable},
		},
	}, nil
}

// Heartbeat runs fn while heartbeating the activity of ctx every interval
// (0: a third of the activity's heartbeat timeout, or 10 s without one;
// the first beat one interval in, so that an activity shorter than that
// costs no heartbeat call), so that the server knows the attempt is alive and can deliver a
// cancellation: the SDK cancels fn's context when the workflow cancels the
// activity or the heartbeat times out, and fn must return when it does.
// detail, when not nil, is called for the details of each heartbeat (the
// progress a retried attempt can resume from via
// activity.GetHeartbeatDetails).
func Heartbeat[T any](ctx context.Context, interval time.Duration, detail func() any, fn func(context.Context) (T, error)) (T, error) {
	if interval <= 0 {
		interval = 10 * time.Second
		if hb := activity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
			interval = max(hb/3, 10*time.Millisecond)
		}
	}
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := fn(ctx)
		done <- result{v, err}
	}()
	beat := func() {
		if detail != nil {
			activity.RecordHeartbeat(ctx, detail())
		} else {
			activity.RecordHeartbeat(ctx)
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case r := <-done:
			return r.v, r.err
		case <-tick.C:
			if ctx.Err() == nil {
				beat()
			}
		}
	}
}
