package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/toolsearch"
	"github.com/agentplane/agentplane/trace"
)

// Activity names: the loop's effects, registered with the engine (and, on
// another engine, with each of its workers) under these names.
const (
	ActStart            = "loop.start"
	ActModelCall        = "loop.model_call"
	ActToolDecide       = "loop.tool_decide"
	ActToolExecute      = "loop.tool_execute"
	ActSandboxTeardown  = "loop.sandbox_teardown"
	ActCompact          = "loop.compact"
	ActApprovalRequest  = "loop.approval_request"
	ActApprovalDecision = "loop.approval_decide"
)

// StartInput is the input of ActStart: resolve the pinned agent version
// and record the run's context.
type StartInput struct {
	Run engine.RunInfo `json:"run"`
}

// ModelCallInput is the input of ActModelCall.
type ModelCallInput struct {
	// Request is the prompt; nil when the activity rebuilds it from the
	// run's log (Options.Log).
	Request *model.Request `json:"request,omitempty"`
	// PromptHash and PromptBytes are trace.PromptHash of Request, computed
	// by the loop from its transcript (incrementally: see
	// Transcript.PromptHash) rather than by encoding the whole request
	// again here.
	PromptHash  string            `json:"prompt_hash"`
	PromptBytes int64             `json:"prompt_bytes"`
	Delta       []int64           `json:"delta"`
	NoTools     bool              `json:"no_tools,omitempty"`
	Alias       string            `json:"alias"`
	Attribution model.Attribution `json:"attribution"`
	// Currency is the budget's: the call's cost is recorded in it.
	Currency string `json:"currency"`
}

// DecideInput is the input of ActToolDecide: the broker's decision on one
// proposed call, recorded as its tool_attempt.
type DecideInput struct {
	Run      engine.RunInfo  `json:"run"`
	Step     int             `json:"step"`
	Index    int             `json:"index"`
	CallID   string          `json:"call_id"`
	Tool     string          `json:"tool"`
	Manifest string          `json:"manifest,omitempty"` // hex content hash; "" when not granted
	Args     []byte          `json:"args"`               // canonical (or raw when not JSON)
	ArgsHash string          `json:"args_hash"`
	Key      string          `json:"idempotency_key"`
	State    broker.RunState `json:"state"`
	// Decided, when set, is the decision already made: the broker is not
	// asked (arguments that are not JSON, a tool search refuses, or the
	// search itself, which the loop answers).
	Decided *trace.Decision `json:"decided,omitempty"`
}

// ExecuteInput is the input of ActToolExecute: run one decided call (or
// record its refusal) and record the result the model reads.
type ExecuteInput struct {
	Run      engine.RunInfo    `json:"run"`
	Step     int               `json:"step"`
	Index    int               `json:"index"`
	CallID   string            `json:"call_id"`
	Tool     string            `json:"tool"`
	Manifest string            `json:"manifest,omitempty"`
	Args     []byte            `json:"args"`
	Key      string            `json:"idempotency_key"`
	Decision trace.Decision    `json:"decision"`
	Bindings map[string]string `json:"bindings,omitempty"`
	// Handles are the blob sums this run showed the model: the only ones
	// the tool may read by handle.
	Handles []string `json:"handles,omitempty"`
	// ReplayLive marks a call a replay runs live.
	ReplayLive bool `json:"replay_live,omitempty"`
}

// TeardownInput is the input of ActSandboxTeardown.
type TeardownInput struct {
	Tenant string `json:"tenant"`
	RunID  string `json:"run_id"`
}

// CompactInput is the input of ActCompact.
type CompactInput struct {
	Alias        string            `json:"alias"`
	PreviousNote string            `json:"previous_note,omitempty"`
	Steps        []model.Message   `json:"steps"`
	Kept         int               `json:"kept"`
	Attribution  model.Attribution `json:"attribution"`
	Currency     string            `json:"currency"`
}

// ApprovalRequestInput is the input of ActApprovalRequest: store the
// arguments of a request that has none stored yet (an edited call).
type ApprovalRequestInput struct {
	Tenant  string                  `json:"tenant"`
	Request trace.ApprovalRequested `json:"request"`
	Args    []byte                  `json:"args"`
}

