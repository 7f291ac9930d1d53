package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Options configure a Worker and the Embedded engine.
type Options struct {
	Store    store.Store
	Workflow Workflow
	// Activities are the activities the workflow names in its Calls.
	Activities *Activities
	// Retry bounds the retries of retryable activity errors.
	Retry RetryPolicy
	// Owner names this worker in leases (default host:pid:random).
	Owner string
	// LeaseTTL is how long a lease lasts without renewal (default 15s). A
	// crashed worker's runs are taken over after at most this long.
	LeaseTTL time.Duration
	// Poll is how often an idle worker looks for runnable runs (default 50ms).
	Poll   time.Duration
	Clock  func() time.Time
	Logger *slog.Logger
}

// Worker executes runs of one workflow: it claims them under leases and
// drives them (Embedded is the Engine built on it).
type Worker struct {
	o Options
}

// New validates options and returns a worker.
func New(o Options) (*Worker, error) {
	if o.Store == nil || o.Workflow == nil {
		return nil, errors.New("engine: Store and Workflow are required")
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 15 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 50 * time.Millisecond
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	o.Retry = o.Retry.withDefaults()
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Owner == "" {
		host, _ := os.Hostname()
		o.Owner = fmt.Sprintf("%s:%d:%08x", host, os.Getpid(), rand.Uint32())
	}
	return &Worker{o: o}, nil
}

// Owner returns this worker's lease owner name.
func (e *Worker) Owner() string { return e.o.Owner }

// Execute claims the run and drives it until it ends or waits, returning
// the run as stored afterwards. ErrNotFound means it is not runnable now (it
// ended, waits, or another worker holds it).
func (e *Worker) Execute(ctx context.Context, runID string) (*store.Run, error) {
	run, err := e.o.Store.ClaimRunByID(ctx, runID, e.o.Owner, e.o.LeaseTTL, e.o.Clock())
	if err != nil {
		return nil, err
	}
	if err := e.drive(ctx, run); err != nil {
		return nil, err
	}
	return e.o.Store.GetRun(context.WithoutCancel(ctx), runID)
}

// WorkOptions configure Work.
type WorkOptions struct {
	// Concurrency is how many runs execute at once (default 4).
	Concurrency int
	// UntilIdle makes Work return once no run is runnable or leased by others
	// that could become runnable (queued, running or due).
	UntilIdle bool
}

// Work claims and drives runnable runs until ctx ends (or, with UntilIdle,
// until nothing is left to do).
func (e *Worker) Work(ctx context.Context, wo WorkOptions) error {
	if wo.Concurrency <= 0 {
		wo.Concurrency = 4
	}
	sem := make(chan struct{}, wo.Concurrency)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	defer wg.Wait()
	for {
		if ctx.Err() != nil {
			return nil
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		run, err := e.o.Store.ClaimRun(ctx, e.o.Owner, e.o.LeaseTTL, e.o.Clock())
		if errors.Is(err, store.ErrNotFound) {
			<-sem
			if wo.UntilIdle {
				busy := len(sem) > 0
				if !busy {
					more, err := e.pending(ctx)
					if err != nil {
						return err
					}
					if !more {
						wg.Wait()
						mu.Lock()
						defer mu.Unlock()
						return firstErr
					}
				}
			}
			select {
			case <-time.After(e.o.Poll):
			case <-ctx.Done():
				return nil
			}
			continue
		}
		if err != nil {
			<-sem
			if ctx.Err() != nil {
				return nil
			}
			e.o.Logger.Error("claim run", "err", err)
			time.Sleep(e.o.Poll)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := e.drive(ctx, run); err != nil && ctx.Err() == nil {
				e.o.Logger.Error("run", "run", run.ID, "err", err)
				mu.Lock()
				if firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
}

// pending reports whether any run is queued or running (possibly under a
// lease that will expire and be taken over).
func (e *Worker) pending(ctx context.Context) (bool, error) {
	for _, st := range []string{store.StatusQueued, store.StatusRunning} {
		rs, err := e.o.Store.ListRuns(ctx, store.RunFilter{Status: st, Limit: 1})
		if err != nil {
			return false, err
		}
		if len(rs) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// drive runs the workflow for a claimed run, renewing its lease meanwhile.
func (e *Worker) drive(parent context.Context, run *store.Run) error {
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	stopRenew := make(chan struct{})
	renewDone := make(chan struct{})
	go func() {
		defer close(renewDone)
		t := time.NewTicker(e.o.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-stopRenew:
				return
			case <-t.C:
				if err := e.o.Store.RenewLease(ctx, run.ID, run.LeaseEpoch, e.o.LeaseTTL, e.o.Clock()); err != nil {
					if errors.Is(err, store.ErrLeaseLost) {
						cancel(err)
						return
					}
					e.o.Logger.Warn("renew lease", "run", run.ID, "err", err)
				}
			}
		}
	}()
	out, err := e.runOnce(ctx, run)
	close(stopRenew)
	<-renewDone

	rctx := context.WithoutCancel(parent)
	var park *parked
	switch {
	case err == nil:
		var noWake time.Time
		if err := e.release(rctx, run, store.RunUpdate{Status: &out.Status, Result: &out.Result, WakeAt: &noWake}); err != nil {
			return err
		}
		if out.Status == store.StatusFailed {
			// The server's log says why, not only the run's record.
			e.o.Logger.Warn("run failed", "run", run.ID, "tenant", run.Tenant, "agent", fmt.Sprintf("%s@%d", run.Agent, run.AgentVersion), "reason", out.Result)
		}
		return nil
	case errors.As(err, &park):
		// Waiting holds nothing: the lease goes, and a signal or the timer
		// makes the run claimable again.
		st := store.StatusWaiting
		return e.release(rctx, run, store.RunUpdate{Status: &st, WakeAt: &park.wakeAt})
	case errors.Is(err, trace.ErrDamaged):
		// Failed closed: the run never resumes from a log that does not
		// verify. Nothing is appended to the damaged log; the reason is
		// the run's result, shown by the CLI and the API.
		e.o.Logger.Error("run log damaged; run failed without resuming", "run", run.ID, "err", err)
		st, msg := store.StatusFailed, "not resumed: "+err.Error()
		return e.release(rctx, run, store.RunUpdate{Status: &st, Result: &msg})
	case parent.Err() != nil || errors.Is(context.Cause(ctx), store.ErrLeaseLost) || errors.Is(err, store.ErrLeaseLost):
		// Shutting down or fenced out: leave the run to whoever holds it
		// next; its log is intact up to the last commit.
		return nil
	default:
		// The workflow failed in a way it could not record (for example the
		// log could not be written, after retries). Mark the run failed
		// without a terminal event; trace shows the last durable event. If
		// even that cannot be written, the lease runs out and another
		// worker resumes the run from its log: it is retried, never left
		// looking healthy.
		st, msg := store.StatusFailed, "platform error: "+err.Error()
		if errors.Is(err, store.ErrUnavailable) {
			// The store's own words stay in the server's log.
			msg = "platform error: the run's log could not be written (the store was unavailable); start the run again"
		}
		e.o.Logger.Error("run failed: its log could not be written", "run", run.ID, "err", err)
		if rerr := e.release(rctx, run, store.RunUpdate{Status: &st, Result: &msg}); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
}

// release ends run's lease with u, retrying while the store is
// unavailable as appends do.
func (e *Worker) release(ctx context.Context, run *store.Run, u store.RunUpdate) error {
	backoff := e.o.Retry.Backoff
	for attempt := 1; ; attempt++ {
		err := e.o.Store.ReleaseRun(ctx, run.ID, run.LeaseEpoch, u)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || attempt == appendAttempts {
			return err
		}
		time.Sleep(backoff)
		backoff = min(backoff*2, e.o.Retry.MaxBackoff)
	}
}

func (e *Worker) newEnv(ctx context.Context, run *store.Run, verify bool) (*env, error) {
	evs, err := e.o.Store.Events(ctx, run.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	// A log is acted on only once it proves intact: an edited payload, a
	// rewritten hash or a damaged blob would otherwise be served to the
	// workflow as if recorded, and acted on.
	if err := trace.CheckLog(ctx, e.o.Store.Blobs(run.Tenant), evs); err != nil {
		return nil, err
	}
	en := &env{s: e.o.Store, acts: e.o.Activities, retry: e.o.Retry, run: run, info: RunInfoOf(run), epoch: run.LeaseEpoch,
		recorded: evs, clock: e.o.Clock, verify: verify}
	if n := len(evs); n > 0 {
		en.seq, en.head = evs[n-1].Seq, evs[n-1].Hash
	}
	en.now = run.CreatedAt
	return en, nil
}

func (e *Worker) runOnce(ctx context.Context, run *store.Run) (Outcome, error) {
	en, err := e.newEnv(ctx, run, false)
	if err != nil {
		return Outcome{}, err
	}
	return e.o.Workflow(ctx, en)
}

// Verify re-runs the workflow over a run's recorded log without calling any
// model or tool. It fails if the code diverges from the log or needs an
// effect the log lacks, and returns the outcome and the number of events
// the code consumed.
func (e *Worker) Verify(ctx context.Context, runID string) (Outcome, int, error) {
	run, err := e.o.Store.GetRun(ctx, runID)
	if err != nil {
		return Outcome{}, 0, err
	}
	en, err := e.newEnv(ctx, run, true)
	if err != nil {
		return Outcome{}, 0, err
	}
	out, err := e.o.Workflow(ctx, en)
	if err != nil {
		return out, en.cursor, err
	}
	if en.cursor != len(en.recorded) {
		return out, en.cursor, fmt.Errorf("%w: code finished after %d of %d events", ErrNondeterminism, en.cursor, len(en.recorded))
	}
	return out, en.cursor, nil
}

func signalPayload(sg *store.Signal) []byte { return SignalEventPayload(sg.Kind, sg.Payload) }

// SignalEventPayload is the payload of the signal event that records a
// signal of kind with payload (JSON, or none), on every engine.
func SignalEventPayload(kind string, payload []byte) []byte {
	b, _ := json.Marshal(struct {
		Kind    string          `json:"kind"`
		Payload json.RawMessage `json:"payload,omitempty"`
	}{kind, json.RawMessage(payload)})
	return b
}

// TimerEventPayload is the payload of the signal event that records a
// wait's deadline passing (kind SignalTimer), on every engine.
func TimerEventPayload(due time.Time) []byte {
	b, _ := json.Marshal(struct {
		Kind    string            `json:"kind"`
		Payload map[string]string `json:"payload"`
	}{SignalTimer, map[string]string{"due": due.UTC().Format(time.RFC3339Nano)}})
	return b
}
