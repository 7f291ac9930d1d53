// Package engine is agentplane's durable-execution engine on the embedded
// store. A run's append-only, hash-chained event log is the whole of its
// state: to resume a run, a worker re-runs the workflow (the agent loop) from
// the top, and every recorded effect returns its recorded event instead of
// running again. Only when the code reaches the end of the log does it go
// live. Workers hold a lease per run; an expired lease is taken over by
// another worker, and the lease epoch fences the old one out of the log. A
// lease never outlives its TTL because the wall clock stepped back: the
// store bounds such a lease to now + TTL when a worker next claims.
//
// The workflow sees only the Env interface, so the same loop code can run on
// another durable-execution engine (Temporal) that implements Env.
package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Durability says whether an append must reach stable storage before Do
// returns.
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
	// effect the log does not hold.
	ErrWouldGoLive = errors.New("verify: the loop needs an effect that is not in the log")
	// ErrSuspend, returned by a workflow (wrapped in a *Suspend), parks the run
	// until a signal arrives or its timer fires. It holds no goroutine.
	ErrSuspend = errors.New("run suspended")
)

// Suspend is the error a workflow returns to wait. WakeAt zero waits for a
// signal only.
type Suspend struct{ WakeAt time.Time }

func (s *Suspend) Error() string { return ErrSuspend.Error() }
func (s *Suspend) Unwrap() error { return ErrSuspend }

// Outcome is how a workflow ended.
type Outcome struct {
	Status string // a terminal store status
	Result string
}

// Workflow is deterministic code over an Env. It must read time, ids, model
// output, tool output and external input only through the Env.
type Workflow func(ctx context.Context, env Env) (Outcome, error)

// Env is the durable-execution interface the agent loop is written against.
// It is used by one goroutine at a time.
type Env interface {
	// Run is the run being executed (its immutable fields).
	Run() *store.Run
	// Replaying reports whether the next Do will be served from the log.
	Replaying() bool
	// Now is the time of the newest event read or written: deterministic.
	Now() time.Time
	// Do returns the recorded event of type typ at the cursor, or, past the
	// end of the log, calls fn, appends its payload as a new event and returns
	// that. A recorded event of another type is ErrNondeterminism.
	Do(ctx context.Context, typ string, step int, d Durability, fn func(ctx context.Context) ([]byte, error)) (*store.Event, error)
	// Signals returns external inputs recorded at the cursor, or, live, records
	// and returns the run's pending signals (possibly none).
	Signals(ctx context.Context, step int) ([]*store.Event, error)
	// Summarize attaches run counters to the next append.
	Summarize(u store.RunUpdate)
	// Blobs is the content-addressed store for large payloads: the run's
	// tenant's blobs.
	Blobs() store.BlobStore
}

type env struct {
	s        store.Store
	run      *store.Run
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

func (e *env) Run() *store.Run        { return e.run }
func (e *env) Replaying() bool        { return e.cursor < len(e.recorded) }
func (e *env) Now() time.Time         { return e.now }
func (e *env) Blobs() store.BlobStore { return e.s.Blobs(e.run.Tenant) }
func (e *env) Summarize(u store.RunUpdate) {
	if e.summary == nil {
		e.summary = &store.RunUpdate{}
	}
	mergeUpdate(e.summary, u)
}

func (e *env) Do(ctx context.Context, typ string, step int, d Durability, fn func(ctx context.Context) ([]byte, error)) (*store.Event, error) {
	if e.cursor < len(e.recorded) {
		ev := &e.recorded[e.cursor]
		if ev.Type != typ || ev.Step != step {
			return nil, fmt.Errorf("%w: run %s seq %d recorded %s (step %d), code asked for %s (step %d)",
				ErrNondeterminism, e.run.ID, ev.Seq, ev.Type, ev.Step, typ, step)
		}
		e.cursor++
		e.now = ev.At
		return ev, nil
	}
	if e.verify {
		return nil, fmt.Errorf("%w: %s at step %d", ErrWouldGoLive, typ, step)
	}
	payload, err := fn(ctx)
	if err != nil {
		return nil, err
	}
	evs, err := e.append(ctx, []pendingEvent{{typ: typ, step: step, payload: payload}}, d, nil)
	if err != nil {
		return nil, err
	}
	return &evs[0], nil
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
	if err := e.s.Append(ctx, req); err != nil {
		return nil, fmt.Errorf("append %s to run %s: %w", pe[0].typ, e.run.ID, err)
	}
	e.summary = nil
	e.head, e.seq, e.now = head, seq, at
	return evs, nil
}

func (e *env) Signals(ctx context.Context, step int) ([]*store.Event, error) {
	if e.cursor < len(e.recorded) {
		var out []*store.Event
		for e.cursor < len(e.recorded) && e.recorded[e.cursor].Type == "signal" {
			ev := &e.recorded[e.cursor]
			e.cursor++
			e.now = ev.At
			out = append(out, ev)
		}
		return out, nil
	}
	if e.verify {
		return nil, nil
	}
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
	out := make([]*store.Event, len(evs))
	for i := range evs {
		out[i] = &evs[i]
	}
	return out, nil
}

func mergeUpdate(dst *store.RunUpdate, u store.RunUpdate) {
	if u.Status != nil {
		dst.Status = u.Status
	}
	if u.Steps != nil {
		dst.Steps = u.Steps
	}
	if u.InputTokens != nil {
		dst.InputTokens = u.InputTokens
	}
	if u.OutputTokens != nil {
		dst.OutputTokens = u.OutputTokens
	}
	if u.CostMicros != nil {
		dst.CostMicros = u.CostMicros
	}
	if u.Currency != nil {
		dst.Currency = u.Currency
	}
	if u.CostUnknown != nil {
		dst.CostUnknown = u.CostUnknown
	}
	if u.Result != nil {
		dst.Result = u.Result
	}
	if u.WakeAt != nil {
		dst.WakeAt = u.WakeAt
	}
}
