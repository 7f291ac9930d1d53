// Package loop is the agent loop: deterministic code over an engine.Env that
// checks the four bounds, builds the context, calls the model through the
// gateway, sends each proposed tool call through the broker, and records
// everything in the run's event log. Because every input arrives through a
// recorded event, re-running the loop over a run's log reproduces the run
// without calling a model or a tool.
//
// Approvals (approval.go) chain until approvers cover every group a call
// needs; an edit is decided again by the broker as a new call. Taint
// (taint.go) marks the run once text the platform did not write or review
// reaches the model.
package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// displayPreview is the preview kept with blobs only people read (arguments,
// instructions); tool results keep Options.PreviewBytes, which the model sees.
const displayPreview = 128

// Budgets are the four bounds of a run.
type Budgets struct {
	MaxSteps       int         `json:"max_steps"`
	MaxInputTokens int64       `json:"max_input_tokens"`
	MaxCost        model.Money `json:"max_cost"`
	MaxWallClockMS int64       `json:"max_wall_clock_ms"`
}

// Agent is a resolved, pinned agent version as the loop needs it.
type Agent struct {
	Name         string
	Version      int
	Hash         [32]byte
	ModelAlias   string
	Instructions string
	Tools        []*tool.Manifest
	Budgets      Budgets
	// Compaction, when set, rewrites older steps into a progress note.
	Compaction *trace.CompactionPolicy
	// Temperature, when set, is sent with every model call.
	Temperature *float64
}

// Resolver loads an agent version with the tool manifests it is granted.
type Resolver func(ctx context.Context, name string, version int) (*Agent, error)

// Models is the gateway as the loop uses it.
type Models interface {
	Complete(ctx context.Context, alias string, req *model.Request, a model.Attribution) (*model.CallResult, error)
}

// StreamingModels is a gateway that can also stream text deltas.
type StreamingModels interface {
	CompleteStream(ctx context.Context, alias string, req *model.Request, a model.Attribution, onDelta func(model.Delta)) (*model.CallResult, error)
}

// Options configure a Loop.
type Options struct {
	Resolve Resolver
	Models  Models
	Broker  *broker.Broker
	// Tools loads pinned manifests by hash on resume and replay.
	Tools store.ToolStore
	// Rates converts call costs into the budget's currency (nil: same
	// currency only).
	Rates *model.Rates
	// InlineLimit is the largest payload stored inside an event; larger ones
	// go to the blob store (default 4096).
	InlineLimit int
	// PreviewBytes is the preview kept with a blob (default 512).
	PreviewBytes int
	// MaxResultBytes is the most tool output the model sees inline; a larger
	// result reaches it as a handle plus preview (default 16384; a manifest's
	// max_output_bytes lowers it).
	MaxResultBytes int
	// Source reads other runs' logs (the original of a replay).
	Source store.EventStore
	// ReplaySpec returns the replay instructions stored for a new run, or
	// nil when the run is not a replay. Called once, when the run starts.
	ReplaySpec func(ctx context.Context, runID string) (*trace.ReplayInfo, error)
	// OnDelta, when set and the gateway can stream, receives model text as
	// it arrives (live calls only; a replayed or recorded call sends none).
	// It must not block. Deltas are a view for watchers: the model_call
	// event stays the record.
	OnDelta func(runID string, step int, d model.Delta)
	// Sandboxes, when set, destroys a run's tier-2/3 sandboxes when the run
	// ends; the records become the run's sandbox_teardown event.
	Sandboxes SandboxEnder
	// Approvers checks deciders' groups for the approval chain (see
	// approve); without it no decider covers any group, so an approval
	// that the API let through still waits (fail closed).
	Approvers Approvers
	// Loop detection, each rule a note to the model at its first threshold
	// and a stop at its second: RepeatNote and RepeatStop count the same
	// call (tool, canonical arguments, result) (3 and 5); ErrorNote and
	// ErrorStop count consecutive failed tool results (2 and 3); StaleNote
	// and StaleStop count consecutive steps whose every tool result hash was
	// already seen in the run (5 and 8).
	RepeatNote, RepeatStop int
	ErrorNote, ErrorStop   int
	StaleNote, StaleStop   int
	Logger                 *slog.Logger
}

// SandboxEnder ends a run's sandbox session.
type SandboxEnder interface {
	EndRun(ctx context.Context, tenant, runID string) []trace.SandboxTeardown
}

// Loop runs agents. Safe for concurrent use by many runs.
type Loop struct {
	o Options
	// manifests parses each pinned manifest once (resumes load them again).
	manifests tool.ManifestCache
}

