// Package loop is the agent loop: deterministic code over an engine.Env that
// checks the four bounds, builds the context, calls the model through the
// gateway, sends each proposed tool call through the broker, and records
// everything in the run's event log. Because every input arrives through a
// recorded event, re-running the loop over a run's log reproduces the run
// without calling a model or a tool. Its effects are named activities with
// serialisable inputs (activities.go), run and recorded by the engine, so
// they can run on another engine's workers.
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
	"slices"
	"strings"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/toolsearch"
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
	// Search offers the built-in search_tools; Searchable are the tools
	// it may find (the agent's search grants, offerable ones only).
	Search     bool
	Searchable []*tool.Manifest
	Budgets    Budgets
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
	// Tools loads pinned manifests by hash for the activities (the
	// workflow reads them through its engine.Env).
	Tools store.ToolStore
	// Blobs stores large payloads the activities record, in the run's
	// tenant's blobs.
	Blobs store.Blobs
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
	// Log, when set, makes a model call activity's input carry the
	// prompt's hash and size instead of the prompt: the activity rebuilds
	// the prompt from the run's log in Log and the events its engine hands
	// over as not yet appended (engine.ActivityInfo.Pending), and refuses
	// one whose hash is not the loop's. For engines that keep activity
	// inputs (Temporal keeps them in the workflow's history): the
	// transcript, which grows with every step, then never travels in them.
	// Nil: the input carries the prompt (the embedded engine, whose
	// activities run in the loop's process).
	Log trace.Stores
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
	acts      *Activities
	reg       *engine.Activities
}

