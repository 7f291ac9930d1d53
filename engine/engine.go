// Package engine is agentplane's durable-execution seam and its embedded
// engine on the store. A run's append-only, hash-chained event log is the
// whole of its state. The workflow (the agent loop) reaches the outside
// world only through Env: named activities with serialisable inputs
// (Execute), records of what it decided (Record), signals and timers
// (Signals, Await) and reads of immutable content by hash (Blob, Manifest,
// RunLog). docs/design/engine.md describes the seam and what an engine must
// implement.
//
// The embedded engine resumes a run by re-running the workflow from the top
// over its log: every recorded effect returns its recorded event instead of
// running again, and only at the end of the log does the code go live.
// Workers hold a lease per run; an expired lease is taken over by another
// worker, and the lease epoch fences the old one out of the log. A lease
// never outlives its TTL because the wall clock stepped back: the store
// bounds such a lease to now + TTL when a worker next claims. A run that
// waits (Await) is parked: its lease is released, no goroutine or worker
// slot is held, and a signal or its timer makes it claimable again.
package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Durability says whether an append must reach stable storage before the
// call that records it returns.
type Durability int

const (
	// Buffered appends are committed in order with the next commit; use them
	// for events whose loss only means redoing side-effect-free work.
	Buffered Durability = iota
	// Durable appends return after commit: required before a side effect.
	Durable
)

// Errors a workflow or caller may see.
var (
	// ErrNondeterminism means the code asked for a different event than the
	// log recorded at that position: the loop code or its inputs changed.
	ErrNondeterminism = errors.New("nondeterminism: loop code diverged from the recorded log")
	// ErrWouldGoLive is returned in verify mode when the code needs an
	// effect (or a wait) the log does not hold.
	ErrWouldGoLive = errors.New("verify: the loop needs an effect that is not in the log")
)

// SignalTimer is the kind of the signal recorded when a wait's deadline
// passes before any other signal arrives.
const SignalTimer = "timer"

// Outcome is how a workflow ended.
type Outcome struct {
	Status string // a terminal store status
	Result string
}

// Workflow is deterministic code over an Env. It must read time, ids, model
// output, tool output and external input only through the Env, and return
// every error the Env gives it (wrapped or not): some are how the engine
// parks a waiting run.
type Workflow func(ctx context.Context, env Env) (Outcome, error)

// RunInfo is what the workflow sees of its run: fields fixed when the run
// was created.
type RunInfo struct {
	ID           string
	Tenant       string
	User         string
	Agent        string
	AgentVersion int
	Task         string
	// ParentRunID links a replay to the run it replays.
	ParentRunID string
	// Bindings are argument values this run may act on.
	Bindings  map[string]string
	CreatedAt time.Time
}

// Event is one recorded event as the workflow reads it.
type Event struct {
	Seq     int64
	Type    string
	Step    int
	At      time.Time
	Payload []byte // JSON
}

// Counters are the run's summary numbers the workflow reports (shown by
// lists and the API; the log stays the record).
type Counters struct {
	Steps        int
	InputTokens  int64
	OutputTokens int64
	CostMicros   int64
	Currency     string
	CostUnknown  bool
}

// Env is the durable-execution interface the agent loop is written
// against. It is used by one goroutine at a time.
type Env interface {
	// Run is the run being executed.
	Run() RunInfo
	// Now is the time of the newest event read or written: deterministic.
	Now() time.Time
	// Record returns the recorded event of type typ at the cursor, or, past
	// the end of the log, appends payload (JSON bytes, or a value marshalled
	// to JSON) as a new event. Payload must be computed by deterministic
	// code; effects belong in activities (Execute).
	Record(ctx context.Context, typ string, step int, d Durability, payload any) (Event, error)
	// Execute returns the recorded result of c at the cursor, or, past the
	// end of the log, runs the activity c names (retrying retryable errors)
	// and records its result as an event of type c.Event. A recorded event
	// of another type or step is ErrNondeterminism.
	Execute(ctx context.Context, c Call) (Event, error)
	// Signals returns the external inputs recorded at the cursor, or, live,
	// records and returns the run's pending signals (possibly none) without
	// waiting.
	Signals(ctx context.Context, step int) ([]Event, error)
	// Await is Signals that waits: it returns once at least one signal has
	// arrived, in arrival order, each delivered exactly once; if deadline
	// (zero: none) passes first, it returns one signal of kind SignalTimer.
	// Over a recorded log that holds no signal at the cursor it returns
	// none: the log's next event says what happened.
	Await(ctx context.Context, step int, deadline time.Time) ([]Event, error)
	// Report sets the run's counters with the next append.
	Report(c Counters)
	// Blob returns the content-addressed blob sum (checked against it).
	Blob(ctx context.Context, sum [32]byte) ([]byte, error)
	// BlobSize returns the size of blob sum.
	BlobSize(ctx context.Context, sum [32]byte) (int64, error)
	// Manifest returns the stored tool manifest whose content hash is sum.
	Manifest(ctx context.Context, sum [32]byte) ([]byte, error)
	// RunLog returns the recorded log of another run that has ended.
	RunLog(ctx context.Context, runID string) ([]Event, error)
}