// New validates options and returns a Loop.
func New(o Options) (*Loop, error) {
	if o.Resolve == nil || o.Models == nil || o.Broker == nil || o.Tools == nil {
		return nil, errors.New("loop: Resolve, Models, Broker and Tools are required")
	}
	if o.InlineLimit <= 0 {
		o.InlineLimit = 4096
	}
	if o.PreviewBytes <= 0 {
		o.PreviewBytes = 512
	}
	if o.MaxResultBytes <= 0 {
		o.MaxResultBytes = 16384
	}
	if o.RepeatNote <= 0 {
		o.RepeatNote = 3
	}
	if o.RepeatStop <= 0 {
		o.RepeatStop = 5
	}
	if o.ErrorNote <= 0 {
		o.ErrorNote = 2
	}
	if o.ErrorStop <= 0 {
		o.ErrorStop = 3
	}
	if o.StaleNote <= 0 {
		o.StaleNote = 5
	}
	if o.StaleStop <= 0 {
		o.StaleStop = 8
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Loop{o: o}, nil
}

// state is what the loop knows at a point of the log; it is rebuilt
// identically on every replay.
type state struct {
	env         engine.Env
	run         *store.Run
	started     trace.RunStarted
	startAt     int64 // micros
	tools       map[string]*tool.Manifest
	tr          *trace.Transcript
	budgets     Budgets
	steps       int
	inTokens    int64
	outTokens   int64
	cost        int64
	costUnknown bool
	tainted     bool
	calls       map[string]int
	allowed     []broker.PriorCall // calls that ran, for rate limits and policy totals
	// replay state (nil outside replays)
	replay *replayState
	// compactAfter is the first step a failed compaction may be retried.
	compactAfter int
	// refused is set when the last model call was refused by the gateway's
	// budget pre-check.
	refused *trace.Budget
	// waitedMS is time spent waiting for humans, which the wall-clock bound
	// does not count.
	waitedMS int64
	repeats  map[string]int
	// seenResults holds every tool result hash of the run; stepNew is set
	// when the current step produced one not seen before; staleSteps and
	// toolErrors count consecutive steps without one and consecutive failed
	// results (loop detection).
	seenResults map[string]bool
	stepNew     bool
	staleSteps  int
	toolErrors  int
	// modelErr is why the last failed model call failed, for the run's
	// end reason.
	modelErr string
	// sandboxed is set once a tool result came from a sandbox: the run
	// then records its sandboxes' teardown before it ends.
	sandboxed bool
	// handles are the blob handles shown to the model (truncated results):
	// the only blobs a tool may be given by handle.
	handles map[string]bool
	// reviewed are the granted tools whose manifests the platform
	// reviewed, as run_started recorded them.
	reviewed map[string]bool
}

// ReadHandle gives a tool the content behind a handle this run showed the
// model, at most limit bytes.
func (st *state) ReadHandle(ctx context.Context, handle string, limit int64) ([]byte, error) {
	sum, ok := strings.CutPrefix(handle, "blob:")
	if !ok || !st.handles[sum] {
		return nil, fmt.Errorf("%q is not a handle this run has seen", trace.Preview([]byte(handle), 80))
	}
	c := trace.Content{Blob: sum}
	h, err := c.Sum()
	if err != nil {
		return nil, err
	}
	size, err := st.env.Blobs().BlobSize(ctx, h)
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("handle %s holds %d bytes, over the %d-byte limit", handle, size, limit)
	}
	return st.env.Blobs().GetBlob(ctx, h)
}

