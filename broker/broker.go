// Package broker is the tool broker: every tool call a model proposes passes
// through it, and the model cannot change what happens here. Decide runs the
// controls in a fixed order and records which one decided:
//
//  1. grant: the agent version grants the tool;
//  2. authz: the invoking user may use it (package authz: a known user, the
//     manifest's scopes, the user's argument bindings);
//  3. schema: the arguments match the manifest's input schema;
//  4. policy: the agent definition's CEL rules (package policy), first match
//     wins: allow, deny(reason) or require_approval(group, expires);
//  5. rate_limit: the manifest's limits, per run (from the run's log), per
//     user and per tenant (in this process's memory);
//  6. approval: a require_approval policy or the manifest's approval rule;
//     the decision names every group that must approve and carries
//     plain-words warnings about look-alike addresses for the approver.
//
// Execute runs an allowed call at the tool's declared isolation tier with
// the manifest's timeout, failing closed when the tier has no executor here.
// It re-checks the user's authorisation, attaches a credential minted for
// that one call (package secrets), and cleans the output before anyone sees
// it (package redact): secrets removed, control characters and escape
// sequences stripped, size bounded, with the byte count taken first.
package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/redact"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Controls that can stop a call; recorded in the attempt's decision.
const (
	ControlGrant     = "grant"
	ControlSchema    = "schema"
	ControlAuthz     = "authz"
	ControlPolicy    = "policy"
	ControlRateLimit = "rate_limit"
	ControlApproval  = "approval"
	ControlTier      = "tier"
)

// DefaultApprovalExpiry is how long an approval waits when no rule says.
const DefaultApprovalExpiry = 24 * time.Hour

// Options configure a Broker.
type Options struct {
	// Catalog holds the tier-1 functions.
	Catalog *tool.Catalog
	// Executors run tools of tier 2 and 3 out of process, by tier (see
	// package sandbox/toolrun). A tier without one fails closed.
	Executors map[int]Executor
	// Remote runs tools served by MCP connectors (manifests with an MCP
	// binding; package mcphost). Without it such tools fail closed.
	Remote Remote
	// Directory knows each tenant's users and their permissions. Without
	// one, every user is unknown: tools that act for a user are denied.
	Directory authz.Directory
	// Policies returns an agent version's compiled policies (nil: the
	// agent has none). An error denies the call.
	Policies func(ctx context.Context, agent string, version int) (*agent.Policies, error)
	// Credentials mints the credential of one call. Without it, tools
	// whose auth mode is not none fail closed at execution.
	Credentials Credentials
	// Redact lists values that must never appear in tool output, on top
	// of each call's own credential (the platform's own keys, say).
	Redact []string
	// MaxOutputBytes bounds what a tool may return into the log and the
	// blob store (default 8 MiB: a year of one card's transactions fits);
	// more is cut and flagged. What the model reads inline is bounded
	// further by the loop.
	MaxOutputBytes int
	// Rates keeps the per-user and per-tenant rate-limit windows (the
	// platform's store, shared by every process). Without it they are
	// counted in this process's memory only.
	Rates  store.RateStore
	Logger *slog.Logger
	Clock  func() time.Time
}

// DefaultMaxOutputBytes is the default of Options.MaxOutputBytes.
const DefaultMaxOutputBytes = 8 << 20

// Broker authorises and executes tool calls. Safe for concurrent use.
type Broker struct {
	o       Options
	limits  *limiter
	redactR *redact.Redactor
}

// New returns a broker.
func New(o Options) (*Broker, error) {
	if o.Catalog == nil {
		return nil, errors.New("broker: Catalog is required")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = DefaultMaxOutputBytes
	}
	return &Broker{o: o, limits: newLimiter(), redactR: redact.New(o.Redact...)}, nil
}

// Proposal is a tool call the model proposed, with its context.
type Proposal struct {
	RunID  string
	Tenant string
	User   string
	Step   int
	Index  int
	Tool   string
	Args   json.RawMessage
	// Manifest is the pinned manifest if the agent version grants the tool,
	// nil otherwise.
	Manifest *tool.Manifest
	// Agent and AgentVersion identify the pinned definition (its policies).
	Agent        string
	AgentVersion int
	// Run is the run's state as recorded before this call.
	Run RunState
}

// RunState is what policy may read about the run. It is rebuilt from the log,
// so a replayed decision sees the same values.
type RunState struct {
	// Tainted is set once the run has read output of a tool whose manifest
	// marks it untrusted.
	Tainted    bool
	Steps      int
	CostMicros int64
	Currency   string
	// Calls counts earlier tool calls of this run by tool name.
	Calls map[string]int
	// Allowed lists the earlier calls of this run that were let through
	// (allowed, or approved), in order. Per-run rate limits count them and
	// policies read their totals. The broker only reads it.
	Allowed []PriorCall
	// Bindings are the run's own argument bindings (as its run_started
	// event recorded them), which narrow the user's.
	Bindings map[string]string
}