// parked is how the embedded engine's Await unwinds a run that must wait:
// the workflow returns it, the run is released as waiting, and a signal or
// the timer re-runs the workflow from its log.
type parked struct{ wakeAt time.Time }

func (p *parked) Error() string { return "run waits for a signal" }

type env struct {
	s        store.Store
	acts     *Activities
	retry    RetryPolicy
	run      *store.Run
	info     RunInfo
	epoch    int64
	recorded []store.Event
	cursor   int
	seq      int64
	head     [32]byte
	now      time.Time
	clock    func() time.Time
	verify   bool
	summary  *store.RunUpdate
	// consumed are signal ids this env recorded; a buffered append may not
	// have committed yet, so the store can still list them as pending.
	consumed map[int64]bool
}

// RunInfoOf is what the workflow sees of the stored run r.
func RunInfoOf(r *store.Run) RunInfo {
	return RunInfo{ID: r.ID, Tenant: r.Tenant, User: r.User, Agent: r.Agent, AgentVersion: r.AgentVersion, Task: r.Task,
		ParentRunID: r.ParentRunID, Bindings: r.Bindings, CreatedAt: r.CreatedAt}
}

func view(ev *store.Event) Event {
	return Event{Seq: ev.Seq, Type: ev.Type, Step: ev.Step, At: ev.At, Payload: ev.Payload}
}

func (e *env) Run() RunInfo   { return e.info }
func (e *env) Now() time.Time { return e.now }

func (e *env) Report(c Counters) {
	e.summary = &store.RunUpdate{Steps: &c.Steps, InputTokens: &c.InputTokens, OutputTokens: &c.OutputTokens,
		CostMicros: &c.CostMicros, Currency: &c.Currency, CostUnknown: &c.CostUnknown}
}

func (e *env) Blob(ctx context.Context, sum [32]byte) ([]byte, error) {
	return e.s.Blobs(e.run.Tenant).GetBlob(ctx, sum)
}
func (e *env) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	return e.s.Blobs(e.run.Tenant).BlobSize(ctx, sum)
}

func (e *env) Manifest(ctx context.Context, sum [32]byte) ([]byte, error) {
	return ReadManifest(ctx, e.s, sum)
}

func (e *env) RunLog(ctx context.Context, runID string) ([]Event, error) {
	return ReadRunLog(ctx, e.s, runID)
}

// ReadManifest is Env.Manifest on a store, for every engine.
func ReadManifest(ctx context.Context, s store.ToolStore, sum [32]byte) ([]byte, error) {
	rec, err := s.GetToolByHash(ctx, sum)
	if err != nil {
		return nil, err
	}
	return rec.Manifest, nil
}

// ReadRunLog is Env.RunLog on a store, for every engine: the log of a run
// that has ended (a log that may still grow is not immutable content).
func ReadRunLog(ctx context.Context, s store.Store, runID string) ([]Event, error) {
	r, err := s.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	if !store.Terminal(r.Status) {
		// A log that may still grow is not immutable content.
		return nil, fmt.Errorf("run %s has not ended (%s): its log may still change", runID, r.Status)
	}
	evs, err := s.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, err
	}
	out := make([]Event, len(evs))
	for i := range evs {
		out[i] = view(&evs[i])
	}
	return out, nil
}