// Workflow is the engine.Workflow of the agent loop.
func (l *Loop) Workflow(ctx context.Context, env engine.Env) (engine.Outcome, error) {
	st, err := l.start(ctx, env)
	if err != nil {
		return engine.Outcome{}, err
	}
	if err := l.taintAtStart(ctx, st); err != nil {
		return engine.Outcome{}, err
	}
	for step := 1; ; step++ {
		sigs, err := env.Signals(ctx, step)
		if err != nil {
			return engine.Outcome{}, err
		}
		if err := l.taintMessages(ctx, st, step, sigs); err != nil {
			return engine.Outcome{}, err
		}
		for _, ev := range sigs {
			// Messages join the transcript; approvals and timers that arrive
			// when nothing waits are stale and ignored (they stay in the log).
			if err := st.tr.Add(ev); err != nil {
				return engine.Outcome{}, err
			}
			var sg trace.Signal
			_ = json.Unmarshal(ev.Payload, &sg)
			if sg.Kind == trace.SignalCancel {
				return l.end(ctx, st, step, store.StatusCancelled, "", "cancelled by request")
			}
		}
		ss, err := env.Do(ctx, trace.EvStepStarted, step, engine.Buffered, func(ctx context.Context) ([]byte, error) {
			return json.Marshal(trace.StepStarted{Steps: st.steps, InputTokens: st.inTokens, CostMicros: st.cost,
				ElapsedMS: (env.Now().UnixMicro()-st.startAt)/1000 - st.waitedMS})
		})
		if err != nil {
			return engine.Outcome{}, err
		}
		if err := st.tr.Add(ss); err != nil {
			return engine.Outcome{}, err
		}
		elapsedMS := (ss.At.UnixMicro()-st.startAt)/1000 - st.waitedMS
		if b := st.exceeded(elapsedMS); b != nil {
			return l.finalCall(ctx, st, step, b)
		}
		if err := l.maybeCompact(ctx, st, step); err != nil {
			return engine.Outcome{}, err
		}
		resp, err := l.modelCall(ctx, st, step, false)
		if err != nil {
			return engine.Outcome{}, err
		}
		if st.refused != nil {
			// The gateway's estimate says this call would cross a bound:
			// nothing was sent; the model gets its last call without tools.
			b := st.refused
			st.refused = nil
			return l.finalCall(ctx, st, step, b)
		}
		if resp == nil {
			return l.end(ctx, st, step, store.StatusFailed, "", "the model call failed: "+trace.Preview([]byte(st.modelErr), 600))
		}
		calls := resp.ToolCalls()
		if len(calls) == 0 {
			return l.end(ctx, st, step, store.StatusCompleted, resp.Text(), "")
		}
		st.stepNew = false
		for i, c := range calls {
			stop, err := l.toolCall(ctx, st, step, i, c)
			if err != nil {
				return engine.Outcome{}, err
			}
			if stop == stopCancelled {
				return l.end(ctx, st, step, store.StatusCancelled, "", stop)
			}
			if stop != "" {
				return l.end(ctx, st, step, store.StatusFailed, "", stop)
			}
		}
		if stop, err := l.detectStale(ctx, st, step); err != nil {
			return engine.Outcome{}, err
		} else if stop != "" {
			return l.end(ctx, st, step, store.StatusFailed, "", stop)
		}
	}
}

// start records or replays run_started and rebuilds the pinned context.
func (l *Loop) start(ctx context.Context, env engine.Env) (*state, error) {
	run := env.Run()
	ev, err := env.Do(ctx, trace.EvRunStarted, 0, engine.Buffered, func(ctx context.Context) ([]byte, error) {
		a, err := l.o.Resolve(ctx, run.Agent, run.AgentVersion)
		if err != nil {
			return nil, fmt.Errorf("resolve agent %s@%d: %w", run.Agent, run.AgentVersion, err)
		}
		var replay *trace.ReplayInfo
		if l.o.ReplaySpec != nil {
			if replay, err = l.o.ReplaySpec(ctx, run.ID); err != nil {
				return nil, err
			}
		}
		if replay != nil {
			if replay.ModelAlias != "" {
				a.ModelAlias = replay.ModelAlias
			}
			if replay.Instructions != "" {
				a.Instructions = replay.Instructions
			}
		}
		defs := make([]model.ToolDef, 0, len(a.Tools))
		refs := make([]trace.ToolRef, 0, len(a.Tools))
		for _, m := range a.Tools {
			name, desc, schema := m.Def()
			defs = append(defs, model.ToolDef{Name: name, Description: desc, InputSchema: schema})
			h := m.Hash()
			refs = append(refs, trace.ToolRef{Name: m.Name, Hash: hex.EncodeToString(h[:]), Reviewed: l.o.Broker.Reviewed(m)})
		}
		defsJSON, err := json.Marshal(defs)
		if err != nil {
			return nil, err
		}
		sys, err := trace.MakeContent(ctx, env.Blobs(), []byte(a.Instructions), l.o.InlineLimit, displayPreview)
		if err != nil {
			return nil, err
		}
		td, err := trace.MakeContent(ctx, env.Blobs(), defsJSON, l.o.InlineLimit, displayPreview)
		if err != nil {
			return nil, err
		}
		budgets, _ := json.Marshal(a.Budgets)
		return json.Marshal(trace.RunStarted{
			Agent: a.Name, AgentVersion: a.Version, AgentHash: hex.EncodeToString(a.Hash[:]),
			Tenant: run.Tenant, User: run.User, Task: run.Task, ModelAlias: a.ModelAlias,
			Tools: refs, System: sys, ToolDefs: td, Budgets: budgets, Replay: replay, Compaction: a.Compaction, Temperature: a.Temperature,
			Bindings: run.Bindings, TaintRules: trace.TaintRules2,
		})
	})
	if err != nil {
		return nil, err
	}
	st := &state{env: env, run: run, tools: map[string]*tool.Manifest{}, repeats: map[string]int{}, seenResults: map[string]bool{}, calls: map[string]int{}, handles: map[string]bool{}, reviewed: map[string]bool{}, startAt: ev.At.UnixMicro()}
	if err := json.Unmarshal(ev.Payload, &st.started); err != nil {
		return nil, fmt.Errorf("run_started payload: %w", err)
	}
	if err := json.Unmarshal(st.started.Budgets, &st.budgets); err != nil {
		return nil, fmt.Errorf("run_started budgets: %w", err)
	}
	for _, ref := range st.started.Tools {
		m, err := l.loadManifest(ctx, ref)
		if err != nil {
			return nil, err
		}
		st.tools[m.Name] = m
		st.reviewed[m.Name] = ref.Reviewed
	}
	sys, err := trace.Load(ctx, env.Blobs(), st.started.System)
	if err != nil {
		return nil, fmt.Errorf("load system prompt: %w", err)
	}
	defsJSON, err := trace.Load(ctx, env.Blobs(), st.started.ToolDefs)
	if err != nil {
		return nil, fmt.Errorf("load tool definitions: %w", err)
	}
	var defs []model.ToolDef
	if err := json.Unmarshal(defsJSON, &defs); err != nil {
		return nil, err
	}
	if st.started.Replay != nil {
		if st.replay, err = l.loadOriginal(ctx, st.started.Replay); err != nil {
			return nil, err
		}
	}
	st.tr = trace.NewTranscript(string(sys), defs, func(c trace.Content) ([]byte, error) { return trace.Load(ctx, env.Blobs(), c) })
	if err := st.tr.Add(ev); err != nil {
		return nil, err
	}
	return st, nil
}

