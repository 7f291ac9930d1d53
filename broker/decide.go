package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/policy"
	"github.com/agentplane/agentplane/redact"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// maxReasonBytes bounds a decision's reason: it reaches the model and the
// log, and may quote the model's own arguments.
const maxReasonBytes = 2048

// Binding returns the hex sha256 that binds an approval to one call: the
// tool's name and its canonical JSON arguments.
func Binding(toolName string, canonicalArgs []byte) string {
	h := sha256.New()
	h.Write([]byte(toolName))
	h.Write([]byte{0})
	h.Write(canonicalArgs)
	return hex.EncodeToString(h.Sum(nil))
}

func (b *Broker) deny(control, rule, format string, args ...any) trace.Decision {
	reason, _ := b.redactR.Text(fmt.Sprintf(format, args...), redact.TextOptions{MaxBytes: maxReasonBytes})
	return trace.Decision{Control: control, Rule: rule, Reason: reason}
}

// decide is Decide: grant, authz, schema, policy, rate limit, approval.
func (b *Broker) decide(ctx context.Context, p Proposal) trace.Decision {
	m := p.Manifest
	// 1. Grant.
	if m == nil {
		return b.deny(ControlGrant, "", "tool %q is not granted to this agent", p.Tool)
	}

	// 2. Authorisation as the invoking user.
	principal, d, ok := b.principal(ctx, p.Tenant, p.User)
	if !ok {
		return d
	}
	if err := authz.Authorize(p.Tenant, p.User, principal, m, p.Args); err != nil {
		return b.deny(ControlAuthz, "", "%v", err)
	}
	if err := authz.AuthorizeRun(p.Run.Bindings, p.Args); err != nil {
		return b.deny(ControlAuthz, "", "%v", err)
	}

	// 3. Arguments against the manifest's schema.
	if err := m.ValidateArgs(p.Args); err != nil {
		return b.deny(ControlSchema, "", "%v", err)
	}

	// 4. Policy: the first rule whose condition holds decides.
	var (
		need    *trace.ApprovalNeed
		why     []string
		allowBy string
	)
	ps, err := b.policies(ctx, p.Agent, p.AgentVersion)
	if err != nil {
		return b.deny(ControlPolicy, "", "the policies of %s@%d could not be loaded, so the call is denied: %v", p.Agent, p.AgentVersion, err)
	}
	if ps != nil && ps.Set.Len() > 0 {
		in, err := policyInput(p, principal, ps.Set)
		if err != nil {
			return b.deny(ControlPolicy, "", "the arguments cannot be read by the policies, so the call is denied: %v", err)
		}
		i, err := ps.Set.First(ctx, in)
		if err != nil {
			var ee *policy.EvalError
			rule := ""
			if errors.As(err, &ee) {
				rule = "policy:" + ee.Rule
			}
			return b.deny(ControlPolicy, rule, "%v; a policy that cannot be evaluated denies the call", err)
		}
		if i >= 0 {
			rule := ps.Rules[i]
			switch rule.Then.Kind {
			case agent.ActionDeny:
				reason := rule.Then.Reason
				if reason == "" {
					reason = "no reason given"
				}
				return b.deny(ControlPolicy, "policy:"+rule.Name, "policy %s denies this call: %s", rule.Name, reason)
			case agent.ActionRequireApproval:
				need = &trace.ApprovalNeed{Group: rule.Then.Group, Groups: []string{rule.Then.Group}, ExpiresMS: rule.Then.Expires.Milliseconds(), Rule: "policy:" + rule.Name}
				why = append(why, "policy "+rule.Name)
			case agent.ActionAllow:
				allowBy = "policy:" + rule.Name
			}
		}
	}

	// The manifest's approval rule is the tool owner's, and no agent
	// policy can waive it.
	if must, mwhy := m.NeedsApproval(p.Args); must {
		group := m.ApprovalGroup
		if group == "" {
			group = defaultApprovalGroup
		}
		mneed := &trace.ApprovalNeed{Group: group, Groups: []string{group}, ExpiresMS: DefaultApprovalExpiry.Milliseconds(), Rule: "manifest:" + m.Name}
		switch {
		case need == nil:
			need = mneed
		case need.Group == mneed.Group:
			need.Rule += "," + mneed.Rule
			need.ExpiresMS = min(need.ExpiresMS, mneed.ExpiresMS)
		default:
			// One request names one group: the tool owner's is asked
			// first. Both must approve (Groups): the loop asks the policy's
			// group next unless the first approver is in it too.
			why = append(why, fmt.Sprintf("(and policy %s asks group %s)", strings.TrimPrefix(need.Rule, "policy:"), need.Group))
			mneed.Rule += "," + need.Rule
			mneed.Groups = append(mneed.Groups, need.Group)
			mneed.ExpiresMS = min(need.ExpiresMS, mneed.ExpiresMS)
			need = mneed
		}
		why = append([]string{mwhy}, why...)
	}

	// 5. Rate limits. A call that waits for approval is checked but not
	// charged: the approval, not this decision, lets it run.
	now := b.o.Clock()
	if d, ok := b.rateLimit(ctx, p, now, need == nil); !ok {
		return d
	}

	// 6. Approval.
	if need != nil {
		need.Binding = Binding(p.Tool, p.Args)
		need.Warnings = addressWarnings(p.Args)
		if need.ExpiresMS <= 0 {
			need.ExpiresMS = DefaultApprovalExpiry.Milliseconds()
		}
		d := b.deny(ControlApproval, need.Rule, "%s needs approval from %s before it runs (%s); the call was not made and waits for that decision",
			p.Tool, groupWords(need.Groups), strings.Join(why, "; "))
		d.Approval = need
		return d
	}
	return trace.Decision{Allowed: true, Rule: allowBy}
}

