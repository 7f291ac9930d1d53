package api

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

func toApproval(run *store.Run, at time.Time, q *trace.ApprovalRequested) Approval {
	a := Approval{ID: q.ApprovalID, RunID: run.ID, Tool: q.Tool, ArgsHash: q.ArgsHash, Group: q.Group,
		Requester: q.Requester, Description: q.Description, RequestedAt: at, ExpiresAt: q.ExpiresAt, Status: "pending",
		Warnings: q.Warnings, Groups: q.Groups, Round: q.Round, Previous: q.Previous, Why: q.Why}
	if q.Args.IsBlob() {
		a.ArgsPreview = q.Args.Preview
	} else if json.Valid([]byte(q.Args.Text)) {
		a.Args = json.RawMessage(q.Args.Text)
	}
	return a
}

// approvalsIn lists the approvals of a run's log in the order requested.
func approvalsIn(run *store.Run, evs []store.Event) []Approval {
	var out []Approval
	idx := map[string]int{}
	for i := range evs {
		ev := &evs[i]
		switch ev.Type {
		case trace.EvApprovalReq:
			var q trace.ApprovalRequested
			if json.Unmarshal(ev.Payload, &q) == nil {
				idx[q.ApprovalID] = len(out)
				out = append(out, toApproval(run, ev.At, &q))
			}
		case trace.EvApprovalDec:
			var d trace.ApprovalDecided
			if json.Unmarshal(ev.Payload, &d) == nil {
				if j, ok := idx[d.ApprovalID]; ok {
					at := ev.At
					out[j].Status, out[j].Decider, out[j].Comment, out[j].DecidedAt = d.Outcome, d.Decider, d.Comment, &at
					if d.EditedArgs != nil && json.Valid([]byte(*d.EditedArgs)) {
						out[j].EditedArgs = json.RawMessage(*d.EditedArgs)
					}
				}
			}
		}
	}
	if store.Terminal(run.Status) {
		for i := range out {
			if out[i].Status == "pending" {
				out[i].Status = "withdrawn"
			}
		}
	}
	return out
}

// approvalOf finds the caller's approval and its run; another tenant's is
// not found, and so is an id that does not parse.
func (s *Server) approvalOf(ctx context.Context, p *Principal, id string) (*store.Run, *Approval, error) {
	runID, _, _, err := trace.ParseApprovalID(id)
	if err != nil {
		return nil, nil, notFound("approval")
	}
	run, err := s.runOf(ctx, p, runID)
	if err != nil {
		return nil, nil, notFound("approval")
	}
	evs, err := s.st.Events(ctx, run.ID, 0, 0)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range approvalsIn(run, evs) {
		if a.ID == id {
			return run, &a, nil
		}
	}
	return nil, nil, notFound("approval")
}

func handleGetApproval(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	_, a, err := s.approvalOf(r.Context(), p, params["approval_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func handleListApprovals(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	decidable := false
	switch r.URL.Query().Get("decidable") {
	case "", "false":
	case "true":
		decidable = true
	default:
		s.fail(w, r, badRequest("decidable must be true or false"))
		return
	}
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.ListApprovals(r.Context(), p, decidable, safe)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// ListApprovals lists the approvals pending in p's tenant's runs, as GET
// /v1/approvals answers them: with decidable, only those of a group p's
// user belongs to (the inbox); with safe, model text neutralised for
// display.
func (s *Server) ListApprovals(ctx context.Context, p *Principal, decidable, safe bool) (ApprovalList, error) {
	pend, err := s.p.Runs.PendingApprovals(ctx, p.Tenant)
	if err != nil {
		return ApprovalList{}, err
	}
	var pol *render.Policy
	if safe {
		if pol, err = s.renderPolicy(ctx, p); err != nil {
			return ApprovalList{}, err
		}
	}
	out := ApprovalList{Approvals: []Approval{}}
	for i := range pend {
		if decidable {
			// The inbox: only requests of a group the caller belongs to.
			if s.p.Directory == nil {
				break
			}
			in, err := s.p.Directory.InGroup(ctx, p.Tenant, p.User, pend[i].Request.Group)
			if err != nil {
				return ApprovalList{}, err
			}
			if !in {
				continue
			}
		}
		// The request event's time is not in PendingApproval; the expiry
		// and the request itself are what a decider needs.
		a := toApproval(pend[i].Run, pend[i].RequestedAt, &pend[i].Request)
		if safe {
			// For display: the description and arguments hold model text.
			a.Description, _ = pol.Text(a.Description)
			a.ArgsPreview, _ = pol.Text(a.ArgsPreview)
			if len(a.Args) > 0 {
				b, _ := pol.JSON(a.Args)
				a.Args = json.RawMessage(b)
			}
		}
		out.Approvals = append(out.Approvals, a)
	}
	return out, nil
}

func handleDecide(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req DecideRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.Decide(r.Context(), p, params["approval_id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

// Decide decides approval id of p's tenant as p's user, as POST
// /v1/approvals/{approval_id}:decide does: the approval must be pending
// and not expired, and runs.Service.Decide checks that the decider is in
// its group and did not start the run.
func (s *Server) Decide(ctx context.Context, p *Principal, id string, req DecideRequest) (DecisionAccepted, error) {
	switch req.Decision {
	case "approve", "reject":
		if len(req.Args) > 0 {
			return DecisionAccepted{}, badRequest("args go with edit only")
		}
	case "edit":
		var obj map[string]any
		if json.Unmarshal(req.Args, &obj) != nil || obj == nil {
			return DecisionAccepted{}, badRequest("edit needs args: the new arguments as a JSON object")
		}
	default:
		return DecisionAccepted{}, badRequest("decision must be approve, reject or edit")
	}
	if len(req.Comment) > 4096 {
		return DecisionAccepted{}, badRequest("comment is longer than 4096 bytes")
	}
	run, a, err := s.approvalOf(ctx, p, id)
	if err != nil {
		return DecisionAccepted{}, err
	}
	if a.Status != "pending" {
		return DecisionAccepted{}, &httpError{http.StatusConflict, "approval_not_pending", "approval " + id + " is " + a.Status}
	}
	if !s.clock().Before(a.ExpiresAt) {
		return DecisionAccepted{}, &httpError{http.StatusConflict, "approval_expired", "approval " + id + " expired at " + a.ExpiresAt.Format(time.RFC3339)}
	}
	if err := s.p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: id, Tenant: p.Tenant, Decider: p.User,
		Decision: req.Decision, Args: req.Args, Comment: req.Comment}); err != nil {
		return DecisionAccepted{}, err
	}
	return DecisionAccepted{ApprovalID: id, RunID: run.ID, Decision: req.Decision, Decider: p.User}, nil
}