func (l *Loop) loadManifest(ctx context.Context, ref trace.ToolRef) (*tool.Manifest, error) {
	b, err := hex.DecodeString(ref.Hash)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("run pins tool %s with a bad hash", ref.Name)
	}
	var sum [32]byte
	copy(sum[:], b)
	rec, err := l.o.Tools.GetToolByHash(ctx, sum)
	if err != nil {
		return nil, fmt.Errorf("pinned tool %s: %w", ref.Name, err)
	}
	return l.manifests.FromJSON(rec.Manifest)
}

func (st *state) runState() broker.RunState {
	calls := make(map[string]int, len(st.calls))
	for k, v := range st.calls {
		calls[k] = v
	}
	return broker.RunState{Tainted: st.tainted, Steps: st.steps, CostMicros: st.cost, Currency: st.budgets.MaxCost.Currency, Calls: calls,
		Allowed: st.allowed, Bindings: st.started.Bindings}
}

func (st *state) exceeded(elapsedMS int64) *trace.Budget {
	b := st.budgets
	switch {
	case b.MaxSteps > 0 && st.steps >= b.MaxSteps:
		return &trace.Budget{Bound: "steps", Limit: int64(b.MaxSteps), Value: int64(st.steps)}
	case b.MaxInputTokens > 0 && st.inTokens >= b.MaxInputTokens:
		return &trace.Budget{Bound: "input_tokens", Limit: b.MaxInputTokens, Value: st.inTokens}
	case st.costUnknown:
		// An unknown price is not zero: the cost bound fails closed.
		return &trace.Budget{Bound: "cost", Limit: b.MaxCost.Micros, Value: -1}
	case b.MaxCost.Micros > 0 && st.cost >= b.MaxCost.Micros:
		return &trace.Budget{Bound: "cost", Limit: b.MaxCost.Micros, Value: st.cost}
	case b.MaxWallClockMS > 0 && elapsedMS >= b.MaxWallClockMS:
		return &trace.Budget{Bound: "wall_clock", Limit: b.MaxWallClockMS, Value: elapsedMS}
	}
	return nil
}

// finalCall records the bound, gives the model one call without tools, and
// ends the run completed_partial.
func (l *Loop) finalCall(ctx context.Context, st *state, step int, b *trace.Budget) (engine.Outcome, error) {
	if _, err := st.env.Do(ctx, trace.EvBudget, step, engine.Buffered, func(context.Context) ([]byte, error) { return json.Marshal(b) }); err != nil {
		return engine.Outcome{}, err
	}
	note := fmt.Sprintf("Budget reached (%s). You cannot call tools any more. Report what you found and what is left to do.", b.Bound)
	if _, err := l.note(ctx, st, step, "budget", note); err != nil {
		return engine.Outcome{}, err
	}
	resp, err := l.modelCall(ctx, st, step, true)
	if err != nil {
		return engine.Outcome{}, err
	}
	text := ""
	if resp != nil {
		text = resp.Text()
	}
	return l.end(ctx, st, step, store.StatusCompletedPartial, text, "budget reached: "+b.Bound)
}

