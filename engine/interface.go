package engine

import (
	"context"
	"errors"

	"github.com/agentplane/agentplane/trace"
)

// Engine is what the rest of agentplane asks of a durable-execution engine:
// start a run, signal it, cancel it, verify it, and run this process's
// workers. The API, the CLI, evals and replay reach runs only through it
// (mostly by way of package runs), never by writing a run's state into the
// store, so another engine (Temporal) can take the same calls.
//
// Reads of a run (its status row, its log, its blobs) stay on agentplane's
// own event store: every engine writes the log there before each side
// effect, so streams, trace and timelines read the same record whatever
// engine executed the run.
//
// Methods are safe for concurrent use. An Engine owns no resource that
// Close would release; its workers stop when Work's context ends.
type Engine interface {
	// Start queues a new run with everything it runs on pinned. It is
	// idempotent on r.RunID: starting an id that exists with the same
	// pinned request returns Started{Created: false}; with a different
	// one it fails with an error wrapping ErrStartConflict.
	Start(ctx context.Context, r StartRequest) (Started, error)
	// Signal delivers an external input (an approval decision, a user
	// message) to a run; the loop consumes signals in the order they were
	// sent and each is recorded in the run's log once. A waiting run
	// becomes runnable.
	Signal(ctx context.Context, runID string, s Signal) error
	// Cancel asks a run to stop: it ends as cancelled at its next step
	// boundary (or while it waits), with the cancel recorded in its log.
	Cancel(ctx context.Context, runID string, c Cancel) error
	// Verify re-runs the loop over the run's recorded log without calling
	// any model or tool, and fails (ErrNondeterminism, ErrWouldGoLive) if
	// the code diverges from the log or needs an effect the log lacks.
	Verify(ctx context.Context, runID string) (Verified, error)
	// Drive runs one run in this process until it ends or waits (the
	// CLI's foreground run, evals). It fails with an error wrapping
	// ErrNotRunnable when the run is not runnable now: it ended, it waits
	// without a due timer or a pending signal, or another worker holds it.
	Drive(ctx context.Context, runID string) error
	// Work runs this process's workers, executing runnable runs until ctx
	// ends (or, with o.UntilIdle, until nothing is left to do). It returns
	// the first error a run could not record; ctx ending is not an error.
	Work(ctx context.Context, o WorkOptions) error
}

// Errors of Engine methods (test with errors.Is).
var (
	// ErrStartConflict: a run of that id exists with another request.
	ErrStartConflict = errors.New("a run with this id exists with a different request")
	// ErrNotRunnable: Drive found nothing to do for the run now.
	ErrNotRunnable = errors.New("run is not runnable now")
)

// StartRequest is a new run with everything it runs on pinned: nothing in
// it is resolved again later, so a retried Start and every engine run the
// same thing.
type StartRequest struct {
	// RunID names the run and is the idempotency key of Start.
	RunID  string
	Tenant string
	// User is the principal (with Tenant) the run acts on behalf of.
	User string
	// Agent, AgentVersion and AgentHash pin the definition (and so its
	// model, tools, instructions and budgets). An engine refuses a hash
	// that is not the stored version's.
	Agent        string
	AgentVersion int
	AgentHash    [32]byte
	Task         string
	// Mode is stream (interactive, scheduled first) or async.
	Mode string
	// Currency is the currency of the run's cost budget and counters.
	Currency string
	// Bindings narrow the argument values the run may act on.
	Bindings map[string]string
	// Replay, when set, makes the run a replay of a recorded run.
	Replay *Replay
}

// Replay is where a replay comes from: the original run and the
// instructions the loop records in the new run's run_started.
type Replay struct {
	Info trace.ReplayInfo
}

// Started is the result of Start.
type Started struct {
	RunID string
	// Created is false when an earlier Start of the same request created
	// the run.
	Created bool
}

// Signal is an external input to a run.
type Signal struct {
	// Kind is trace.SignalApproval or trace.SignalMessage (a cancel is
	// Engine.Cancel).
	Kind string
	// Payload is the signal's JSON, recorded in the run's log as it is.
	Payload []byte
}

// Cancel is a request to stop a run.
type Cancel struct {
	// By is the user who asked ("" for an operator at the CLI).
	By     string
	Reason string
}

// Verified is the result of Verify: the outcome the loop reached over the
// recorded log and how many of its events it consumed.
type Verified struct {
	Status string
	Result string
	Events int
}