// ApprovalDecisionInput is the input of ActApprovalDecision: record one
// decision, checking which groups its decider covers and deciding an
// edited call again.
type ApprovalDecisionInput struct {
	Run        engine.RunInfo       `json:"run"`
	Step       int                  `json:"step"`
	Index      int                  `json:"index"`
	Tool       string               `json:"tool"`
	Manifest   string               `json:"manifest"`
	ApprovalID string               `json:"approval_id"`
	Signal     trace.ApprovalSignal `json:"signal"`
	Args       []byte               `json:"args"` // the call's current canonical arguments
	Groups     []string             `json:"groups"`
	State      broker.RunState      `json:"state"`
}

// Activities holds what the loop's effects need: the gateway, the broker,
// the sandboxes, the stores. Its methods are the activity implementations;
// Register names them. Safe for concurrent use.
type Activities struct {
	o         *Options
	manifests *tool.ManifestCache
	byHash    manifestsByHash
	indexes   searchIndexes
}

// manifestsByHash keeps parsed pinned manifests by their hex hash, so a
// call does not read the store for its manifest; it starts over past
// maxByHash entries.
type manifestsByHash struct {
	mu sync.Mutex
	m  map[string]*tool.Manifest
}

const maxByHash = 4096

func (c *manifestsByHash) get(h string) *tool.Manifest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[h]
}

func (c *manifestsByHash) put(h string, m *tool.Manifest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxByHash {
		c.m = make(map[string]*tool.Manifest)
	}
	c.m[h] = m
}

// Register returns the loop's activities by name, for an engine (or a
// worker of one) to run.
func (a *Activities) Register() (*engine.Activities, error) {
	return engine.NewActivities(
		engine.NewActivity(ActStart, a.Start),
		engine.NewActivity(ActModelCall, a.ModelCall),
		engine.NewActivity(ActToolDecide, a.Decide),
		engine.NewActivity(ActToolExecute, a.Execute),
		engine.NewActivity(ActSandboxTeardown, a.Teardown),
		engine.NewActivity(ActCompact, a.Compact),
		engine.NewActivity(ActApprovalRequest, a.ApprovalRequest),
		engine.NewActivity(ActApprovalDecision, a.ApprovalDecision),
		engine.NewActivity(ActToolSearch, a.Search),
	)
}

// manifest returns the pinned manifest with hex hash h (nil for "").
func (a *Activities) manifest(ctx context.Context, h string) (*tool.Manifest, error) {
	if h == "" {
		return nil, nil
	}
	if m := a.byHash.get(h); m != nil {
		return m, nil
	}
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		return nil, engine.NonRetryable(fmt.Errorf("bad manifest hash %q", trace.Preview([]byte(h), 80)))
	}
	rec, err := a.o.Tools.GetToolByHash(ctx, [32]byte(b))
	if err != nil {
		return nil, fmt.Errorf("pinned tool %s: %w", h, err)
	}
	m, err := a.manifests.FromJSON(rec.Manifest)
	if err != nil {
		return nil, engine.NonRetryable(err)
	}
	a.byHash.put(h, m)
	return m, nil
}

// content stores data inline or as a blob; a failed blob write is worth
// retrying.
func (a *Activities) content(ctx context.Context, tenant string, data []byte, preview int) (trace.Content, error) {
	c, err := trace.MakeContent(ctx, a.o.Blobs.Blobs(tenant), data, a.o.InlineLimit, preview)
	if err != nil && ctx.Err() == nil {
		return c, engine.Retryable(err)
	}
	return c, err
}