func (l *Loop) note(ctx context.Context, st *state, step int, reason, text string) (*store.Event, error) {
	ev, err := st.env.Do(ctx, trace.EvLoopNote, step, engine.Buffered, func(context.Context) ([]byte, error) {
		return json.Marshal(trace.LoopNote{Reason: reason, Text: text})
	})
	if err != nil {
		return nil, err
	}
	return ev, st.tr.Add(ev)
}

// modelCall makes (or replays) one model call. A nil response with a nil
// error means the call failed and the failure is recorded.
func (l *Loop) modelCall(ctx context.Context, st *state, step int, noTools bool) (*model.Response, error) {
	req := st.tr.Request(noTools)
	req.Temperature = st.started.Temperature
	delta := st.tr.TakeDelta()
	ev, err := st.env.Do(ctx, trace.EvModelCall, step, engine.Buffered, func(ctx context.Context) ([]byte, error) {
		hash, size := trace.PromptHash(req)
		mc := trace.ModelCall{Alias: st.started.ModelAlias, Delta: delta, PromptHash: hash, PromptBytes: size, NoTools: noTools, Temperature: req.Temperature}
		if orig := st.replay.recordedModel(step, noTools); orig != nil {
			// Served from the original's log: no model call, no cost.
			mc.Response, mc.Model, mc.ReplayedFrom, mc.CostKnown, mc.Currency = orig.Response, orig.Model, orig.seq, true, st.budgets.MaxCost.Currency
			return json.Marshal(mc)
		}
		attr := model.Attribution{
			Tenant: st.run.Tenant, User: st.run.User, Agent: st.run.Agent, AgentVersion: st.run.AgentVersion, RunID: st.run.ID, Step: step,
		}
		if !noTools {
			// The gateway refuses, before sending, a call whose estimate
			// would cross the run's token or cost bound. The last call at a
			// limit is exempt: it is how the run reports what it found.
			attr.Budget = model.Budget{MaxInputTokens: st.budgets.MaxInputTokens, UsedInputTokens: st.inTokens,
				MaxCost: st.budgets.MaxCost, UsedCost: model.Money{Micros: st.cost, Currency: st.budgets.MaxCost.Currency},
				CostUnknown: st.costUnknown}
		}
		var res *model.CallResult
		var err error
		if sm, ok := l.o.Models.(StreamingModels); ok && l.o.OnDelta != nil {
			runID := st.run.ID
			res, err = sm.CompleteStream(ctx, st.started.ModelAlias, req, attr, func(d model.Delta) { l.o.OnDelta(runID, step, d) })
		} else {
			res, err = l.o.Models.Complete(ctx, st.started.ModelAlias, req, attr)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			mc.Error = err.Error()
			var be *model.BudgetError
			if errors.As(err, &be) {
				mc.BudgetRefused = &trace.Budget{Bound: be.Bound, Limit: be.Limit, Value: be.Used + max(be.Estimate, 0)}
				return json.Marshal(mc)
			}
			if res != nil && res.CostKnown {
				// An answer that failed validation still spent tokens.
				mc.CostMicros, mc.Currency, mc.CostKnown = l.convert(res.Cost, st.budgets.MaxCost.Currency)
			}
			return json.Marshal(mc)
		}
		if verr := model.ValidateResponse(res.Response); verr != nil {
			mc.Error = "malformed model response: " + verr.Error()
			return json.Marshal(mc)
		}
		mc.Model, mc.Response, mc.LatencyMS = res.ModelID, res.Response, res.LatencyMS
		if res.CostKnown {
			mc.CostMicros, mc.Currency, mc.CostKnown = l.convert(res.Cost, st.budgets.MaxCost.Currency)
		}
		return json.Marshal(mc)
	})
	if err != nil {
		return nil, err
	}
	var mc trace.ModelCall
	if err := json.Unmarshal(ev.Payload, &mc); err != nil {
		return nil, fmt.Errorf("model_call payload: %w", err)
	}
	if mc.BudgetRefused != nil {
		st.refused = mc.BudgetRefused // not a step: nothing was sent
		return nil, st.tr.Add(ev)
	}
	st.steps++
	if mc.Response != nil {
		st.inTokens += mc.Response.Usage.TotalInput()
		st.outTokens += mc.Response.Usage.OutputTokens
	}
	if mc.CostKnown {
		st.cost += mc.CostMicros
	} else if mc.Response != nil {
		st.costUnknown = true
	}
	steps, in, out, cost, unknown, cur := st.steps, st.inTokens, st.outTokens, st.cost, st.costUnknown, st.budgets.MaxCost.Currency
	st.env.Summarize(store.RunUpdate{Steps: &steps, InputTokens: &in, OutputTokens: &out, CostMicros: &cost, CostUnknown: &unknown, Currency: &cur})
	if err := st.tr.Add(ev); err != nil {
		return nil, err
	}
	if mc.Error != "" {
		st.modelErr = mc.Error
		return nil, nil
	}
	if err := l.noteModelDivergence(ctx, st, step, noTools, mc.Response); err != nil {
		return nil, err
	}
	return mc.Response, nil
}

