package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Outcome is what a run did, read from its log and its simulated world:
// the decisions the grader judges and the figures the metrics add up.
type Outcome struct {
	RunID  string
	Status string
	// Result is the run's final text or the reason it stopped.
	Result      string
	Steps       int
	CostMicros  int64
	Currency    string
	CostUnknown bool
	Calls       []Call
	Approvals   ApprovalCounts
	// StoppedBy is "budget" or "loop" when a bound or loop detection
	// ended the run.
	StoppedBy string
	// Diverged is where a replay first left its recording.
	Diverged *trace.Diverged
	// Counterfactual, in a replay, is the step of the first withheld call
	// the approval policy would have rejected while the model was shown a
	// mock: later withheld calls rest on a result it would not have had,
	// so they are graded as proposals but not played (0: none).
	Counterfactual int
	// Records are what the run left in its simulated world, by kind
	// (World.Records).
	Records map[string][]map[string]any
}

// Call is one tool call the model proposed.
type Call struct {
	Step, Index int
	Tool        string
	Args        json.RawMessage // canonical JSON
	// Control is the control that decided, when the broker did not simply
	// allow the call (approval, policy, authz, schema, replay, ...).
	Control     string
	SideEffects string
	// Status is how the call ended, as the model saw it.
	Status string
	// Replayed says, in a replay, where the result came from.
	Replayed string
	// Effective is how the call ended in the simulated world: Status,
	// except for a call a replay withheld (mock or denial), which is
	// judged by what it would have done (see Outcome.simulateWithheld).
	Effective string
	args      any
}

// ApprovalCounts counts approval requests and how they were decided.
type ApprovalCounts struct {
	Requested, Approved, Rejected, Edited, Expired int
}

// Overridden is how many requests a human did not approve as proposed.
func (a ApprovalCounts) Overridden() int { return a.Rejected + a.Edited }

// collect reads a run's outcome from its platform.
func collect(ctx context.Context, e *env, runID string) (*Outcome, error) {
	p := e.p
	run, err := p.Store.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	evs, err := p.Store.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, err
	}
	o := &Outcome{RunID: runID, Status: run.Status, Result: run.Result, Steps: run.Steps, CostMicros: run.CostMicros,
		Currency: run.Currency, CostUnknown: run.CostUnknown}
	attempts := map[[2]int]trace.ToolAttempt{}
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			if err := json.Unmarshal(ev.Payload, &a); err != nil {
				return nil, err
			}
			attempts[[2]int{ev.Step, a.Index}] = a
		case trace.EvToolResult:
			var r trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				return nil, err
			}
			a := attempts[[2]int{ev.Step, r.Index}]
			raw, err := trace.Load(ctx, p.Store.Blobs(run.Tenant), a.Args)
			if err != nil {
				return nil, err
			}
			args, err := decodeJSON(raw)
			if err != nil {
				args = nil
			}
			c := Call{Step: ev.Step, Index: r.Index, Tool: r.Tool, Args: raw, SideEffects: a.SideEffects, Status: r.Status,
				Replayed: r.Replayed, Effective: r.Status, args: args}
			if !a.Decision.Allowed {
				c.Control = a.Decision.Control
			}
			o.Calls = append(o.Calls, c)
		case trace.EvApprovalReq:
			o.Approvals.Requested++
		case trace.EvApprovalDec:
			var d trace.ApprovalDecided
			if err := json.Unmarshal(ev.Payload, &d); err != nil {
				return nil, err
			}
			o.Approvals.count(d.Outcome)
		case trace.EvBudget:
			o.StoppedBy = "budget"
		case trace.EvDiverged:
			var d trace.Diverged
			if err := json.Unmarshal(ev.Payload, &d); err != nil {
				return nil, err
			}
			o.Diverged = &d
		}
	}
	if o.StoppedBy == "" && run.Status == store.StatusFailed && strings.HasPrefix(run.Result, "loop detected") {
		o.StoppedBy = "loop"
	}
	return o, nil
}

func (a *ApprovalCounts) count(outcome string) {
	switch outcome {
	case trace.ApprovalApproved:
		a.Approved++
	case trace.ApprovalRejected:
		a.Rejected++
	case trace.ApprovalEdited:
		a.Edited++
	case trace.ApprovalExpired:
		a.Expired++
	}
}

