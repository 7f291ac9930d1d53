package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// Options configure the Temporal engine.
type Options struct {
	// Client is connected to the namespace the runs live in (Dial).
	Client client.Client
	// TaskQueue the engine's workflows and activities run on.
	TaskQueue string
	// Store is agentplane's store: the runs' rows, logs, blobs and
	// pending signals live there on this engine too.
	Store      store.Store
	Workflow   engine.Workflow
	Activities *engine.Activities
	// Retry shapes the default activity policy (DefaultPolicy).
	Retry engine.RetryPolicy
	// Policy returns the policy of the Temporal activity name (an
	// engine activity's name, or ActivityAppend); nil or a zero policy:
	// DefaultPolicy(Retry).
	Policy func(name string) ActivityPolicy
	// Clock stamps the log's events and is the clock waits' deadlines are
	// on (default time.Now). Work wakes a waiting run whose deadline has
	// passed on it, beside the Temporal timer: with a fake clock, time
	// passes for the runs when the clock says so.
	Clock func() time.Time
	// Poll is how often Work wakes due runs and, with UntilIdle, looks
	// whether it is done (default 200ms).
	Poll time.Duration
	// Reconcile is how often Work looks on the server for runs whose
	// workflow closed without recording their end (default 5s).
	Reconcile time.Duration
	// ContinueAsNew says when a long run continues as new at a step
	// boundary (zero: DefaultContinueAsNewPolicy).
	ContinueAsNew ContinueAsNewPolicy
	// Worker tunes the Temporal worker Work runs; the engine sets the
	// background activity context, the slot counts and the panic policy,
	// and a zero DeadlockDetectionTimeout becomes DeadlockDetection.
	Worker worker.Options
	Logger *slog.Logger
}

// DeadlockDetection is how long the engine's worker lets workflow code run
// without yielding before the SDK calls it a deadlock (the SDK's default
// is 1 s). Under the panic policy a detected deadlock fails the workflow,
// and so the run, for good: a loaded machine (measured here: eight
// processes under -race on 2 cores) starves the loop's deterministic code
// of the CPU for more than a second, which is not a deadlock.
const DeadlockDetection = 10 * time.Second

// DefaultPolicy is an activity policy retrying retryable errors as r says:
// ten minutes an attempt, a dead worker noticed after DeadWorkerTimeout,
// r.MaxAttempts attempts, backoff from r.Backoff doubling to r.MaxBackoff.
func DefaultPolicy(r engine.RetryPolicy) ActivityPolicy {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = 3
	}
	if r.Backoff <= 0 {
		r.Backoff = 100 * time.Millisecond
	}
	if r.MaxBackoff < r.Backoff {
		r.MaxBackoff = max(r.Backoff, 5*time.Second)
	}
	return ActivityPolicy{StartToClose: 10 * time.Minute, Heartbeat: DeadWorkerTimeout, InitialInterval: r.Backoff, BackoffCoefficient: 2,
		MaxInterval: r.MaxBackoff, MaxAttempts: int32(r.MaxAttempts)}
}

// Engine is engine.Engine on Temporal: a run is a workflow execution whose
// id is the run id, its loop the workflow; its activities append
// agentplane's event log before and after each effect, so the log in the
// store stays the record that trace, streams and replay read.
type Engine struct {
	o    Options
	host *host
	can  ContinueAsNewPolicy
}

var _ engine.Engine = (*Engine)(nil)

