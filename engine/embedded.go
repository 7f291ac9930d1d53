package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// SignalReplay carries a replay's instructions to the new run on the
// embedded engine: stored before the run, read once by the loop when the
// run starts (PendingReplay) and recorded in its log.
const SignalReplay = "replay"

// Embedded is the Engine on agentplane's own store: a run is a row plus
// its log, a start creates the row, a signal is a pending row the next
// claim records, and Work and Drive claim runs under leases (Worker).
type Embedded struct {
	w *Worker
	o Options
}

var _ Engine = (*Embedded)(nil)

// NewEmbedded builds the embedded engine over o.Store: its workers run
// o.Workflow and its starts and signals write o.Store.
func NewEmbedded(o Options) (*Embedded, error) {
	w, err := New(o)
	if err != nil {
		return nil, err
	}
	return &Embedded{w: w, o: o}, nil
}

// PoolOptions configure a pool of an embedded engine. Zero fields keep the
// engine's own setting.
type PoolOptions struct {
	// Wrap wraps the engine's store for the pool's claims and appends.
	Wrap     func(store.Store) store.Store
	LeaseTTL time.Duration
	Poll     time.Duration
	Clock    func() time.Time
	Logger   *slog.Logger
}

// Pool returns an engine over the same workflow and store (wrapped by
// o.Wrap), under its own lease owner: the API's worker pools claim through
// such wrappers (fair queuing, interactive runs first, stream wake-ups).
func (e *Embedded) Pool(o PoolOptions) (*Embedded, error) {
	n := e.o
	n.Owner = ""
	if o.Wrap != nil {
		n.Store = o.Wrap(n.Store)
	}
	if o.LeaseTTL > 0 {
		n.LeaseTTL = o.LeaseTTL
	}
	if o.Poll > 0 {
		n.Poll = o.Poll
	}
	if o.Clock != nil {
		n.Clock = o.Clock
	}
	if o.Logger != nil {
		n.Logger = o.Logger
	}
	return NewEmbedded(n)
}

// Owner is the name this engine's workers hold leases under.
func (e *Embedded) Owner() string { return e.w.Owner() }

// Start implements Engine.
func (e *Embedded) Start(ctx context.Context, r StartRequest) (Started, error) {
	return CreateRun(ctx, e.o.Store, r)
}

// CreateRun is the store's side of Engine.Start on every engine: it checks r,
// checks the pinned definition against the stored version, and creates the
// run's row as queued (with a replay's instructions stored first). It is
// idempotent on r.RunID like Start: an existing run of the same request
// gives Started{Created: false}, of another an error wrapping
// ErrStartConflict.
func CreateRun(ctx context.Context, st store.Store, r StartRequest) (Started, error) {
	if err := checkStart(r); err != nil {
		return Started{}, err
	}
	if st, done, err := started(ctx, st, r); done || err != nil {
		return st, err
	}
	v, err := st.GetAgentVersion(ctx, r.Agent, r.AgentVersion)
	if err != nil {
		return Started{}, fmt.Errorf("start run %s: agent %s@%d: %w", r.RunID, r.Agent, r.AgentVersion, err)
	}
	if v.SpecHash != r.AgentHash {
		return Started{}, fmt.Errorf("start run %s: agent %s@%d: the pinned definition hash is not the stored version's", r.RunID, r.Agent, r.AgentVersion)
	}
	run := &store.Run{ID: r.RunID, Tenant: r.Tenant, User: r.User, Agent: r.Agent, AgentVersion: r.AgentVersion, Task: r.Task,
		Mode: r.Mode, Status: store.StatusQueued, Currency: r.Currency, Bindings: maps.Clone(r.Bindings)}
	if r.Replay != nil {
		spec, err := json.Marshal(r.Replay.Info)
		if err != nil {
			return Started{}, err
		}
		// The instructions go first, so the run is never claimable
		// without them.
		if err := st.SendSignal(ctx, &store.Signal{RunID: r.RunID, Kind: SignalReplay, Payload: spec}); err != nil {
			return Started{}, fmt.Errorf("start replay %s: %w", r.RunID, err)
		}
		run.ParentRunID = r.Replay.Info.Of
	}
	err = st.CreateRun(ctx, run)
	if errors.Is(err, store.ErrConflict) {
		// Another Start of the same id won the race.
		if st, done, err := started(ctx, st, r); done || err != nil {
			return st, err
		}
	}
	if err != nil {
		return Started{}, fmt.Errorf("start run %s: %w", r.RunID, err)
	}
	return Started{RunID: r.RunID, Created: true}, nil
}

func checkStart(r StartRequest) error {
	switch {
	case r.RunID == "" || strings.ContainsAny(r.RunID, ":/ "):
		return fmt.Errorf("start run: invalid run id %q", r.RunID)
	case r.Tenant == "" || r.User == "":
		return fmt.Errorf("start run %s: tenant and user are required", r.RunID)
	case r.Agent == "" || r.AgentVersion < 1:
		return fmt.Errorf("start run %s: a pinned agent version is required", r.RunID)
	case r.Mode != "stream" && r.Mode != "async":
		return fmt.Errorf("start run %s: mode must be stream or async, not %q", r.RunID, r.Mode)
	case r.Replay != nil && r.Replay.Info.Of == "":
		return fmt.Errorf("start run %s: a replay names its original run", r.RunID)
	}
	return nil
}