// readWorld fills o.Records with what the run left in its world.
func readWorld(ctx context.Context, e *env, o *Outcome) error {
	recs, err := e.world.Records(ctx, o.RunID)
	if err != nil {
		return fmt.Errorf("world %s: records: %w", e.w.set.World.Name(), err)
	}
	o.Records = recs
	return nil
}

// simulateWithheld completes a replay's outcome. A replay never lets a
// call with side effects leave the recording: it serves the recorded
// result when the call matches, and otherwise a mock or a denial. To judge
// the candidate's decisions, the calls are played, after the run, against
// the replay's own simulated world (a throwaway copy, never a real system):
//
//   - a call answered from the recording with ok is played, so the world
//     holds what the original did;
//   - a withheld call (mock or denial) that the broker allowed is played:
//     it is what the candidate would have done;
//   - a withheld call the broker sent for approval is decided by the
//     set's approval policy, as a human would have been asked: counted as
//     requested, played if approved, counted as overridden if not;
//   - a call any other control refused is not played;
//   - once a withheld call has been rejected by the policy while the model
//     saw a mocked success, the withheld calls of later steps rest on
//     that mock: they still count as proposals (forbidden calls are caught)
//     but are not played (Outcome.Counterfactual).
//
// The recorded approvals of calls answered from the recording are counted
// as they were decided in the original. Effective statuses come from the
// simulated world's answers.
func simulateWithheld(ctx context.Context, e *env, o *Outcome, origID string, pol *ApprovalPolicy, tenant, user string) error {
	orig := map[[2]int]trace.ApprovalDecided{} // (step, index) -> the original's approval decision
	if origID != "" {
		evs, err := e.p.Store.Events(ctx, origID, 0, 0)
		if err != nil {
			return err
		}
		for _, ev := range evs {
			if ev.Type != trace.EvApprovalDec {
				continue
			}
			var d trace.ApprovalDecided
			if json.Unmarshal(ev.Payload, &d) != nil {
				continue
			}
			if _, step, index, err := trace.ParseApprovalID(d.ApprovalID); err == nil {
				orig[[2]int{step, index}] = d
			}
		}
	}
	for i := range o.Calls {
		c := &o.Calls[i]
		if c.SideEffects == "" || c.SideEffects == tool.SideEffectsNone {
			continue
		}
		play, args := false, c.Args
		switch c.Replayed {
		case trace.ReplayedRecorded:
			if d, ok := orig[[2]int{c.Step, c.Index}]; ok {
				o.Approvals.Requested++
				o.Approvals.count(d.Outcome)
				if d.EditedArgs != nil {
					args = json.RawMessage(*d.EditedArgs) // what ran in the original
				}
			}
			play = c.Status == trace.StatusOK
		case trace.ReplayedMock, trace.ReplayedDenied:
			switch {
			case o.Counterfactual > 0 && c.Step > o.Counterfactual:
				c.Effective = "not played"
			case c.Control == "" || c.Control == "replay":
				play = true
			case c.Control == broker.ControlApproval:
				o.Approvals.Requested++
				dec, _ := pol.Decide(c.Tool, c.args)
				if dec == "approve" {
					o.Approvals.Approved++
					play = true
				} else {
					o.Approvals.Rejected++
					c.Effective = trace.StatusDenied
					if c.Replayed == trace.ReplayedMock {
						o.Counterfactual = c.Step
					}
				}
			default:
				c.Effective = trace.StatusDenied
			}
		}
		if !play {
			continue
		}
		fn, ok := e.p.Catalog.Lookup(c.Tool)
		if !ok {
			return fmt.Errorf("replay of %s: tool %s has no simulator", origID, c.Tool)
		}
		res, err := fn(ctx, tool.Call{Tool: c.Tool, Args: args, IdempotencyKey: fmt.Sprintf("%s:%d:%d", o.RunID, c.Step, c.Index),
			RunID: o.RunID, Tenant: tenant, User: user})
		if err != nil {
			return fmt.Errorf("simulate %s: %w", c.Tool, err)
		}
		c.Effective = trace.StatusOK
		if res.IsError {
			c.Effective = trace.StatusError
		}
	}
	return nil
}
