package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/trace"
)

// Approvers answers whether a user belongs to a group of a tenant. The loop
// asks it, inside the recorded approval_decided activity, which of the
// groups a call needs each decider covers; the approval API checks the
// group of the request, this checks every group the call needs.
type Approvers interface {
	InGroup(ctx context.Context, tenant, user, group string) (bool, error)
}

// maxApprovalRounds bounds the requests one call can make (edits that need
// another group, groups not yet covered). Past it the call is refused.
const maxApprovalRounds = 8

// approvalResult is how a wait for approval ended.
type approvalResult struct {
	decision trace.Decision // what the call may now do
	args     []byte         // the arguments to run with (edited ones after an edit)
	stop     string         // non-empty: end the run
	// notes are what the model is told about the decisions beyond the
	// result: edits (old and new arguments), approvers' comments.
	notes []string
}

// approvalNeed is what one round of approval asks for.
type approvalNeed struct {
	need     trace.ApprovalNeed
	args     []byte         // canonical
	content  *trace.Content // args as stored, once they are
	argsHash string
}

func (n *approvalNeed) groups() []string {
	if len(n.need.Groups) > 0 {
		return n.need.Groups
	}
	return []string{n.need.Group}
}

// approve asks for approval until the call's approvers cover every group it
// needs, or it is rejected, expires or is cancelled. An edit is a new call:
// the broker decides it again with every control; if it then needs a group
// its editor is not in (or its editor started the run), the edited call
// goes to that group as a new request and the run waits again. Waiting is
// the engine's (engine.Env.Await): the loop only says until when.
func (l *Loop) approve(ctx context.Context, st *state, step, index int, call model.Part, mhash string,
	attempt *trace.ToolAttempt, aev engine.Event, args []byte) (approvalResult, error) {
	cur := approvalNeed{need: *attempt.Decision.Approval, args: args, content: &attempt.Args, argsHash: attempt.ArgsHash}
	covered := map[string]bool{}
	var res approvalResult
	var deciders []string
	since, prev, why := aev.At, "", ""
	for round := 1; ; round++ {
		if round > maxApprovalRounds {
			res.decision = trace.Decision{Control: broker.ControlApproval,
				Reason: fmt.Sprintf("the call was sent for approval %d times without every group it needs approving it; treat it as rejected and do not retry it", maxApprovalRounds)}
			return res, nil
		}
		ask := ""
		for _, g := range cur.groups() {
			if !covered[g] {
				ask = g
				break
			}
		}
		req, reqEv, err := l.requestApproval(ctx, st, step, index, round, call, &cur, ask, since, prev, why)
		if err != nil {
			return approvalResult{}, err
		}
		a, stop, err := l.awaitDecision(ctx, st, step, req)
		if err != nil {
			return approvalResult{}, err
		}
		if stop != "" {
			return approvalResult{stop: stop}, nil
		}
		d, dev, err := l.recordDecision(ctx, st, step, index, call, mhash, req, a, &cur)
		st.waitedMS += (st.env.Now().UnixMicro() - reqEv.At.UnixMicro()) / 1000
		if err != nil {
			return approvalResult{}, err
		}
		if d.Checked && d.Comment != "" {
			// The model reads the comment (in a note or the refusal): text
			// the platform did not write.
			if err := l.taint(ctx, st, step, trace.Taint{Source: trace.TaintApprovalComment, Seq: dev.Seq,
				Detail: "a comment by approver " + d.Decider}); err != nil {
				return approvalResult{}, err
			}
		}
		switch d.Outcome {
		case trace.ApprovalApproved:
			deciders = append(deciders, d.Decider)
			if d.Checked && d.Comment != "" {
				res.notes = append(res.notes, fmt.Sprintf("%s approved it, commenting: %q", d.Decider, d.Comment))
			}
			if !d.Checked { // an older log: the API's check of the request's group stood alone
				res.decision, res.args = trace.Decision{Allowed: true, Control: broker.ControlApproval, Reason: "approved by " + d.Decider}, cur.args
				return res, nil
			}
			for _, g := range d.Covers {
				covered[g] = true
			}
			if next := uncovered(cur.groups(), covered); next == "" {
				res.decision, res.args = trace.Decision{Allowed: true, Control: broker.ControlApproval, Reason: "approved by " + strings.Join(deciders, ", ")}, cur.args
				return res, nil
			} else if !slices.Contains(d.Covers, ask) {
				why = fmt.Sprintf("%s approved, but may not approve for group %s (not a member, or the run's own user)", d.Decider, ask)
			} else {
				why = fmt.Sprintf("approved by %s for group %s; the call also needs group %s", d.Decider, ask, next)
			}
		case trace.ApprovalEdited:
			if d.EditedArgs == nil || d.Recheck == nil {
				return approvalResult{}, fmt.Errorf("approval_decided %s: edited without arguments", d.ApprovalID)
			}
			edited := []byte(*d.EditedArgs)
			note := fmt.Sprintf("%s edited the arguments before deciding (%s)", d.Decider, trace.EditSummary(cur.args, edited))
			if d.Comment != "" {
				note += fmt.Sprintf(", commenting: %q", d.Comment)
			}
			if d.Checked { // older logs told the model nothing
				res.notes = append(res.notes, note)
			}
			rc := *d.Recheck
			if !d.Checked || rc.Allowed || rc.Control != broker.ControlApproval || rc.Approval == nil {
				// Runs as decided again (allowed: it needs no approval), or is
				// refused by the control that refused it. Older logs recorded
				// the edit's approval as the decision itself.
				if rc.Allowed && d.Checked {
					rc = trace.Decision{Allowed: true, Control: broker.ControlApproval, Rule: rc.Rule,
						Reason: "edited by " + d.Decider + "; the edited call needs no approval"}
				}
				res.decision, res.args = rc, edited
				return res, nil
			}
			sum := sha256.Sum256(edited)
			cur = approvalNeed{need: *rc.Approval, args: edited, argsHash: hex.EncodeToString(sum[:])}
			covered = map[string]bool{}
			for _, g := range d.Covers {
				covered[g] = true
			}
			deciders = []string{d.Decider}
			next := uncovered(cur.groups(), covered)
			if next == "" {
				res.decision, res.args = trace.Decision{Allowed: true, Control: broker.ControlApproval, Rule: rc.Approval.Rule,
					Reason: "edited and approved by " + d.Decider}, edited
				return res, nil
			}
			if d.Decider == st.run.User {
				why = fmt.Sprintf("edited by %s, who started the run and may not approve it; the edited call needs group %s", d.Decider, next)
			} else {
				why = fmt.Sprintf("edited by %s; the edited call needs group %s, which %s is not in", d.Decider, next, d.Decider)
			}
		case trace.ApprovalExpired:
			res.decision = trace.Decision{Control: broker.ControlApproval,
				Reason: "the approval request expired without a decision; treat the action as rejected and do not retry it"}
			return res, nil
		default:
			reason := "rejected by " + d.Decider
			if d.Comment != "" {
				reason += ": " + d.Comment
			}
			res.decision, res.args = trace.Decision{Control: broker.ControlApproval, Reason: reason}, cur.args
			return res, nil
		}
		since, prev = dev.At, req.ApprovalID
	}
}