// Start resolves the run's agent version (and its replay instructions) and
// returns its run_started record.
func (a *Activities) Start(ctx context.Context, in StartInput) (trace.RunStarted, error) {
	run := in.Run
	ag, err := a.o.Resolve(ctx, run.Agent, run.AgentVersion)
	if err != nil {
		return trace.RunStarted{}, engine.NonRetryable(fmt.Errorf("resolve agent %s@%d: %w", run.Agent, run.AgentVersion, err))
	}
	var replay *trace.ReplayInfo
	if a.o.ReplaySpec != nil {
		if replay, err = a.o.ReplaySpec(ctx, run.ID); err != nil {
			return trace.RunStarted{}, err
		}
	}
	if replay != nil {
		if replay.ModelAlias != "" {
			ag.ModelAlias = replay.ModelAlias
		}
		if replay.Instructions != "" {
			ag.Instructions = replay.Instructions
		}
	}
	searchable, err := a.searchDefs(ag)
	if err != nil {
		return trace.RunStarted{}, err
	}
	defs := make([]model.ToolDef, 0, len(ag.Tools)+1)
	refs := make([]trace.ToolRef, 0, len(ag.Tools))
	for _, m := range ag.Tools {
		name, desc, schema := m.Def()
		defs = append(defs, model.ToolDef{Name: name, Description: desc, InputSchema: schema})
		h := m.Hash()
		refs = append(refs, trace.ToolRef{Name: m.Name, Hash: hex.EncodeToString(h[:]), Reviewed: a.o.Broker.Reviewed(m)})
	}
	if ag.Search {
		defs = append(defs, toolsearch.Def()) // last: the prefix ends with it
	}
	defsJSON, err := json.Marshal(defs)
	if err != nil {
		return trace.RunStarted{}, err
	}
	sys, err := a.content(ctx, in.Run.Tenant, []byte(ag.Instructions), displayPreview)
	if err != nil {
		return trace.RunStarted{}, err
	}
	td, err := a.content(ctx, in.Run.Tenant, defsJSON, displayPreview)
	if err != nil {
		return trace.RunStarted{}, err
	}
	budgets, _ := json.Marshal(ag.Budgets)
	return trace.RunStarted{
		Agent: ag.Name, AgentVersion: ag.Version, AgentHash: hex.EncodeToString(ag.Hash[:]),
		Tenant: run.Tenant, User: run.User, Task: run.Task, ModelAlias: ag.ModelAlias,
		Tools: refs, System: sys, ToolDefs: td, Budgets: budgets, Replay: replay, Compaction: ag.Compaction, Temperature: ag.Temperature,
		Bindings: run.Bindings, TaintRules: trace.TaintRules2, LoopVersion: trace.LoopVersion1, Searchable: searchable,
	}, nil
}

// prompt rebuilds the request of a model call whose input carries only its
// hash: from the run's log in Options.Log, followed by the events the
// engine appends with this call's result, exactly as trace verify rebuilds
// a recorded call's. A rebuilt prompt whose hash or size is not the loop's
// is refused: the model is never sent anything but what the log will say
// it was sent.
func (a *Activities) prompt(ctx context.Context, in ModelCallInput) (*model.Request, error) {
	if a.o.Log == nil {
		return nil, engine.NonRetryable(errors.New("model call: the input carries no prompt and the loop has no log to rebuild it from"))
	}
	runID := in.Attribution.RunID
	src := trace.SourceFor(a.o.Log, in.Attribution.Tenant)
	evs, err := src.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, engine.Retryable(fmt.Errorf("model call: read the log of run %s: %w", runID, err))
	}
	if ai, ok := engine.ActivityInfoFrom(ctx); ok {
		for _, p := range ai.Pending {
			if n := len(evs); n > 0 && p.Seq <= evs[n-1].Seq {
				continue
			}
			evs = append(evs, store.Event{RunID: runID, Seq: p.Seq, Type: p.Type, Step: p.Step, At: p.At, Payload: p.Payload})
		}
	}
	req, err := trace.NextPrompt(ctx, src, evs, in.NoTools)
	if err != nil {
		return nil, engine.Retryable(fmt.Errorf("model call: rebuild the prompt of run %s from its log: %w", runID, err))
	}
	if hash, size := trace.PromptHash(req); hash != in.PromptHash || size != in.PromptBytes {
		return nil, engine.NonRetryable(fmt.Errorf("model call: the prompt rebuilt from run %s's log (%s, %d bytes) is not the loop's (%s, %d bytes)",
			runID, hash, size, in.PromptHash, in.PromptBytes))
	}
	return req, nil
}