// toolCall handles one proposed call: decide, record the attempt (durably
// before any side effect), execute, record the result, detect repetition.
// A non-empty stop reason ends the run.
func (l *Loop) toolCall(ctx context.Context, st *state, step, index int, call model.Part) (string, error) {
	run := st.run
	key := fmt.Sprintf("%s:%d:%d", run.ID, step, index)
	m := st.tools[call.Name]
	args, canonErr := jsoncanon.Canonicalize(call.Input)
	if canonErr != nil {
		args = call.Input
	}
	argsSum := sha256.Sum256(args)
	var decision trace.Decision
	if canonErr != nil && m != nil {
		decision = trace.Decision{Control: broker.ControlSchema, Reason: "arguments are not valid JSON"}
	}
	attemptDurable := engine.Buffered
	if m != nil && m.SideEffects != tool.SideEffectsNone {
		attemptDurable = engine.Durable
	}
	aev, err := st.env.Do(ctx, trace.EvToolAttempt, step, attemptDurable, func(ctx context.Context) ([]byte, error) {
		if decision.Control == "" {
			decision = l.o.Broker.Decide(ctx, broker.Proposal{RunID: run.ID, Tenant: run.Tenant, User: run.User,
				Step: step, Index: index, Tool: call.Name, Args: args, Manifest: m,
				Agent: run.Agent, AgentVersion: run.AgentVersion, Run: st.runState()})
		}
		ac, err := trace.MakeContent(ctx, st.env.Blobs(), args, l.o.InlineLimit, displayPreview)
		if err != nil {
			return nil, err
		}
		a := trace.ToolAttempt{CallID: call.ToolUseID, Index: index, Tool: call.Name, Args: ac,
			ArgsHash: hex.EncodeToString(argsSum[:]), IdempotencyKey: key, Decision: decision}
		if m != nil {
			a.SideEffects, a.Tier = m.SideEffects, m.Tier
		}
		return json.Marshal(a)
	})
	if err != nil {
		return "", err
	}
	var attempt trace.ToolAttempt
	if err := json.Unmarshal(aev.Payload, &attempt); err != nil {
		return "", fmt.Errorf("tool_attempt payload: %w", err)
	}
	final, execArgs := attempt.Decision, args
	var rp *replayed
	var approvalNotes []string
	if st.replay != nil && m != nil && (attempt.Decision.Allowed || attempt.Decision.Control == broker.ControlApproval) {
		rp = st.replay.serve(step, index, call.Name, attempt.ArgsHash, m)
		if rp.how != trace.ReplayedLive {
			// Decided by the recording, a mock or the side-effect rule: the
			// original's approval (if any) stands, nothing waits.
			final = trace.Decision{Allowed: true, Control: "replay", Reason: rp.how}
		}
		if rp.diverged != "" {
			if err := l.diverge(ctx, st, step, index, rp.diverged); err != nil {
				return "", err
			}
		}
	}
	if d := final; !d.Allowed && d.Control == broker.ControlApproval && d.Approval != nil && m != nil {
		ap, err := l.approve(ctx, st, step, index, call, m, &attempt, aev, args)
		if err != nil {
			return "", err // including *engine.Suspend: the run waits, holding nothing
		}
		if ap.stop != "" {
			return ap.stop, nil
		}
		final, execArgs, approvalNotes = ap.decision, ap.args, ap.notes
	}
	rev, err := st.env.Do(ctx, trace.EvToolResult, step, engine.Buffered, func(ctx context.Context) ([]byte, error) {
		r := trace.ToolResult{CallID: call.ToolUseID, Index: index, Tool: call.Name}
		var out []byte
		var origBytes int64
		if rp != nil && rp.how != trace.ReplayedLive {
			return json.Marshal(rp.result(call.ToolUseID, index, call.Name))
		}
		if rp != nil {
			r.Replayed = trace.ReplayedLive
		}
		if !final.Allowed {
			r.Status = trace.StatusDenied
			if final.Control == broker.ControlSchema {
				r.Status = trace.StatusInvalid
			}
			out, _ = json.Marshal(map[string]string{"error": final.Reason, "control": final.Control})
		} else {
			ex, err := l.o.Broker.Execute(ctx, m, tool.Call{Tool: m.Name, Args: execArgs, IdempotencyKey: key,
				RunID: run.ID, Tenant: run.Tenant, User: run.User, Agent: fmt.Sprintf("%s@%d", run.Agent, run.AgentVersion),
				Handles: st, Bindings: st.started.Bindings})
			if err != nil {
				return nil, err
			}
			r.Status, r.LatencyMS, out = ex.Status, ex.LatencyMS, ex.Output
			r.Redactions, origBytes = ex.Redactions, ex.Bytes
			r.Sandbox = ex.Boundary
		}
		r.Bytes = max(int64(len(out)), origBytes) // what the tool returned, before the broker cut it
		limit := l.o.MaxResultBytes
		if m != nil && m.MaxOutput() > 0 && m.MaxOutput() < limit {
			limit = m.MaxOutput()
		}
		r.Truncated = len(out) > limit
		sum := sha256.Sum256(out)
		r.ResultHash = hex.EncodeToString(sum[:])
		preview := displayPreview
		if r.Truncated {
			preview = l.o.PreviewBytes // the model reads this preview
		}
		c, err := trace.MakeContent(ctx, st.env.Blobs(), out, l.o.InlineLimit, preview)
		if err != nil {
			return nil, err
		}
		if r.Truncated && !c.IsBlob() {
			// Keep the handle contract: a truncated result is always a blob.
			sum, err := st.env.Blobs().PutBlob(ctx, out)
			if err != nil {
				return nil, err
			}
			c = trace.Content{Blob: hex.EncodeToString(sum[:]), Size: int64(len(out)), Preview: trace.Preview(out, l.o.PreviewBytes)}
		}
		r.Output = c
		return json.Marshal(r)
	})
	if err != nil {
		return "", err
	}
	if err := st.tr.Add(rev); err != nil {
		return "", err
	}
	if len(approvalNotes) > 0 {
		// The model is told how people changed its call, after its result.
		text := fmt.Sprintf("Note from the platform about your %s call (id %s): %s. The result above is of the call as finally decided.",
			call.Name, call.ToolUseID, strings.Join(approvalNotes, "; "))
		if _, err := l.note(ctx, st, step, trace.NoteApproval, text); err != nil {
			return "", err
		}
	}
	var res trace.ToolResult
	if err := json.Unmarshal(rev.Payload, &res); err != nil {
		return "", fmt.Errorf("tool_result payload: %w", err)
	}
	st.calls[call.Name]++
	if res.Sandbox != nil {
		st.sandboxed = true
	}
	if res.Truncated && res.Output.IsBlob() {
		st.handles[res.Output.Blob] = true
	}
	if final.Allowed && m != nil {
		st.allowed = append(st.allowed, broker.PriorCall{Tool: call.Name, At: aev.At, Args: execArgs})
	}
	// Taint: output the platform does not vouch for is content from
	// outside; once read, the run is tainted for the rest of its life.
	if m != nil && res.Status == trace.StatusOK && st.outputTaints(m) {
		if err := l.taint(ctx, st, step, trace.Taint{Source: trace.TaintToolOutput, Tool: call.Name, CallID: call.ToolUseID, Seq: rev.Seq,
			Detail: "the output of " + call.Name}); err != nil {
			return "", err
		}
	}
	return l.detectLoop(ctx, st, step, call.Name, attempt.ArgsHash, &res)
}