func uncovered(groups []string, covered map[string]bool) string {
	for _, g := range groups {
		if !covered[g] {
			return g
		}
	}
	return ""
}

// requestApproval records (once) the round-th request for the call.
func (l *Loop) requestApproval(ctx context.Context, st *state, step, index, round int, call model.Part, cur *approvalNeed, ask string,
	since time.Time, prev, why string) (*trace.ApprovalRequested, engine.Event, error) {
	expires := time.Duration(cur.need.ExpiresMS) * time.Millisecond
	if expires <= 0 {
		expires = broker.DefaultApprovalExpiry
	}
	q := trace.ApprovalRequested{ApprovalID: trace.ApprovalRoundID(st.run.ID, step, index, round), CallID: call.ToolUseID, Index: index, Tool: call.Name,
		ArgsHash: cur.argsHash, Group: ask, Requester: st.run.User,
		ExpiresAt: since.Add(expires), Description: describeCall(call.Name, cur.args), Rule: cur.need.Rule,
		Warnings: cur.need.Warnings, Previous: prev, Why: why}
	if gs := cur.groups(); len(gs) > 1 {
		q.Groups = gs
	}
	if round > 1 {
		q.Round = round
	}
	var reqEv engine.Event
	var err error
	if cur.content != nil {
		q.Args = *cur.content
		reqEv, err = st.env.Record(ctx, trace.EvApprovalReq, step, engine.Buffered, q)
	} else {
		// Edited arguments are not stored yet: storing them is an effect.
		reqEv, err = st.env.Execute(ctx, engine.Call{Activity: ActApprovalRequest, Event: trace.EvApprovalReq, Step: step, Durability: engine.Buffered,
			Input: ApprovalRequestInput{Tenant: st.run.Tenant, Request: q, Args: cur.args}})
	}
	if err != nil {
		return nil, engine.Event{}, err
	}
	var req trace.ApprovalRequested
	if err := json.Unmarshal(reqEv.Payload, &req); err != nil {
		return nil, engine.Event{}, err
	}
	return &req, reqEv, nil
}