// ModelCall asks the gateway. A failed call is a recorded result (the run
// ends on it), not an activity error: the gateway already retried.
func (a *Activities) ModelCall(ctx context.Context, in ModelCallInput) (trace.ModelCall, error) {
	req := in.Request
	if req == nil {
		var err error
		if req, err = a.prompt(ctx, in); err != nil {
			return trace.ModelCall{}, err
		}
	}
	mc := trace.ModelCall{Alias: in.Alias, Delta: in.Delta, PromptHash: in.PromptHash, PromptBytes: in.PromptBytes, NoTools: in.NoTools, Temperature: req.Temperature}
	var res *model.CallResult
	var err error
	if sm, ok := a.o.Models.(StreamingModels); ok && a.o.OnDelta != nil {
		runID, step := in.Attribution.RunID, in.Attribution.Step
		res, err = sm.CompleteStream(ctx, in.Alias, req, in.Attribution, func(d model.Delta) { a.o.OnDelta(runID, step, d) })
	} else {
		res, err = a.o.Models.Complete(ctx, in.Alias, req, in.Attribution)
	}
	if err != nil {
		if ctx.Err() != nil {
			return mc, ctx.Err()
		}
		mc.Error = err.Error()
		var be *model.BudgetError
		if errors.As(err, &be) {
			mc.BudgetRefused = &trace.Budget{Bound: be.Bound, Limit: be.Limit, Value: be.Used + max(be.Estimate, 0)}
			return mc, nil
		}
		if res != nil && res.CostKnown {
			// An answer that failed validation still spent tokens.
			mc.CostMicros, mc.Currency, mc.CostKnown = a.o.convert(res.Cost, in.Currency)
		}
		return mc, nil
	}
	if verr := model.ValidateResponse(res.Response); verr != nil {
		mc.Error = "malformed model response: " + verr.Error()
		return mc, nil
	}
	mc.Model, mc.Response, mc.LatencyMS = res.ModelID, res.Response, res.LatencyMS
	if res.CostKnown {
		mc.CostMicros, mc.Currency, mc.CostKnown = a.o.convert(res.Cost, in.Currency)
	}
	return mc, nil
}

// Decide asks the broker about one proposed call and returns its
// tool_attempt record.
func (a *Activities) Decide(ctx context.Context, in DecideInput) (trace.ToolAttempt, error) {
	m, err := a.manifest(ctx, in.Manifest)
	if err != nil {
		return trace.ToolAttempt{}, err
	}
	var decision trace.Decision
	if in.Decided != nil {
		decision = *in.Decided
	} else {
		run := in.Run
		decision = a.o.Broker.Decide(ctx, broker.Proposal{RunID: run.ID, Tenant: run.Tenant, User: run.User,
			Step: in.Step, Index: in.Index, Tool: in.Tool, Args: in.Args, Manifest: m,
			Agent: run.Agent, AgentVersion: run.AgentVersion, Run: in.State})
	}
	ac, err := a.content(ctx, in.Run.Tenant, in.Args, displayPreview)
	if err != nil {
		return trace.ToolAttempt{}, err
	}
	at := trace.ToolAttempt{CallID: in.CallID, Index: in.Index, Tool: in.Tool, Args: ac,
		ArgsHash: in.ArgsHash, IdempotencyKey: in.Key, Decision: decision}
	if m != nil {
		at.SideEffects, at.Tier = m.SideEffects, m.Tier
	}
	return at, nil
}