// detectLoop applies the per-call loop-detection rules to one recorded
// result: the same call with the same result (RepeatNote, RepeatStop) and
// consecutive failed results (ErrorNote, ErrorStop). It also marks the
// step as adding new information when the result is one the run has not
// seen (detectStale). Each rule first adds a note the model reads, then
// stops the run; a non-empty return is the stop reason.
func (l *Loop) detectLoop(ctx context.Context, st *state, step int, name, argsHash string, res *trace.ToolResult) (string, error) {
	if !st.seenResults[res.ResultHash] {
		st.seenResults[res.ResultHash] = true
		st.stepNew = true
	}
	// A denial is a control's decision the model must adapt to, not a
	// failing tool: it neither counts as an error nor ends a run of them.
	switch res.Status {
	case trace.StatusOK:
		st.toolErrors = 0
	case trace.StatusError, trace.StatusTimeout, trace.StatusInvalid:
		st.toolErrors++
	}
	rk := name + "\x00" + argsHash + "\x00" + res.ResultHash
	st.repeats[rk]++
	n := st.repeats[rk]
	switch {
	case n >= l.o.RepeatStop:
		return fmt.Sprintf("loop detected: %s called %d times with the same arguments and the same result", name, n), nil
	case st.toolErrors >= l.o.ErrorStop:
		return fmt.Sprintf("loop detected: %d tool calls in a row failed (the last: %s, %s)", st.toolErrors, name, res.Status), nil
	case n == l.o.RepeatNote:
		text := fmt.Sprintf("Note from the platform: you have called %s %d times with the same arguments and got the same result each time. Calling it again will not change the answer; try a different approach or finish.", name, n)
		if _, err := l.note(ctx, st, step, "repeat", text); err != nil {
			return "", err
		}
	case st.toolErrors == l.o.ErrorNote:
		text := fmt.Sprintf("Note from the platform: your last %d tool calls failed. Read the errors and change your approach; %d failures in a row stop the run.", st.toolErrors, l.o.ErrorStop)
		if _, err := l.note(ctx, st, step, "tool_errors", text); err != nil {
			return "", err
		}
	}
	return "", nil
}