// awaitDecision waits for a decision on req, its expiry, or a cancel. A
// nil signal with no stop means the request expired (or an older log
// records the decision without the signal before it).
func (l *Loop) awaitDecision(ctx context.Context, st *state, step int, req *trace.ApprovalRequested) (*trace.ApprovalSignal, string, error) {
	for {
		sigs, err := st.env.Await(ctx, step, req.ExpiresAt)
		if err != nil {
			return nil, "", err
		}
		var decided *trace.ApprovalSignal
		expired, cancelled := false, false
		for _, ev := range sigs {
			var sg trace.Signal
			if json.Unmarshal(ev.Payload, &sg) != nil {
				continue
			}
			switch sg.Kind {
			case trace.SignalMessage:
				if err := st.add(ev); err != nil { // held until the next step
					return nil, "", err
				}
			case trace.SignalCancel:
				cancelled = true
			case engine.SignalTimer:
				if !ev.At.Before(req.ExpiresAt) {
					expired = true
				}
			case trace.SignalApproval:
				var a trace.ApprovalSignal
				if json.Unmarshal(sg.Payload, &a) == nil && decided == nil && a.ApprovalID == req.ApprovalID && a.ArgsHash == req.ArgsHash &&
					(a.Decision == "approve" || a.Decision == "reject" || a.Decision == "edit") {
					decided = &a
				}
			}
		}
		if err := l.taintMessages(ctx, st, step, sigs); err != nil {
			return nil, "", err
		}
		if cancelled {
			return nil, stopCancelled, nil
		}
		if decided != nil || expired || len(sigs) == 0 {
			return decided, "", nil
		}
	}
}

// recordDecision records the outcome of one request: an expiry here, a
// decision through the approval activity.
func (l *Loop) recordDecision(ctx context.Context, st *state, step, index int, call model.Part, mhash string,
	req *trace.ApprovalRequested, a *trace.ApprovalSignal, cur *approvalNeed) (*trace.ApprovalDecided, engine.Event, error) {
	var ev engine.Event
	var err error
	if a == nil {
		ev, err = st.env.Record(ctx, trace.EvApprovalDec, step, engine.Durable, trace.ApprovalDecided{ApprovalID: req.ApprovalID, Outcome: trace.ApprovalExpired})
	} else {
		ev, err = st.env.Execute(ctx, engine.Call{Activity: ActApprovalDecision, Event: trace.EvApprovalDec, Step: step, Durability: engine.Durable,
			Input: ApprovalDecisionInput{Run: st.run, Step: step, Index: index, Tool: call.Name, Manifest: mhash, ApprovalID: req.ApprovalID,
				Signal: *a, Args: cur.args, Groups: cur.groups(), State: st.runState()}})
	}
	if err != nil {
		return nil, engine.Event{}, err
	}
	var d trace.ApprovalDecided
	if err := json.Unmarshal(ev.Payload, &d); err != nil {
		return nil, engine.Event{}, err
	}
	return &d, ev, nil
}

// describeCall states a call in plain words for the approver.
func describeCall(name string, args []byte) string {
	var m map[string]any
	if json.Unmarshal(args, &m) != nil {
		return fmt.Sprintf("Call %s", name)
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v, _ := json.Marshal(m[k])
		sv := string(v)
		if len(sv) > 200 {
			sv = sv[:200] + "…"
		}
		parts = append(parts, k+"="+sv)
	}
	return fmt.Sprintf("Call %s with %s", name, strings.Join(parts, ", "))
}