// Execute runs an allowed call through the broker (a refused one gets its
// refusal as its result) and returns the tool_result the model reads. A
// tool that fails is a result with status error, not an activity error.
func (a *Activities) Execute(ctx context.Context, in ExecuteInput) (trace.ToolResult, error) {
	r := trace.ToolResult{CallID: in.CallID, Index: in.Index, Tool: in.Tool}
	if in.ReplayLive {
		r.Replayed = trace.ReplayedLive
	}
	m, err := a.manifest(ctx, in.Manifest)
	if err != nil {
		return r, err
	}
	var out []byte
	var origBytes int64
	if !in.Decision.Allowed || m == nil {
		r.Status = trace.StatusDenied
		if in.Decision.Control == broker.ControlSchema {
			r.Status = trace.StatusInvalid
		}
		out, _ = json.Marshal(map[string]string{"error": in.Decision.Reason, "control": in.Decision.Control})
	} else {
		run := in.Run
		ex, err := a.o.Broker.Execute(ctx, m, tool.Call{Tool: m.Name, Args: in.Args, IdempotencyKey: in.Key,
			RunID: run.ID, Tenant: run.Tenant, User: run.User, Agent: fmt.Sprintf("%s@%d", run.Agent, run.AgentVersion),
			Handles: &handleReader{blobs: a.o.Blobs.Blobs(run.Tenant), allowed: in.Handles}, Bindings: in.Bindings})
		if err != nil {
			return r, err
		}
		r.Status, r.LatencyMS, out = ex.Status, ex.LatencyMS, ex.Output
		r.Redactions, origBytes = ex.Redactions, ex.Bytes
		r.Sandbox = ex.Boundary
	}
	r.Bytes = max(int64(len(out)), origBytes) // what the tool returned, before the broker cut it
	limit := a.o.MaxResultBytes
	if m != nil && m.MaxOutput() > 0 && m.MaxOutput() < limit {
		limit = m.MaxOutput()
	}
	r.Truncated = len(out) > limit
	sum := sha256.Sum256(out)
	r.ResultHash = hex.EncodeToString(sum[:])
	preview := displayPreview
	if r.Truncated {
		preview = a.o.PreviewBytes // the model reads this preview
	}
	c, err := a.content(ctx, in.Run.Tenant, out, preview)
	if err != nil {
		return r, err
	}
	if r.Truncated && !c.IsBlob() {
		// Keep the handle contract: a truncated result is always a blob.
		sum, err := a.o.Blobs.Blobs(in.Run.Tenant).PutBlob(ctx, out)
		if err != nil {
			return r, engine.Retryable(err)
		}
		c = trace.Content{Blob: hex.EncodeToString(sum[:]), Size: int64(len(out)), Preview: trace.Preview(out, a.o.PreviewBytes)}
	}
	r.Output = c
	return r, nil
}

// Teardown destroys the run's sandboxes and returns how each ended.
func (a *Activities) Teardown(ctx context.Context, in TeardownInput) (trace.SandboxTeardowns, error) {
	td := trace.SandboxTeardowns{Sandboxes: []trace.SandboxTeardown{}}
	if a.o.Sandboxes != nil {
		if got := a.o.Sandboxes.EndRun(ctx, in.Tenant, in.RunID); got != nil {
			td.Sandboxes = got
		}
	}
	return td, nil
}

// Compact writes the progress note of older steps with the small model. A
// failed compaction is a recorded result (the loop retries later).
func (a *Activities) Compact(ctx context.Context, in CompactInput) (trace.Compaction, error) {
	var out trace.Compaction
	comp := &model.Compactor{Models: a.o.Models, Alias: in.Alias}
	res, err := comp.Compact(ctx, model.CompactInput{PreviousNote: in.PreviousNote, Steps: in.Steps}, in.Attribution)
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out.Error = err.Error()
		return out, nil
	}
	note, err := a.content(ctx, in.Attribution.Tenant, []byte(res.Note), displayPreview)
	if err != nil {
		return out, err
	}
	out.Note, out.KeptMessages, out.CompactedMessages = note, in.Kept, len(in.Steps)
	out.Identifiers, out.Restored = len(res.Identifiers), res.Restored
	if call := res.Call; call != nil {
		out.Model, out.LatencyMS = call.ModelID, call.LatencyMS
		out.InputTokens, out.OutputTokens = call.Usage.TotalInput(), call.Usage.OutputTokens
		if call.CostKnown {
			out.CostMicros, _, out.CostKnown = a.o.convert(call.Cost, in.Currency)
		}
	}
	return out, nil
}

// ApprovalRequest stores a request's arguments and returns the request.
func (a *Activities) ApprovalRequest(ctx context.Context, in ApprovalRequestInput) (trace.ApprovalRequested, error) {
	q := in.Request
	c, err := a.content(ctx, in.Tenant, in.Args, displayPreview)
	if err != nil {
		return q, err
	}
	q.Args = c
	return q, nil
}