// recordedAt returns the recorded event at the cursor if it is typ at
// step, advancing; ok is false past the end of the log.
func (e *env) recordedAt(typ string, step int) (Event, bool, error) {
	if e.cursor >= len(e.recorded) {
		return Event{}, false, nil
	}
	ev := &e.recorded[e.cursor]
	if ev.Type != typ || ev.Step != step {
		return Event{}, false, fmt.Errorf("%w: run %s seq %d recorded %s (step %d), code asked for %s (step %d)",
			ErrNondeterminism, e.run.ID, ev.Seq, ev.Type, ev.Step, typ, step)
	}
	e.cursor++
	e.now = ev.At
	return view(ev), true, nil
}

func (e *env) Record(ctx context.Context, typ string, step int, d Durability, payload any) (Event, error) {
	if ev, ok, err := e.recordedAt(typ, step); ok || err != nil {
		return ev, err
	}
	if e.verify {
		return Event{}, fmt.Errorf("%w: %s at step %d", ErrWouldGoLive, typ, step)
	}
	b, err := EncodePayload(payload)
	if err != nil {
		return Event{}, fmt.Errorf("record %s: %w", typ, err)
	}
	return e.appendOne(ctx, typ, step, d, b)
}

// EncodePayload turns a Record payload into the event's JSON bytes: JSON
// bytes as they are, a json.Marshaler by its encoder (a payload built only
// when appended, so a replayed record costs nothing; its encoder is trusted
// to write valid JSON), any other value marshalled.
func EncodePayload(payload any) ([]byte, error) {
	switch p := payload.(type) {
	case []byte:
		return p, nil
	case json.RawMessage:
		return p, nil
	case json.Marshaler:
		return p.MarshalJSON()
	default:
		return json.Marshal(payload)
	}
}

func (e *env) Execute(ctx context.Context, c Call) (Event, error) {
	if ev, ok, err := e.recordedAt(c.Event, c.Step); ok || err != nil {
		return ev, err
	}
	if e.verify {
		return Event{}, fmt.Errorf("%w: %s (activity %s) at step %d", ErrWouldGoLive, c.Event, c.Activity, c.Step)
	}
	act, ok := e.acts.Lookup(c.Activity)
	if !ok {
		return Event{}, fmt.Errorf("activity %q is not registered with the engine", c.Activity)
	}
	payload, err := e.invoke(ctx, act, c)
	if err != nil {
		return Event{}, err
	}
	return e.appendOne(ctx, c.Event, c.Step, c.Durability, payload)
}