// New validates o and returns the engine.
func New(o Options) (*Engine, error) {
	if o.Client == nil || o.Store == nil || o.Workflow == nil || o.Activities == nil {
		return nil, errors.New("temporal engine: Client, Store, Workflow and Activities are required")
	}
	if err := validName(o.TaskQueue); err != nil {
		return nil, fmt.Errorf("temporal engine: task queue: %w", err)
	}
	for _, n := range o.Activities.Names() {
		if n == ActivityAppend {
			return nil, fmt.Errorf("temporal engine: activity name %q is the engine's own", n)
		}
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Poll <= 0 {
		o.Poll = 200 * time.Millisecond
	}
	if o.Reconcile <= 0 {
		o.Reconcile = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = discardLogger
	}
	can := o.ContinueAsNew
	if can == (ContinueAsNewPolicy{}) {
		can = DefaultContinueAsNewPolicy()
	}
	if err := can.Validate(); err != nil {
		return nil, fmt.Errorf("temporal engine: %w", err)
	}
	e := &Engine{o: o, host: &host{st: o.Store, acts: o.Activities, clock: o.Clock}, can: can}
	for _, n := range append(o.Activities.Names(), ActivityAppend) {
		if _, err := e.policy(n).Options(""); err != nil {
			return nil, fmt.Errorf("temporal engine: activity %s: %w", n, err)
		}
	}
	return e, nil
}

func (e *Engine) policy(name string) ActivityPolicy {
	if e.o.Policy != nil {
		if p := e.o.Policy(name); p != (ActivityPolicy{}) {
			return p
		}
	}
	return DefaultPolicy(e.o.Retry)
}

// WithStore returns the engine with its workers' activities reading and
// appending through wrap(Store), sharing e's client, task queue, workflow
// and activities. The API server wraps the store so that every append made
// by this process's workers wakes its streams at once, as it wraps the
// embedded engine's pools.
func (e *Engine) WithStore(wrap func(store.Store) store.Store) engine.Engine {
	n := *e
	n.o.Store = wrap(e.o.Store)
	n.host = &host{st: n.o.Store, acts: e.o.Activities, clock: e.o.Clock}
	return &n
}

// Start implements engine.Engine: the run's row is created in the store
// (engine.CreateRun), then its workflow is started. A retried Start of the
// same request starts the workflow if an earlier one could not.
func (e *Engine) Start(ctx context.Context, r engine.StartRequest) (engine.Started, error) {
	st, err := engine.CreateRun(ctx, e.o.Store, r)
	if err != nil {
		return st, err
	}
	return st, e.launch(ctx, r.RunID)
}

// launch starts the workflow of the stored run runID, unless it was
// started already.
func (e *Engine) launch(ctx context.Context, runID string) error {
	run, err := e.o.Store.GetRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("start run %s: %w", runID, err)
	}
	_, err = e.o.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                    runID,
		TaskQueue:             e.o.TaskQueue,
		WorkflowIDReusePolicy: enums.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, WorkflowName, runInput{Run: engine.RunInfoOf(run)})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &started) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("start run %s on temporal: %w", runID, err)
	}
	return nil
}

// Signal implements engine.Engine: the signal is stored (so a keyed one
// is taken once, whichever process sends it), then delivered to the
// workflow, which records it in the append that marks it consumed.
func (e *Engine) Signal(ctx context.Context, runID string, s engine.Signal) error {
	sg, err := engine.StoreSignal(ctx, e.o.Store, runID, s, e.o.Clock().UTC())
	if err != nil {
		return err
	}
	return e.deliver(ctx, runID, sg)
}

// Cancel implements engine.Engine: a cancel is a signal, which the loop
// takes at its next step boundary or while it waits.
func (e *Engine) Cancel(ctx context.Context, runID string, c engine.Cancel) error {
	sg, err := engine.StoreCancel(ctx, e.o.Store, runID, c, e.o.Clock().UTC())
	if err != nil {
		return err
	}
	return e.deliver(ctx, runID, sg)
}

func (e *Engine) deliver(ctx context.Context, runID string, sg *store.Signal) error {
	err := e.o.Client.SignalWorkflow(ctx, runID, "", SignalName, sigMsg{ID: sg.ID, Kind: sg.Kind, Payload: sg.Payload})
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// The run ended (or its workflow was never started): the signal
		// stays pending in the store, as on the embedded engine.
		return nil
	}
	if err != nil {
		return fmt.Errorf("signal run %s on temporal: %w", runID, err)
	}
	return nil
}

// Verify implements engine.Engine: the loop re-runs over the run's
// recorded log in agentplane's store (the record every engine writes),
// without any activity, as on the embedded engine.
func (e *Engine) Verify(ctx context.Context, runID string) (engine.Verified, error) {
	w, err := engine.New(engine.Options{Store: e.o.Store, Workflow: e.o.Workflow, Activities: e.o.Activities, Clock: e.o.Clock})
	if err != nil {
		return engine.Verified{}, err
	}
	out, n, err := w.Verify(ctx, runID)
	return engine.Verified{Status: out.Status, Result: out.Result, Events: n}, err
}

// Drive implements engine.Engine: it runs a worker in this process until
// the run ends or waits.
func (e *Engine) Drive(ctx context.Context, runID string) error {
	run, err := e.o.Store.GetRun(ctx, runID)
	if err != nil {
		return fmt.Errorf("run %s: %w: %w", runID, engine.ErrNotRunnable, err)
	}
	if ready, err := e.runnable(ctx, run); err != nil || !ready {
		if err == nil {
			err = fmt.Errorf("run %s is %s: %w", runID, run.Status, engine.ErrNotRunnable)
		}
		return err
	}
	if err := e.launch(ctx, runID); err != nil {
		return err
	}
	return e.serve(ctx, 1, func(ctx context.Context) (bool, error) {
		r, err := e.o.Store.GetRun(ctx, runID)
		if err != nil {
			return false, err
		}
		if store.Terminal(r.Status) {
			return true, nil
		}
		ready, err := e.runnable(ctx, r)
		return !ready && r.Status == store.StatusWaiting, err
	})
}