// detectStale ends a step that called tools: a step whose every result
// hash was already seen in the run adds no new information. StaleNote
// such steps in a row add a note the model reads; StaleStop stop the run.
func (l *Loop) detectStale(ctx context.Context, st *state, step int) (string, error) {
	if st.stepNew {
		st.staleSteps = 0
		return "", nil
	}
	st.staleSteps++
	switch {
	case st.staleSteps >= l.o.StaleStop:
		return fmt.Sprintf("loop detected: %d steps in a row added no new information (every tool result was one already seen in this run)", st.staleSteps), nil
	case st.staleSteps == l.o.StaleNote:
		text := fmt.Sprintf("Note from the platform: your last %d steps returned only results you had already seen. Repeating them will not add information; use what you have, try something different, or finish.", st.staleSteps)
		if _, err := l.note(ctx, st, step, "no_new_information", text); err != nil {
			return "", err
		}
	}
	return "", nil
}

// convert expresses a call's cost in the budget's currency; a cost that
// cannot be converted is unknown (and the cost bound then fails closed).
func (l *Loop) convert(c model.Money, to string) (int64, string, bool) {
	if to == "" || c.Currency == to {
		return c.Micros, c.Currency, true
	}
	out, err := l.o.Rates.Convert(c, to)
	if err != nil {
		return 0, "", false
	}
	return out.Micros, out.Currency, true
}

const stopCancelled = "cancelled by request"

// end records the terminal event durably and returns the outcome.
func (l *Loop) end(ctx context.Context, st *state, step int, status, result, reason string) (engine.Outcome, error) {
	typ := trace.EvRunCompleted
	if status == store.StatusFailed || status == store.StatusCancelled {
		typ = trace.EvRunFailed
	}
	if status == store.StatusCompletedPartial {
		typ = trace.EvRunCompleted
	}
	// The run's sandboxes go before it ends, and the log says how. Whether
	// this event exists depends only on the log (a sandboxed result), so a
	// replay without sandboxes reads the same sequence.
	switch {
	case st.sandboxed:
		if _, err := st.env.Do(ctx, trace.EvSandboxEnd, step, engine.Durable, func(ctx context.Context) ([]byte, error) {
			td := trace.SandboxTeardowns{Sandboxes: []trace.SandboxTeardown{}}
			if l.o.Sandboxes != nil {
				if got := l.o.Sandboxes.EndRun(ctx, st.run.Tenant, st.run.ID); got != nil {
					td.Sandboxes = got
				}
			}
			return json.Marshal(td)
		}); err != nil {
			return engine.Outcome{}, err
		}
	case l.o.Sandboxes != nil && !st.env.Replaying():
		// No sandboxed result in the log (a call cancelled mid-flight, say),
		// but a sandbox may exist: end it; there is nothing to record.
		l.o.Sandboxes.EndRun(ctx, st.run.Tenant, st.run.ID)
	}
	ev, err := st.env.Do(ctx, typ, step, engine.Durable, func(context.Context) ([]byte, error) {
		return json.Marshal(trace.RunEnded{Status: status, Result: result, Reason: reason})
	})
	if err != nil {
		return engine.Outcome{}, err
	}
	var re trace.RunEnded
	if err := json.Unmarshal(ev.Payload, &re); err != nil {
		return engine.Outcome{}, err
	}
	out := re.Result
	if out == "" {
		out = re.Reason
	}
	return engine.Outcome{Status: re.Status, Result: strings.TrimSpace(out)}, nil
}