// PriorCall is an earlier call of the run that ran.
type PriorCall struct {
	Tool string
	// At is when its attempt was recorded (from the log, so a call decided
	// again after a crash sees the same history).
	At time.Time
	// Args are its canonical JSON arguments.
	Args json.RawMessage
}

// Decide runs the controls in order (grant, authz, schema, policy, rate
// limit, approval) and returns the first refusal, or an allow; the decision
// names the control, and the rule, that decided. Its only side effect is
// charging the in-memory per-user and per-tenant rate windows when it
// allows a call. See decide.go.
func (b *Broker) Decide(ctx context.Context, p Proposal) trace.Decision {
	return b.decide(ctx, p)
}

// Reviewed reports whether the platform reviewed m (see tool.Catalog.Review):
// only a reviewed manifest's description is trusted text, and only a
// reviewed tier-1 tool that declares untrusted_output: false has trusted
// output.
func (b *Broker) Reviewed(m *tool.Manifest) bool {
	if m.MCP != nil {
		// A connector's tools are reviewed with its snapshot, not in the
		// catalog; only the manifests of its current review count.
		return b.o.Remote != nil && b.o.Remote.Reviewed(m)
	}
	return b.o.Catalog.Reviewed(m)
}

// Permits reports, for each of ms, whether the run's user may use it at
// all, as the authorisation control would decide for a call without
// arguments: the user is known (or the tool needs no identity) and holds
// every scope the manifest names. The user is looked up once. Tool search
// offers only tools that pass; a call is still decided in full. An error
// means the directory could not answer.
func (b *Broker) Permits(ctx context.Context, tenant, user string, ms []*tool.Manifest) ([]bool, error) {
	pr, d, ok := b.principal(ctx, tenant, user)
	if !ok {
		return nil, errors.New(d.Reason)
	}
	out := make([]bool, len(ms))
	for i, m := range ms {
		out[i] = authz.Authorize(tenant, user, pr, m, json.RawMessage(`{}`)) == nil
	}
	return out, nil
}

// Remote runs the tools of MCP connectors. Safe for concurrent use.
type Remote interface {
	// Call makes the call on the connector's server. A *Refused error
	// means the host stopped the call before it reached the server (a
	// quarantined tool, a connector of another tenant): the model sees
	// the reason. Any other error means the platform failed.
	Call(ctx context.Context, m *tool.Manifest, call tool.Call) (tool.Result, error)
	// Reviewed reports whether m is a manifest of its connector's
	// current reviewed snapshot.
	Reviewed(m *tool.Manifest) bool
}

// Refused is a call a Remote stopped before it reached the server.
type Refused struct {
	// Control names what stopped it ("quarantine", "connector").
	Control string
	Reason  string
}

func (r *Refused) Error() string { return r.Reason }

// Executor runs a tool of tier 2 or 3 in a sandbox. It returns the tool's
// result and the boundary record; a Go error means the platform failed.
type Executor interface {
	Execute(ctx context.Context, m *tool.Manifest, call tool.Call) (tool.Result, *trace.SandboxInfo, error)
}

// Execution is the outcome of running an allowed call.
type Execution struct {
	Status string // trace.StatusOK, StatusError, StatusTimeout or StatusDenied
	// Output is cleaned: secrets removed, control characters stripped,
	// at most Options.MaxOutputBytes.
	Output    []byte
	LatencyMS int64
	// Bytes is the size of what the tool returned, measured before any
	// cleaning or cut.
	Bytes int64
	// Truncated is set when Output was cut to the bound.
	Truncated bool
	// Redactions counts secrets removed from the output.
	Redactions int
	// Boundary is the sandbox's boundary record (tier 2 and 3 only).
	Boundary *trace.SandboxInfo
}

// Execute runs an allowed call at the manifest's tier, with a credential
// minted for it, and cleans what comes back (see execute.go). A Go error
// means the platform failed (not the tool): the caller should not record a
// result.
func (b *Broker) Execute(ctx context.Context, m *tool.Manifest, call tool.Call) (Execution, error) {
	return b.executeSecured(ctx, m, call)
}