// Work implements engine.Engine.
func (e *Engine) Work(ctx context.Context, o engine.WorkOptions) error {
	if o.Concurrency <= 0 {
		o.Concurrency = 4
	}
	var done func(context.Context) (bool, error)
	if o.UntilIdle {
		done = e.idle
	}
	return e.serve(ctx, o.Concurrency, done)
}

// serve runs a Temporal worker with n activity slots until ctx ends or
// done says so, reconciling and waking runs every Poll.
func (e *Engine) serve(ctx context.Context, n int, done func(context.Context) (bool, error)) error {
	wo := e.o.Worker
	wo.BackgroundActivityContext = ctx
	wo.MaxConcurrentActivityExecutionSize = n
	wo.MaxConcurrentWorkflowTaskExecutionSize = max(2, n)
	// A history the code no longer matches fails the workflow (and the
	// run, by reconciliation) rather than retrying it forever.
	wo.WorkflowPanicPolicy = worker.FailWorkflow
	if wo.DeadlockDetectionTimeout <= 0 {
		wo.DeadlockDetectionTimeout = DeadlockDetection
	}
	w := worker.New(e.o.Client, e.o.TaskQueue, wo)
	w.RegisterWorkflowWithOptions(e.run, workflow.RegisterOptions{Name: WorkflowName})
	w.RegisterActivityWithOptions(e.host.appendActivity, activity.RegisterOptions{Name: ActivityAppend})
	for _, name := range e.o.Activities.Names() {
		w.RegisterActivityWithOptions(e.host.executeActivity(name), activity.RegisterOptions{Name: name})
	}
	if err := w.Start(); err != nil {
		return fmt.Errorf("temporal engine: start worker on %s: %w", e.o.TaskQueue, err)
	}
	defer w.Stop()
	if err := e.check(ctx); err != nil && ctx.Err() == nil {
		e.o.Logger.Warn("temporal engine: check runs against this code", "err", err)
	}
	tick := time.NewTicker(e.o.Poll)
	defer tick.Stop()
	reconciled := time.Now()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		reconcile := time.Since(reconciled) >= e.o.Reconcile
		if reconcile {
			reconciled = time.Now()
		}
		if err := e.tend(ctx, reconcile); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			e.o.Logger.Warn("temporal engine: tend runs", "err", err)
			continue
		}
		if done != nil {
			ok, err := done(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err != nil {
				return err
			}
			if ok {
				return nil
			}
		}
	}
}

// activeStatuses are the statuses of a run that has not ended.
var activeStatuses = []string{store.StatusQueued, store.StatusRunning, store.StatusWaiting}

// active lists the runs that have not ended.
func (e *Engine) active(ctx context.Context) ([]*store.Run, error) {
	return e.listRuns(ctx, activeStatuses...)
}