// ApprovalDecision records one decision on a request. An edit is decided
// again by the broker as a new call; the groups the decider covers, of
// those the (edited) call needs, are looked up here, so a replay reads
// them from the log.
func (a *Activities) ApprovalDecision(ctx context.Context, in ApprovalDecisionInput) (trace.ApprovalDecided, error) {
	sg := in.Signal
	d := trace.ApprovalDecided{ApprovalID: in.ApprovalID, Decider: sg.Decider, Comment: sg.Comment, Checked: true}
	switch sg.Decision {
	case "approve":
		d.Outcome = trace.ApprovalApproved
		covers, err := a.covers(ctx, in.Run, sg.Decider, in.Groups)
		if err != nil {
			return d, err
		}
		d.Covers = covers
	case "edit":
		d.Outcome = trace.ApprovalEdited
		edited, err := jsoncanon.Canonicalize(sg.Args)
		if err != nil || len(edited) == 0 || edited[0] != '{' {
			d.Outcome, d.Comment = trace.ApprovalRejected, "edited arguments are not a JSON object"
			break
		}
		m, err := a.manifest(ctx, in.Manifest)
		if err != nil {
			return d, err
		}
		e, before := string(edited), string(in.Args)
		d.EditedArgs, d.PreviousArgs = &e, &before
		// Edited arguments are a new call: every control runs again,
		// as the run's user, with the run's history and bindings.
		run := in.Run
		nd := a.o.Broker.Decide(ctx, broker.Proposal{RunID: run.ID, Tenant: run.Tenant, User: run.User,
			Step: in.Step, Index: in.Index, Tool: in.Tool, Args: edited, Manifest: m,
			Agent: run.Agent, AgentVersion: run.AgentVersion, Run: in.State})
		d.Recheck = &nd
		if !nd.Allowed && nd.Control == broker.ControlApproval && nd.Approval != nil {
			n := approvalNeed{need: *nd.Approval}
			covers, err := a.covers(ctx, run, sg.Decider, n.groups())
			if err != nil {
				return d, err
			}
			d.Covers = covers
		}
	default: // "reject" (the loop passes only decisions it accepts)
		d.Outcome = trace.ApprovalRejected
	}
	return d, nil
}

// covers returns the groups of groups that user may approve for: none for
// the run's own user, none without a directory (fail closed).
func (a *Activities) covers(ctx context.Context, run engine.RunInfo, user string, groups []string) ([]string, error) {
	if user == "" || user == run.User || a.o.Approvers == nil {
		return nil, nil
	}
	var out []string
	for _, g := range groups {
		ok, err := a.o.Approvers.InGroup(ctx, run.Tenant, user, g)
		if err != nil {
			return nil, engine.Retryable(fmt.Errorf("check approver %s in group %s: %w", user, g, err))
		}
		if ok {
			out = append(out, g)
		}
	}
	return out, nil
}

// handleReader gives a tool the content behind a handle its run showed
// the model, at most limit bytes.
type handleReader struct {
	blobs   store.BlobStore
	allowed []string
}

func (h *handleReader) ReadHandle(ctx context.Context, handle string, limit int64) ([]byte, error) {
	sum, ok := strings.CutPrefix(handle, "blob:")
	if !ok || !slices.Contains(h.allowed, sum) {
		return nil, fmt.Errorf("%q is not a handle this run has seen", trace.Preview([]byte(handle), 80))
	}
	c := trace.Content{Blob: sum}
	s, err := c.Sum()
	if err != nil {
		return nil, err
	}
	size, err := h.blobs.BlobSize(ctx, s)
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("handle %s holds %d bytes, over the %d-byte limit", handle, size, limit)
	}
	return h.blobs.GetBlob(ctx, s)
}

// convert expresses a call's cost in the budget's currency; a cost that
// cannot be converted is unknown (and the cost bound then fails closed).
func (o *Options) convert(c model.Money, to string) (int64, string, bool) {
	if to == "" || c.Currency == to {
		return c.Micros, c.Currency, true
	}
	out, err := o.Rates.Convert(c, to)
	if err != nil {
		return 0, "", false
	}
	return out.Micros, out.Currency, true
}