// New validates options and returns a Loop.
func New(o Options) (*Loop, error) {
	if o.Resolve == nil || o.Models == nil || o.Broker == nil || o.Tools == nil || o.Blobs == nil {
		return nil, errors.New("loop: Resolve, Models, Broker, Tools and Blobs are required")
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
	l := &Loop{o: o}
	l.acts = &Activities{o: &l.o, manifests: &l.manifests}
	reg, err := l.acts.Register()
	if err != nil {
		return nil, err
	}
	l.reg = reg
	return l, nil
}

// Activities returns the loop's activities by name: what an engine running
// Workflow must be given (engine.Options.Activities), and what a remote
// worker of another engine registers.
func (l *Loop) Activities() *engine.Activities { return l.reg }

// state is what the loop knows at a point of the log; it is rebuilt
// identically on every replay.
type state struct {
	env         engine.Env
	run         engine.RunInfo
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
	// sandboxed is set once a tool result came from a sandbox, or (from
	// LoopVersion1) once a tier-2/3 call ran: the run then records its
	// sandboxes' teardown before it ends.
	sandboxed bool
	// handles are the blob handles shown to the model (truncated results):
	// the only blobs a tool may be given by handle.
	handles map[string]bool
	// reviewed are the granted tools whose manifests the platform
	// reviewed, as run_started recorded them; toolHash their pinned
	// manifest hashes (hex).
	reviewed map[string]bool
	toolHash map[string]string
	// search is set when the run offers search_tools (its last prefix
	// definition); tools it loads join tools, reviewed and toolHash.
	search bool
}

// handleList lists the blob handles shown to the model, sorted.
func (st *state) handleList() []string {
	if len(st.handles) == 0 {
		return nil
	}
	out := make([]string, 0, len(st.handles))
	for h := range st.handles {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// add feeds a recorded event to the transcript.
func (st *state) add(ev engine.Event) error {
	return st.tr.Add(&store.Event{RunID: st.run.ID, Seq: ev.Seq, Type: ev.Type, Step: ev.Step, At: ev.At, Payload: ev.Payload})
}

// load returns the bytes of c, reading a blob through the engine.
func (st *state) load(ctx context.Context, c trace.Content) ([]byte, error) {
	if !c.IsBlob() {
		return []byte(c.Text), nil
	}
	sum, err := c.Sum()
	if err != nil {
		return nil, err
	}
	return st.env.Blob(ctx, sum)
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
			if err := st.add(ev); err != nil {
				return engine.Outcome{}, err
			}
			var sg trace.Signal
			_ = json.Unmarshal(ev.Payload, &sg)
			if sg.Kind == trace.SignalCancel {
				return l.end(ctx, st, step, store.StatusCancelled, "", "cancelled by request")
			}
		}
		ss, err := env.Record(ctx, trace.EvStepStarted, step, engine.Buffered, stepStarted{st})
		if err != nil {
			return engine.Outcome{}, err
		}
		if err := st.add(ss); err != nil {
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

// stepStarted marshals the step_started record only when it is appended
// (a replayed step reads the recorded one).
type stepStarted struct{ st *state }

func (s stepStarted) MarshalJSON() ([]byte, error) {
	st := s.st
	return json.Marshal(trace.StepStarted{Steps: st.steps, InputTokens: st.inTokens, CostMicros: st.cost,
		ElapsedMS: (st.env.Now().UnixMicro()-st.startAt)/1000 - st.waitedMS})
}

// start records or replays run_started and rebuilds the pinned context.
func (l *Loop) start(ctx context.Context, env engine.Env) (*state, error) {
	run := env.Run()
	ev, err := env.Execute(ctx, engine.Call{Activity: ActStart, Event: trace.EvRunStarted, Step: 0, Durability: engine.Buffered,
		Input: StartInput{Run: run}})
	if err != nil {
		return nil, err
	}
	st := &state{env: env, run: run, tools: map[string]*tool.Manifest{}, repeats: map[string]int{}, seenResults: map[string]bool{}, calls: map[string]int{}, handles: map[string]bool{}, reviewed: map[string]bool{}, toolHash: map[string]string{}, startAt: ev.At.UnixMicro()}
	if err := json.Unmarshal(ev.Payload, &st.started); err != nil {
		return nil, fmt.Errorf("run_started payload: %w", err)
	}
	if err := json.Unmarshal(st.started.Budgets, &st.budgets); err != nil {
		return nil, fmt.Errorf("run_started budgets: %w", err)
	}
	for _, ref := range st.started.Tools {
		m, err := l.loadManifest(ctx, env, ref)
		if err != nil {
			return nil, err
		}
		st.tools[m.Name] = m
		st.reviewed[m.Name] = ref.Reviewed
		st.toolHash[m.Name] = ref.Hash
	}
	sys, err := st.load(ctx, st.started.System)
	if err != nil {
		return nil, fmt.Errorf("load system prompt: %w", err)
	}
	defsJSON, err := st.load(ctx, st.started.ToolDefs)
	if err != nil {
		return nil, fmt.Errorf("load tool definitions: %w", err)
	}
	var defs []model.ToolDef
	if err := json.Unmarshal(defsJSON, &defs); err != nil {
		return nil, err
	}
	st.search = len(defs) > 0 && defs[len(defs)-1].Name == toolsearch.Name && st.tools[toolsearch.Name] == nil
	if st.started.Replay != nil {
		if st.replay, err = l.loadOriginal(ctx, env, st.started.Replay); err != nil {
			return nil, err
		}
	}
	st.tr = trace.NewTranscript(string(sys), defs, func(c trace.Content) ([]byte, error) { return st.load(ctx, c) })
	if err := st.add(ev); err != nil {
		return nil, err
	}
	return st, nil
}

// loadManifest reads a pinned manifest by its hash (immutable content, so
// the read needs no record) and parses it once per process: a manifest
// this process already holds under that hash is not read again.
func (l *Loop) loadManifest(ctx context.Context, env engine.Env, ref trace.ToolRef) (*tool.Manifest, error) {
	if m := l.acts.byHash.get(ref.Hash); m != nil {
		return m, nil
	}
	b, err := hex.DecodeString(ref.Hash)
	if err != nil || len(b) != 32 {
		return nil, fmt.Errorf("run pins tool %s with a bad hash", ref.Name)
	}
	data, err := env.Manifest(ctx, [32]byte(b))
	if err != nil {
		return nil, fmt.Errorf("pinned tool %s: %w", ref.Name, err)
	}
	m, err := l.manifests.FromJSON(data)
	if err != nil {
		return nil, err
	}
	l.acts.byHash.put(ref.Hash, m)
	return m, nil
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
	if _, err := st.env.Record(ctx, trace.EvBudget, step, engine.Buffered, b); err != nil {
		return engine.Outcome{}, err
	}
	note := fmt.Sprintf("Budget reached (%s). You cannot call tools any more. Report what you found and what is left to do.", b.Bound)
	if err := l.note(ctx, st, step, "budget", note); err != nil {
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

func (l *Loop) note(ctx context.Context, st *state, step int, reason, text string) error {
	ev, err := st.env.Record(ctx, trace.EvLoopNote, step, engine.Buffered, trace.LoopNote{Reason: reason, Text: text})
	if err != nil {
		return err
	}
	return st.add(ev)
}

// modelCall makes (or replays) one model call. A nil response with a nil
// error means the call failed and the failure is recorded.
func (l *Loop) modelCall(ctx context.Context, st *state, step int, noTools bool) (*model.Response, error) {
	req := st.tr.Request(noTools)
	req.Temperature = st.started.Temperature
	delta := st.tr.TakeDelta()
	hash, size := st.tr.PromptHash(noTools)
	var ev engine.Event
	var err error
	if orig := st.replay.recordedModel(step, noTools); orig != nil {
		// Served from the original's log: no model call, no cost.
		mc := trace.ModelCall{Alias: st.started.ModelAlias, Delta: delta, PromptHash: hash, PromptBytes: size, NoTools: noTools, Temperature: req.Temperature,
			Response: orig.Response, Model: orig.Model, ReplayedFrom: orig.seq, CostKnown: true, Currency: st.budgets.MaxCost.Currency}
		ev, err = st.env.Record(ctx, trace.EvModelCall, step, engine.Buffered, mc)
	} else {
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
		in := ModelCallInput{Request: req, PromptHash: hash, PromptBytes: size, Delta: delta, NoTools: noTools, Alias: st.started.ModelAlias, Attribution: attr, Currency: st.budgets.MaxCost.Currency}
		if l.o.Log != nil {
			in.Request = nil // rebuilt by the activity from the log
		}
		ev, err = st.env.Execute(ctx, engine.Call{Activity: ActModelCall, Event: trace.EvModelCall, Step: step, Durability: engine.Buffered, Input: in})
	}
	if err != nil {
		return nil, err
	}
	var mc trace.ModelCall
	if err := json.Unmarshal(ev.Payload, &mc); err != nil {
		return nil, fmt.Errorf("model_call payload: %w", err)
	}
	if mc.BudgetRefused != nil {
		st.refused = mc.BudgetRefused // not a step: nothing was sent
		st.tr.AddModelCall(ev.Seq, &mc)
		return nil, nil
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
	st.env.Report(engine.Counters{Steps: steps, InputTokens: in, OutputTokens: out, CostMicros: cost, CostUnknown: unknown, Currency: cur})
	st.tr.AddModelCall(ev.Seq, &mc)
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
	key := engine.IdempotencyKey(run.ID, step, index)
	m := st.tools[call.Name]
	args, canonErr := jsoncanon.Canonicalize(call.Input)
	if canonErr != nil {
		args = call.Input
	}
	argsSum := sha256.Sum256(args)
	if st.search && call.Name == toolsearch.Name {
		return l.searchCall(ctx, st, step, index, call, args, hex.EncodeToString(argsSum[:]))
	}
	var refusal *trace.Decision
	switch {
	case canonErr != nil && m != nil:
		refusal = &trace.Decision{Control: broker.ControlSchema, Reason: "arguments are not valid JSON"}
	case m == nil && st.searchable(call.Name):
		refusal = &trace.Decision{Control: broker.ControlGrant, Reason: fmt.Sprintf("tool %q is not in your tools yet: find it with %s first", call.Name, toolsearch.Name)}
	}
	mhash := ""
	if m != nil {
		mhash = st.toolHash[call.Name]
	}
	attemptDurable := engine.Buffered
	if m != nil && m.SideEffects != tool.SideEffectsNone {
		attemptDurable = engine.Durable
	}
	argsHash := hex.EncodeToString(argsSum[:])
	in := DecideInput{Run: run, Step: step, Index: index, CallID: call.ToolUseID, Tool: call.Name, Manifest: mhash,
		Args: args, ArgsHash: argsHash, Key: key, Decided: refusal}
	if refusal == nil {
		in.State = st.runState() // only the broker reads it
	}
	aev, err := st.env.Execute(ctx, engine.Call{Activity: ActToolDecide, Event: trace.EvToolAttempt, Step: step, Durability: attemptDurable, Input: in})
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
		ap, err := l.approve(ctx, st, step, index, call, mhash, &attempt, aev, args)
		if err != nil {
			return "", err
		}
		if ap.stop != "" {
			return ap.stop, nil
		}
		final, execArgs, approvalNotes = ap.decision, ap.args, ap.notes
	}
	var rev engine.Event
	if rp != nil && rp.how != trace.ReplayedLive {
		rev, err = st.env.Record(ctx, trace.EvToolResult, step, engine.Buffered, rp.result(call.ToolUseID, index, call.Name))
	} else {
		rev, err = st.env.Execute(ctx, engine.Call{Activity: ActToolExecute, Event: trace.EvToolResult, Step: step, Durability: engine.Buffered,
			Input: ExecuteInput{Run: run, Step: step, Index: index, CallID: call.ToolUseID, Tool: call.Name, Manifest: mhash,
				Args: execArgs, Key: key, Decision: final, Bindings: st.started.Bindings, Handles: st.handleList(), ReplayLive: rp != nil}})
		if final.Allowed && m != nil && m.Tier >= 2 && st.started.LoopVersion >= trace.LoopVersion1 {
			st.sandboxed = true // a sandbox may exist whatever the result says
		}
	}
	if err != nil {
		return "", err
	}
	var res trace.ToolResult
	if err := json.Unmarshal(rev.Payload, &res); err != nil {
		return "", fmt.Errorf("tool_result payload: %w", err)
	}
	if err := st.tr.AddToolResult(rev.Seq, &res); err != nil {
		return "", err
	}
	if len(approvalNotes) > 0 {
		// The model is told how people changed its call, after its result.
		text := fmt.Sprintf("Note from the platform about your %s call (id %s): %s. The result above is of the call as finally decided.",
			call.Name, call.ToolUseID, strings.Join(approvalNotes, "; "))
		if err := l.note(ctx, st, step, trace.NoteApproval, text); err != nil {
			return "", err
		}
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
		if err := l.note(ctx, st, step, "repeat", text); err != nil {
			return "", err
		}
	case st.toolErrors == l.o.ErrorNote:
		text := fmt.Sprintf("Note from the platform: your last %d tool calls failed. Read the errors and change your approach; %d failures in a row stop the run.", st.toolErrors, l.o.ErrorStop)
		if err := l.note(ctx, st, step, "tool_errors", text); err != nil {
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
		if err := l.note(ctx, st, step, "no_new_information", text); err != nil {
			return "", err
		}
	}
	return "", nil
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
	// this event exists depends only on the log, so a replay without
	// sandboxes reads the same sequence.
	if st.sandboxed {
		if _, err := st.env.Execute(ctx, engine.Call{Activity: ActSandboxTeardown, Event: trace.EvSandboxEnd, Step: step, Durability: engine.Durable,
			Input: TeardownInput{Tenant: st.run.Tenant, RunID: st.run.ID}}); err != nil {
			return engine.Outcome{}, err
		}
	}
	ev, err := st.env.Record(ctx, typ, step, engine.Durable, trace.RunEnded{Status: status, Result: result, Reason: reason})
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
