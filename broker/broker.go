// Package broker is the tool broker: every tool call a model proposes passes
// through it. It decides (grant, argument schema; later stages add
// authorisation as the invoking user, policy, rate limits and approval), and
// it executes allowed calls at the tool's declared isolation tier with the
// manifest's timeout, failing closed when the tier has no executor here.
package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

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
	Logger  *slog.Logger
	Clock   func() time.Time
}

// Broker authorises and executes tool calls. Safe for concurrent use.
type Broker struct {
	o Options
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
	return &Broker{o: o}, nil
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
}

// Decide runs the controls in order and returns the first refusal, or an
// allow. It has no side effects.
func (b *Broker) Decide(ctx context.Context, p Proposal) trace.Decision {
	if p.Manifest == nil {
		return trace.Decision{Control: ControlGrant, Reason: fmt.Sprintf("tool %q is not granted to this agent", p.Tool)}
	}
	if err := p.Manifest.ValidateArgs(p.Args); err != nil {
		return trace.Decision{Control: ControlSchema, Reason: fmt.Sprintf("invalid arguments for %s: %v", p.Tool, err)}
	}
	if need, why := p.Manifest.NeedsApproval(p.Args); need {
		group := p.Manifest.ApprovalGroup
		if group == "" {
			group = "approvers"
		}
		return trace.Decision{Control: ControlApproval, Reason: fmt.Sprintf("%s needs approval from %s: %s", p.Tool, group, why),
			Approval: &trace.ApprovalNeed{Group: group, ExpiresMS: DefaultApprovalExpiry.Milliseconds(), Rule: "manifest:" + p.Tool}}
	}
	return trace.Decision{Allowed: true}
}

// Execution is the outcome of running an allowed call.
type Execution struct {
	Status    string // trace.StatusOK, StatusError or StatusTimeout
	Output    []byte
	LatencyMS int64
}

// Execute runs an allowed call at the manifest's tier. A Go error means the
// platform failed (not the tool): the caller should not record a result.
func (b *Broker) Execute(ctx context.Context, m *tool.Manifest, call tool.Call) (Execution, error) {
	start := b.o.Clock()
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
		b.o.Logger.Error("tool failed", "tool", m.Name, "run", call.RunID, "err", err)
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