// listRuns lists the runs in the statuses given.
func (e *Engine) listRuns(ctx context.Context, statuses ...string) ([]*store.Run, error) {
	var out []*store.Run
	for _, st := range statuses {
		rs, err := e.o.Store.ListRuns(ctx, store.RunFilter{Status: st, Limit: 1000})
		if err != nil {
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// tend wakes the waiting runs whose deadline passed on the engine's clock
// and, with reconcile, marks failed the runs whose workflow closed without
// recording their end (a history the code no longer replays, a termination
// by an operator).
func (e *Engine) tend(ctx context.Context, reconcile bool) error {
	// Between reconciliations only waiting runs need a look: one query a
	// poll rather than three.
	statuses := []string{store.StatusWaiting}
	if reconcile {
		statuses = activeStatuses
	}
	runs, err := e.listRuns(ctx, statuses...)
	if err != nil {
		return err
	}
	now := e.o.Clock().UTC()
	for _, r := range runs {
		if r.Status == store.StatusWaiting && !r.WakeAt.IsZero() && !now.Before(r.WakeAt) {
			err := e.o.Client.SignalWorkflow(ctx, r.ID, "", WakeName, wakeMsg{Now: now})
			var nf *serviceerror.NotFound
			if err != nil && !errors.As(err, &nf) {
				return fmt.Errorf("wake run %s: %w", r.ID, err)
			}
		}
		if !reconcile {
			continue
		}
		if err := e.reconcile(ctx, r); err != nil {
			return err
		}
	}
	return nil
}

// check makes the worker just started replay the history of every run
// that may have an activity in flight (queued or running), by waking it:
// a history this code no longer matches fails its workflow (and the run,
// by reconciliation) before a retried activity of it can act. Temporal
// retries an activity without asking the workflow, and would otherwise
// find out only when the retried activity's result arrives. A waiting run
// is checked when it wakes: its wake-up replays it before any new activity
// is scheduled.
func (e *Engine) check(ctx context.Context) error {
	runs, err := e.active(ctx)
	if err != nil {
		return err
	}
	for _, r := range runs {
		if r.Status == store.StatusWaiting {
			continue
		}
		// A wake with no time changes nothing for the run but makes a
		// workflow task of it.
		err := e.o.Client.SignalWorkflow(ctx, r.ID, "", WakeName, wakeMsg{})
		var nf *serviceerror.NotFound
		if err != nil && !errors.As(err, &nf) {
			return fmt.Errorf("check run %s: %w", r.ID, err)
		}
	}
	return nil
}

// fail marks the run runID failed with msg unless it ended.
func (e *Engine) fail(ctx context.Context, runID, msg string) error {
	cur, err := e.o.Store.GetRun(ctx, runID)
	if err != nil || store.Terminal(cur.Status) {
		return err
	}
	failed := store.StatusFailed
	e.o.Logger.Error("temporal engine: run failed outside its workflow", "run", runID, "reason", msg)
	return e.o.Store.Append(ctx, store.AppendRequest{RunID: runID, Epoch: cur.LeaseEpoch, Durable: true,
		Update: &store.RunUpdate{Status: &failed, Result: &msg}})
}

// reconcile marks r failed when its workflow closed while r did not end.
func (e *Engine) reconcile(ctx context.Context, r *store.Run) error {
	d, err := e.o.Client.DescribeWorkflow(ctx, r.ID, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		// No workflow: its Start stopped between storing the run and
		// starting the workflow (a crash, a lost connection), or is still
		// on its way. A queued run with nothing in its log is started now;
		// launch leaves a workflow that a slow Start started meanwhile.
		if r.Status == store.StatusQueued && r.LastSeq == 0 {
			return e.launch(ctx, r.ID)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("describe run %s: %w", r.ID, err)
	}
	status := d.RawResponse.GetWorkflowExecutionInfo().GetStatus()
	if status == enums.WORKFLOW_EXECUTION_STATUS_RUNNING || status == enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		return nil
	}
	gctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	why := e.o.Client.GetWorkflow(gctx, r.ID, "").Get(gctx, nil)
	msg := fmt.Sprintf("platform error: the workflow on temporal ended %s without recording the run's end", strings.ToLower(status.String()))
	if why != nil {
		msg += ": " + why.Error()
	}
	if strings.Contains(strings.ToLower(msg), "nondetermin") {
		msg = "platform error: " + engine.ErrNondeterminism.Error() + ": " + msg
	}
	// The row may have ended meanwhile (the workflow's last append).
	return e.fail(ctx, r.ID, msg)
}

// runnable reports whether r can make progress now: it has not ended and
// does not wait, or it waits with a signal pending or its deadline passed.
func (e *Engine) runnable(ctx context.Context, r *store.Run) (bool, error) {
	switch {
	case store.Terminal(r.Status):
		return false, nil
	case r.Status != store.StatusWaiting:
		return true, nil
	case !r.WakeAt.IsZero() && !e.o.Clock().Before(r.WakeAt):
		return true, nil
	}
	pending, err := e.o.Store.PendingSignals(ctx, r.ID)
	if err != nil {
		return false, err
	}
	for _, sg := range pending {
		if sg.Kind != engine.SignalReplay {
			return true, nil
		}
	}
	return false, nil
}

// idle reports whether no run can make progress now. Runs move between
// statuses while they are listed (a waiting run that takes its signal is
// running a moment later: the lists of each status, and the look at its
// pending signals, can all miss it), so two listings must agree.
func (e *Engine) idle(ctx context.Context) (bool, error) {
	for range 2 {
		if ok, err := e.idleNow(ctx); err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// idleNow is one listing of idle.
func (e *Engine) idleNow(ctx context.Context) (bool, error) {
	runs, err := e.active(ctx)
	if err != nil {
		return false, err
	}
	for _, r := range runs {
		if ready, err := e.runnable(ctx, r); err != nil || ready {
			return false, err
		}
	}
	return true, nil
}