// groupWords names the groups an approval needs.
func groupWords(groups []string) string {
	if len(groups) == 1 {
		return "group " + groups[0]
	}
	return "groups " + joinWords(groups) + " (each)"
}

// defaultApprovalGroup approves calls whose manifest names no group.
const defaultApprovalGroup = "approvers"

// principal looks the user up. ok is false when the lookup failed for a
// reason other than an unknown user; d is then the denial.
func (b *Broker) principal(ctx context.Context, tenant, user string) (*authz.Principal, trace.Decision, bool) {
	if b.o.Directory == nil {
		return nil, trace.Decision{}, true
	}
	pr, err := b.o.Directory.Principal(ctx, tenant, user)
	switch {
	case err == nil:
		return pr, trace.Decision{}, true
	case errors.Is(err, authz.ErrUnknownUser):
		return nil, trace.Decision{}, true
	default:
		return nil, b.deny(ControlAuthz, "", "the user directory could not answer for %s/%s, so the call is denied: %v", tenant, user, err), false
	}
}

func (b *Broker) policies(ctx context.Context, name string, version int) (*agent.Policies, error) {
	if b.o.Policies == nil {
		return nil, nil
	}
	return b.o.Policies(ctx, name, version)
}

// policyInput builds what rules read. run.totals covers the call's own
// tool and the tools the rules name (see policy.Set.NamesTool), so the
// cost of a decision does not grow with the length of the run for rules
// that never look back.
func policyInput(p Proposal, pr *authz.Principal, set *policy.Set) (*policy.Input, error) {
	args, err := policy.ArgsFromJSON(p.Args)
	if err != nil {
		return nil, err
	}
	in := &policy.Input{Tool: p.Tool, Args: args, Tenant: p.Tenant,
		User:  policy.User{ID: p.User, Tenant: p.Tenant},
		Agent: policy.Agent{Name: p.Agent, Version: int64(p.AgentVersion)},
		Run: policy.Run{ID: p.RunID, Tainted: p.Run.Tainted, Steps: int64(p.Run.Steps), Currency: p.Run.Currency,
			Cost: float64(p.Run.CostMicros) / 1e6}}
	if pr != nil {
		in.User.Scopes, in.User.Groups = pr.Scopes, pr.Groups
	}
	in.Run.Calls = make(map[string]int64, len(p.Run.Calls)+1)
	for k, v := range p.Run.Calls {
		in.Run.Calls[k] = int64(v)
	}
	if set.UsesTotals() {
		in.Run.Totals = map[string]map[string]float64{}
		for _, c := range p.Run.Allowed {
			if c.Tool != p.Tool && !set.NamesTool(c.Tool) {
				continue
			}
			a, err := policy.ArgsFromJSON(c.Args)
			if err != nil {
				continue
			}
			t := in.Run.Totals[c.Tool]
			if t == nil {
				t = map[string]float64{}
				in.Run.Totals[c.Tool] = t
			}
			for k, v := range a {
				if f, ok := v.(float64); ok {
					t[k] += f
				}
			}
		}
	}
	return in, nil
}

// rateLimit checks every limit of the manifest; with charge, an allowed
// call is counted in the per-user and per-tenant windows: in the store
// (Options.Rates), which every process shares, or without one in this
// process's memory.
func (b *Broker) rateLimit(ctx context.Context, p Proposal, now time.Time, charge bool) (trace.Decision, bool) {
	m := p.Manifest
	if len(m.RateLimits) == 0 {
		return trace.Decision{}, true
	}
	var keys []string
	var limits []tool.RateLimit
	for _, rl := range m.RateLimits {
		switch rl.Scope {
		case tool.RateScopeRun:
			// Counted from the run's own history, which the log rebuilds.
			n := 0
			since := now.Add(-rl.Per)
			for _, c := range p.Run.Allowed {
				if c.Tool == m.Name && c.At.After(since) {
					n++
				}
			}
			if n >= rl.N {
				return b.deny(ControlRateLimit, "rate_limit:"+rl.String(), "rate limit of %s reached: %d calls in the last %s; try later or finish without it",
					m.Name+" "+rl.String(), n, rl.Per), false
			}
		case tool.RateScopeUser, tool.RateScopeTenant:
			who := p.Tenant
			if rl.Scope == tool.RateScopeUser {
				who += "\x00" + p.User
			}
			keys = append(keys, rl.Scope+"\x00"+who+"\x00"+m.Name+"\x00"+rl.String())
			limits = append(limits, rl)
		}
	}
	if len(keys) == 0 {
		return trace.Decision{}, true
	}
	if b.o.Rates != nil {
		ws := make([]store.RateWindow, len(keys))
		for i, k := range keys {
			ws[i] = store.RateWindow{Key: k, N: limits[i].N, Per: limits[i].Per}
		}
		i, err := b.o.Rates.TakeRate(ctx, ws, now, charge)
		if err != nil {
			// Fail closed: a limit that cannot be counted is not granted.
			b.o.Logger.Warn("rate limit: store", "tool", m.Name, "err", err)
			return b.deny(ControlRateLimit, "rate_limit:unavailable", "the rate limit of %s could not be checked now; try later or finish without it", m.Name), false
		}
		if i >= 0 {
			rl := limits[i]
			return b.deny(ControlRateLimit, "rate_limit:"+rl.String(), "rate limit of %s %s reached; try later or finish without it",
				m.Name, rl.String()), false
		}
		return trace.Decision{}, true
	}
	if i := b.limits.take(keys, limits, now, charge); i >= 0 {
		rl := limits[i]
		return b.deny(ControlRateLimit, "rate_limit:"+rl.String(), "rate limit of %s %s reached (counted in this process); try later or finish without it",
			m.Name, rl.String()), false
	}
	return trace.Decision{}, true
}