// execute dispatches a call to its tier's executor. Its output is cleaned by
// executeSecured.
func (b *Broker) execute(ctx context.Context, m *tool.Manifest, call tool.Call) (Execution, error) {
	start := b.o.Clock()
	if m.MCP != nil {
		return b.executeRemote(ctx, m, call, start)
	}
	if ex := b.o.Executors[m.Tier]; m.Tier != 1 && ex != nil {
		return b.executeSandboxed(ctx, ex, m, call, start)
	}
	if m.Tier != 1 {
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s needs an isolation tier %d executor, and none is available on this host; refusing to run it at a weaker tier", m.Name, m.Tier)})
		return Execution{Status: trace.StatusError, Output: out}, nil
	}
	fn, ok := b.o.Catalog.Lookup(m.Name)
	if !ok {
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s has no tier-1 function in this build", m.Name)})
		return Execution{Status: trace.StatusError, Output: out}, nil
	}
	tctx, cancel := context.WithTimeout(ctx, time.Duration(m.TimeoutMS)*time.Millisecond)
	defer cancel()
	res, err := fn(tctx, call)
	lat := b.o.Clock().Sub(start).Milliseconds()
	if ctx.Err() != nil {
		return Execution{}, ctx.Err()
	}
	if errors.Is(tctx.Err(), context.DeadlineExceeded) {
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s timed out after %d ms", m.Name, m.TimeoutMS)})
		return Execution{Status: trace.StatusTimeout, Output: out, LatencyMS: lat}, nil
	}
	if err != nil {
		b.o.Logger.Error("tool failed", "tool", m.Name, "run", call.RunID, "err", b.redactR.With(call.Credential).Error(err))
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s failed", m.Name)})
		return Execution{Status: trace.StatusError, Output: out, LatencyMS: lat}, nil
	}
	st := trace.StatusOK
	if res.IsError {
		st = trace.StatusError
	}
	out := []byte(res.Output)
	if len(out) == 0 {
		out = []byte("null")
	}
	return Execution{Status: st, Output: out, LatencyMS: lat}, nil
}

// executeRemote runs a call on an MCP connector's server, bounded by the
// manifest's timeout.
func (b *Broker) executeRemote(ctx context.Context, m *tool.Manifest, call tool.Call, start time.Time) (Execution, error) {
	if b.o.Remote == nil {
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s is served by MCP connector %s, and this platform has no MCP host configured; refusing the call", m.Name, m.Connector)})
		return Execution{Status: trace.StatusError, Output: out}, nil
	}
	tctx, cancel := context.WithTimeout(ctx, m.Timeout())
	defer cancel()
	res, err := b.o.Remote.Call(tctx, m, call)
	lat := b.o.Clock().Sub(start).Milliseconds()
	if ctx.Err() != nil {
		return Execution{}, ctx.Err()
	}
	var refused *Refused
	switch {
	case errors.As(err, &refused):
		ex := b.refused(refused.Control, refused.Reason)
		ex.LatencyMS = lat
		return ex, nil
	case errors.Is(tctx.Err(), context.DeadlineExceeded):
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s timed out after %d ms", m.Name, m.TimeoutMS)})
		return Execution{Status: trace.StatusTimeout, Output: out, LatencyMS: lat}, nil
	case err != nil:
		b.o.Logger.Error("MCP tool failed", "tool", m.Name, "connector", m.Connector, "run", call.RunID, "err", b.redactR.With(call.Credential).Error(err))
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s failed: connector %s could not be reached or answered badly", m.Name, m.Connector)})
		return Execution{Status: trace.StatusError, Output: out, LatencyMS: lat}, nil
	}
	st := trace.StatusOK
	if res.IsError {
		st = trace.StatusError
	}
	out := []byte(res.Output)
	if len(out) == 0 {
		out = []byte("null")
	}
	return Execution{Status: st, Output: out, LatencyMS: lat}, nil
}

// executeSandboxed runs a tier-2 or tier-3 call through its executor.
func (b *Broker) executeSandboxed(ctx context.Context, ex Executor, m *tool.Manifest, call tool.Call, start time.Time) (Execution, error) {
	res, info, err := ex.Execute(ctx, m, call)
	lat := b.o.Clock().Sub(start).Milliseconds()
	if ctx.Err() != nil {
		return Execution{}, ctx.Err()
	}
	if err != nil {
		b.o.Logger.Error("sandboxed tool failed", "tool", m.Name, "run", call.RunID, "tier", m.Tier, "err", b.redactR.With(call.Credential).Error(err))
		out, _ := json.Marshal(map[string]string{"error": fmt.Sprintf("tool %s failed: its sandbox could not run it", m.Name)})
		return Execution{Status: trace.StatusError, Output: out, LatencyMS: lat, Boundary: info}, nil
	}
	st := trace.StatusOK
	switch {
	case info != nil && info.Outcome == "timeout":
		st = trace.StatusTimeout
	case res.IsError:
		st = trace.StatusError
	}
	out := []byte(res.Output)
	if len(out) == 0 {
		out = []byte("null")
	}
	return Execution{Status: st, Output: out, LatencyMS: lat, Boundary: info}, nil
}