// invoke runs an activity, retrying errors it marks retryable.
func (e *env) invoke(ctx context.Context, act Activity, c Call) ([]byte, error) {
	backoff := e.retry.Backoff
	for attempt := 1; ; attempt++ {
		actx := WithActivityInfo(ctx, ActivityInfo{RunID: e.run.ID, Activity: c.Activity, Step: c.Step, Attempt: attempt})
		out, err := act.Invoke(actx, c.Input)
		if err == nil {
			return out, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if !IsRetryable(err) || attempt >= e.retry.MaxAttempts {
			return nil, fmt.Errorf("activity %s (step %d, attempt %d): %w", c.Activity, c.Step, attempt, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
		backoff = min(backoff*2, e.retry.MaxBackoff)
	}
}

func (e *env) appendOne(ctx context.Context, typ string, step int, d Durability, payload []byte) (Event, error) {
	evs, err := e.append(ctx, []pendingEvent{{typ: typ, step: step, payload: payload}}, d, nil)
	if err != nil {
		return Event{}, err
	}
	return view(&evs[0]), nil
}

type pendingEvent struct {
	typ     string
	step    int
	payload []byte
}

func (e *env) append(ctx context.Context, pe []pendingEvent, d Durability, consume []int64) ([]store.Event, error) {
	at := e.clock().UTC().Truncate(time.Microsecond)
	if at.Before(e.now) {
		at = e.now // the log's clock never runs backwards
	}
	evs := make([]store.Event, len(pe))
	head, seq := e.head, e.seq
	for i, p := range pe {
		seq++
		evs[i] = store.Event{RunID: e.run.ID, Seq: seq, Type: p.typ, Step: p.step, At: at, Payload: p.payload, PrevHash: head}
		evs[i].Hash = store.ChainHash(head, &evs[i])
		head = evs[i].Hash
	}
	req := store.AppendRequest{RunID: e.run.ID, Epoch: e.epoch, Events: evs, Durable: d == Durable, Update: e.summary, ConsumeSignals: consume}
	if err := e.appendRetrying(ctx, req); err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", pe[0].typ, e.run.ID, err)
	}
	e.summary = nil
	e.head, e.seq, e.now = head, seq, at
	return evs, nil
}

// appendAttempts bounds the tries of an append the store cannot take now
// (store.ErrUnavailable: the database unreachable, locked or full); with
// the default backoff they span about 3 seconds. After the last, the
// append's error ends the workflow and the worker marks the run failed.
const appendAttempts = 6

// appendRetrying appends req, retrying while the store is unavailable
// with the retry policy's backoff. An attempt reported failed may have
// committed (the connection broke after the commit): the retry then
// finds its own events in the log, which is success, not a conflict.
func (e *env) appendRetrying(ctx context.Context, req store.AppendRequest) error {
	backoff := e.retry.Backoff
	for attempt := 1; ; attempt++ {
		err := e.s.Append(ctx, req)
		if err == nil {
			return nil
		}
		if attempt > 1 && errors.Is(err, store.ErrConflict) && e.landed(ctx, req) {
			return nil
		}
		if !errors.Is(err, store.ErrUnavailable) || attempt == appendAttempts {
			return err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, ctx.Err())
		}
		backoff = min(backoff*2, e.retry.MaxBackoff)
	}
}

// landed reports whether req's events are in the log as req has them.
func (e *env) landed(ctx context.Context, req store.AppendRequest) bool {
	if len(req.Events) == 0 {
		return false
	}
	evs, err := e.s.Events(ctx, req.RunID, req.Events[0].Seq-1, len(req.Events))
	if err != nil || len(evs) != len(req.Events) {
		return false
	}
	for i := range evs {
		if evs[i].Hash != req.Events[i].Hash {
			return false
		}
	}
	return true
}

// recordedSignals consumes the signal events at the cursor.
func (e *env) recordedSignals() []Event {
	var out []Event
	for e.cursor < len(e.recorded) && e.recorded[e.cursor].Type == "signal" {
		ev := &e.recorded[e.cursor]
		e.cursor++
		e.now = ev.At
		out = append(out, view(ev))
	}
	return out
}

func (e *env) Signals(ctx context.Context, step int) ([]Event, error) {
	if e.cursor < len(e.recorded) {
		return e.recordedSignals(), nil
	}
	if e.verify {
		return nil, nil
	}
	return e.consumePending(ctx, step)
}

func (e *env) Await(ctx context.Context, step int, deadline time.Time) ([]Event, error) {
	if e.cursor < len(e.recorded) {
		return e.recordedSignals(), nil
	}
	if e.verify {
		return nil, fmt.Errorf("%w: a wait for a signal at step %d", ErrWouldGoLive, step)
	}
	sigs, err := e.consumePending(ctx, step)
	if err != nil || len(sigs) > 0 {
		return sigs, err
	}
	if !deadline.IsZero() && !e.clock().Before(deadline) {
		// The timer fired: it is recorded like any other input, so a
		// re-run sees time pass through its log.
		evs, err := e.append(ctx, []pendingEvent{{typ: "signal", step: step, payload: TimerEventPayload(deadline)}}, Buffered, nil)
		if err != nil {
			return nil, err
		}
		return []Event{view(&evs[0])}, nil
	}
	return nil, &parked{wakeAt: deadline}
}

// consumePending records the run's pending signals, in the transaction
// that marks them consumed.
func (e *env) consumePending(ctx context.Context, step int) ([]Event, error) {
	all, err := e.s.PendingSignals(ctx, e.run.ID)
	if err != nil {
		return nil, err
	}
	var sigs []*store.Signal
	for _, sg := range all {
		if !e.consumed[sg.ID] {
			sigs = append(sigs, sg)
		}
	}
	if len(sigs) == 0 {
		return nil, nil
	}
	pe := make([]pendingEvent, len(sigs))
	ids := make([]int64, len(sigs))
	for i, sg := range sigs {
		pe[i] = pendingEvent{typ: "signal", step: step, payload: signalPayload(sg)}
		ids[i] = sg.ID
	}
	evs, err := e.append(ctx, pe, Buffered, ids)
	if err != nil {
		return nil, err
	}
	if e.consumed == nil {
		e.consumed = map[int64]bool{}
	}
	for _, id := range ids {
		e.consumed[id] = true
	}
	out := make([]Event, len(evs))
	for i := range evs {
		out[i] = view(&evs[i])
	}
	return out, nil
}