// started reports whether r's run exists already (done), and whether it
// was created by the same request.
func started(ctx context.Context, st store.Store, r StartRequest) (Started, bool, error) {
	run, err := st.GetRun(ctx, r.RunID)
	if errors.Is(err, store.ErrNotFound) {
		return Started{}, false, nil
	}
	if err != nil {
		return Started{}, true, fmt.Errorf("start run %s: %w", r.RunID, err)
	}
	parent := ""
	if r.Replay != nil {
		parent = r.Replay.Info.Of
	}
	same := run.Tenant == r.Tenant && run.User == r.User && run.Agent == r.Agent && run.AgentVersion == r.AgentVersion &&
		run.Task == r.Task && run.Mode == r.Mode && run.ParentRunID == parent && maps.Equal(run.Bindings, r.Bindings)
	if !same {
		return Started{}, true, fmt.Errorf("start run %s: %w", r.RunID, ErrStartConflict)
	}
	return Started{RunID: r.RunID}, true, nil
}

// Signal implements Engine. Only the kinds a caller may send are taken:
// timers and replay instructions are the engine's own.
func (e *Embedded) Signal(ctx context.Context, runID string, s Signal) error {
	_, err := StoreSignal(ctx, e.o.Store, runID, s, e.now())
	return err
}

// Cancel implements Engine.
func (e *Embedded) Cancel(ctx context.Context, runID string, c Cancel) error {
	_, err := StoreCancel(ctx, e.o.Store, runID, c, e.now())
	return err
}

// StoreCancel is the store's side of Engine.Cancel on every engine: the
// cancel is stored as the run's pending signal of kind trace.SignalCancel,
// its payload who asked and why.
func StoreCancel(ctx context.Context, st store.SignalStore, runID string, c Cancel, at time.Time) (*store.Signal, error) {
	payload, err := json.Marshal(struct {
		By     string `json:"by,omitempty"`
		Reason string `json:"reason,omitempty"`
	}{c.By, c.Reason})
	if err != nil {
		return nil, err
	}
	return storeSignal(ctx, st, runID, Signal{Kind: trace.SignalCancel, Payload: payload}, at)
}

// StoreSignal is the store's side of Engine.Signal on every engine: it
// checks s (an approval or a message with a JSON payload; timers and replay
// instructions are the engine's own) and stores it as the run's pending
// signal, refusing a Key the run already received with ErrDuplicateSignal.
// It returns the stored signal (its ID is what the recording append
// consumes).
func StoreSignal(ctx context.Context, st store.SignalStore, runID string, s Signal, at time.Time) (*store.Signal, error) {
	if s.Kind != trace.SignalApproval && s.Kind != trace.SignalMessage {
		return nil, fmt.Errorf("signal run %s: kind %q cannot be sent (approval or message; cancel with Cancel)", runID, s.Kind)
	}
	return storeSignal(ctx, st, runID, s, at)
}

func storeSignal(ctx context.Context, st store.SignalStore, runID string, s Signal, at time.Time) (*store.Signal, error) {
	if !json.Valid(s.Payload) {
		return nil, fmt.Errorf("signal run %s: the payload is not JSON", runID)
	}
	sg := &store.Signal{RunID: runID, Kind: s.Kind, Payload: s.Payload, Key: s.Key, CreatedAt: at}
	err := st.SendSignal(ctx, sg)
	if s.Key != "" && errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("signal run %s: %w (%s)", runID, ErrDuplicateSignal, s.Key)
	}
	if err != nil {
		return nil, fmt.Errorf("signal run %s: %w", runID, err)
	}
	return sg, nil
}

func (e *Embedded) now() time.Time {
	if e.o.Clock != nil {
		return e.o.Clock().UTC()
	}
	return time.Now().UTC()
}

// Verify implements Engine.
func (e *Embedded) Verify(ctx context.Context, runID string) (Verified, error) {
	out, n, err := e.w.Verify(ctx, runID)
	return Verified{Status: out.Status, Result: out.Result, Events: n}, err
}

// Drive implements Engine.
func (e *Embedded) Drive(ctx context.Context, runID string) error {
	_, err := e.Execute(ctx, runID)
	return err
}

// Execute is Drive returning the run as stored afterwards (tests read it).
func (e *Embedded) Execute(ctx context.Context, runID string) (*store.Run, error) {
	run, err := e.w.Execute(ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return nil, fmt.Errorf("run %s: %w: %w", runID, ErrNotRunnable, err)
	}
	return run, err
}

// Work implements Engine.
func (e *Embedded) Work(ctx context.Context, o WorkOptions) error { return e.w.Work(ctx, o) }

// PendingReplay returns the replay instructions Start stored for runID, or
// nil when the run is no replay (the loop's ReplaySpec on this engine).
func PendingReplay(ctx context.Context, sigs store.SignalStore, runID string) (*trace.ReplayInfo, error) {
	pending, err := sigs.PendingSignals(ctx, runID)
	if err != nil {
		return nil, err
	}
	for _, sg := range pending {
		if sg.Kind == SignalReplay {
			var info trace.ReplayInfo
			if err := json.Unmarshal(sg.Payload, &info); err != nil {
				return nil, fmt.Errorf("replay instructions for %s: %w", runID, err)
			}
			return &info, nil
		}
	}
	return nil, nil
}
