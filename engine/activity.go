package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"
)

// An Activity is a named effect with a serialisable input and result: a
// model call, a tool decision, a tool execution, a sandbox teardown. The
// workflow names it in a Call; the engine runs it (here, in this process;
// a Temporal engine, on whichever worker registered the same name) and
// records its result as the event the Call names. Activities are
// at-least-once: one that ran but whose result was not recorded runs
// again after a crash, so an effect that must happen once carries an
// idempotency key (IdempotencyKey) in its input.
type Activity struct {
	name string
	// call runs the activity on an in-process input of its input type,
	// returning its result as JSON (the recorded payload).
	call func(ctx context.Context, in any) ([]byte, error)
	// callJSON runs it on a serialised input, as a remote worker does.
	callJSON func(ctx context.Context, in []byte) ([]byte, error)
}

// NewActivity makes an activity from a typed function. In and Out must
// round-trip through encoding/json: Out is the payload recorded in the log,
// In is what a remote worker receives.
func NewActivity[In, Out any](name string, fn func(ctx context.Context, in In) (Out, error)) Activity {
	return Activity{
		name: name,
		call: func(ctx context.Context, in any) ([]byte, error) {
			v, ok := in.(In)
			if !ok {
				var want In
				return nil, NonRetryable(fmt.Errorf("activity %s: input is %T, want %T", name, in, want))
			}
			out, err := fn(ctx, v)
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		},
		callJSON: func(ctx context.Context, in []byte) ([]byte, error) {
			var v In
			if err := json.Unmarshal(in, &v); err != nil {
				return nil, NonRetryable(fmt.Errorf("activity %s: decode input: %w", name, err))
			}
			out, err := fn(ctx, v)
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		},
	}
}

// Name is the name the activity is registered under.
func (a Activity) Name() string { return a.name }

// Invoke runs the activity on an input of its input type (in-process).
func (a Activity) Invoke(ctx context.Context, in any) ([]byte, error) { return a.call(ctx, in) }

// InvokeJSON runs the activity on a JSON input, as a worker on another
// machine would.
func (a Activity) InvokeJSON(ctx context.Context, in []byte) ([]byte, error) {
	return a.callJSON(ctx, in)
}

// Activities is a registry of activities by name. It is immutable once
// made and safe for concurrent use.
type Activities struct {
	byName map[string]Activity
}

// NewActivities registers acts, refusing an empty or duplicate name.
func NewActivities(acts ...Activity) (*Activities, error) {
	r := &Activities{byName: make(map[string]Activity, len(acts))}
	for _, a := range acts {
		if a.name == "" || a.call == nil {
			return nil, errors.New("engine: an activity needs a name and a function")
		}
		if _, dup := r.byName[a.name]; dup {
			return nil, fmt.Errorf("engine: activity %q registered twice", a.name)
		}
		r.byName[a.name] = a
	}
	return r, nil
}

// Lookup returns the activity registered under name.
func (r *Activities) Lookup(name string) (Activity, bool) {
	if r == nil {
		return Activity{}, false
	}
	a, ok := r.byName[name]
	return a, ok
}

// Names lists the registered names, sorted.
func (r *Activities) Names() []string {
	if r == nil {
		return nil
	}
	out := make([]string, 0, len(r.byName))
	for n := range r.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Call asks the engine to run one activity and record its result.
type Call struct {
	// Activity is the registered name of the activity.
	Activity string
	// Event is the type of the event that records the result.
	Event string
	// Step is the loop step the event belongs to.
	Step int
	// Durability of the recording append: Durable when the workflow will
	// next cause a side effect that must not run unrecorded.
	Durability Durability
	// Input is the activity's input, of the type it was registered with.
	Input any
}

// IdempotencyKey is the key an at-least-once effect carries: the same
// run, step and index name the same effect on every attempt.
func IdempotencyKey(runID string, step, index int) string {
	return fmt.Sprintf("%s:%d:%d", runID, step, index)
}

// ActivityInfo is what a running activity may learn about its call.
type ActivityInfo struct {
	RunID    string
	Activity string
	Step     int
	// Attempt counts from 1; above 1 the activity is being retried.
	Attempt int
	// Pending are the events recorded before this activity that its
	// engine appends together with the activity's result: they are not in
	// the store yet while the activity runs. The Temporal engine, whose
	// activities may run in another process, hands them over; the
	// embedded engine leaves them empty (its activities run in the loop's
	// process and need none).
	Pending []Event
}

type activityInfoKey struct{}

// ActivityInfoFrom returns the info of the activity running under ctx.
func ActivityInfoFrom(ctx context.Context) (ActivityInfo, bool) {
	ai, ok := ctx.Value(activityInfoKey{}).(ActivityInfo)
	return ai, ok
}

// WithActivityInfo returns ctx carrying ai, for engines that run
// activities.
func WithActivityInfo(ctx context.Context, ai ActivityInfo) context.Context {
	return context.WithValue(ctx, activityInfoKey{}, ai)
}

// ErrorClass says whether an engine may retry a failed activity.
type ErrorClass int

const (
	// ClassNonRetryable: the same input fails the same way (a bad input, a
	// refused request); the workflow gets the error at once.
	ClassNonRetryable ErrorClass = iota
	// ClassRetryable: a transient failure (storage, a network blip); the
	// engine retries with backoff before the workflow sees it.
	ClassRetryable
)

func (c ErrorClass) String() string {
	if c == ClassRetryable {
		return "retryable"
	}
	return "non-retryable"
}

// ActivityError is an activity's failure with its class. A failed tool is
// not one: it is a result the model reads (a tool_result with status
// error). An error an activity returns without a class is non-retryable:
// an engine retries only what the activity says is safe to retry.
type ActivityError struct {
	Class ErrorClass
	Err   error
}

func (e *ActivityError) Error() string { return e.Err.Error() }
func (e *ActivityError) Unwrap() error { return e.Err }

// Retryable marks err as a transient activity failure.
func Retryable(err error) error {
	if err == nil {
		return nil
	}
	return &ActivityError{Class: ClassRetryable, Err: err}
}

// NonRetryable marks err as a permanent activity failure.
func NonRetryable(err error) error {
	if err == nil {
		return nil
	}
	return &ActivityError{Class: ClassNonRetryable, Err: err}
}

// IsRetryable reports whether err is marked retryable.
func IsRetryable(err error) bool {
	var ae *ActivityError
	return errors.As(err, &ae) && ae.Class == ClassRetryable
}

// RetryPolicy bounds how an engine retries retryable activity errors.
type RetryPolicy struct {
	// MaxAttempts is the most times one activity runs (default 3).
	MaxAttempts int
	// Backoff is the wait before the second attempt, doubling after each
	// (default 100ms), up to MaxBackoff (default 5s).
	Backoff, MaxBackoff time.Duration
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.Backoff <= 0 {
		p.Backoff = 100 * time.Millisecond
	}
	if p.MaxBackoff <= 0 {
		p.MaxBackoff = 5 * time.Second
	}
	return p
}
