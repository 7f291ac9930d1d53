package api

import (
	"encoding/json"
	"net/http"
	"time"

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
func (s *Server) approvalOf(r *http.Request, p *Principal, id string) (*store.Run, []store.Event, *Approval, error) {
	runID, _, _, err := trace.ParseApprovalID(id)
	if err != nil {
		return nil, nil, nil, notFound("approval")
	}
	run, err := s.runOf(r.Context(), p, runID)
	if err != nil {
		return nil, nil, nil, notFound("approval")
	}
	evs, err := s.st.Events(r.Context(), run.ID, 0, 0)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, a := range approvalsIn(run, evs) {
		if a.ID == id {
			return run, evs, &a, nil
		}
	}
	return nil, nil, nil, notFound("approval")
}

func handleGetApproval(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	_, _, a, err := s.approvalOf(r, p, params["approval_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func handleListApprovals(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	pend, err := s.p.Runs.PendingApprovals(r.Context(), p.Tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := ApprovalList{Approvals: []Approval{}}
	for i := range pend {
		// The request event's time is not in PendingApproval; the expiry
		// and the request itself are what a decider needs.
		out.Approvals = append(out.Approvals, toApproval(pend[i].Run, pend[i].RequestedAt, &pend[i].Request))
	}
	writeJSON(w, http.StatusOK, out)
}

func handleDecide(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req DecideRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	switch req.Decision {
	case "approve", "reject":
		if len(req.Args) > 0 {
			s.fail(w, r, badRequest("args go with edit only"))
			return
		}
	case "edit":
		var obj map[string]any
		if json.Unmarshal(req.Args, &obj) != nil || obj == nil {
			s.fail(w, r, badRequest("edit needs args: the new arguments as a JSON object"))
			return
		}
	default:
		s.fail(w, r, badRequest("decision must be approve, reject or edit"))
		return
	}
	if len(req.Comment) > 4096 {
		s.fail(w, r, badRequest("comment is longer than 4096 bytes"))
		return
	}
	id := params["approval_id"]
	run, evs, a, err := s.approvalOf(r, p, id)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	unlock := s.decides.lock(run.ID)
	defer unlock()
	if a.Status != "pending" {
		s.fail(w, r, &httpError{http.StatusConflict, "approval_not_pending", "approval " + id + " is " + a.Status})
		return
	}
	if !s.clock().Before(a.ExpiresAt) {
		s.fail(w, r, &httpError{http.StatusConflict, "approval_expired", "approval " + id + " expired at " + a.ExpiresAt.Format(time.RFC3339)})
		return
	}
	queued, err := s.decisionQueued(r, run.ID, evs, a)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if queued {
		s.fail(w, r, &httpError{http.StatusConflict, "approval_not_pending", "a decision on approval " + id + " is already on its way to the run"})
		return
	}
	if err := s.p.Runs.Decide(r.Context(), runs.DecideRequest{ApprovalID: id, Tenant: p.Tenant, Decider: p.User,
		Decision: req.Decision, Args: req.Args, Comment: req.Comment}); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, DecisionAccepted{ApprovalID: id, RunID: run.ID, Decision: req.Decision, Decider: p.User})
}

// decisionQueued reports whether a decision on approval id is stored and
// not yet acted on: a pending signal, or one the log records without the
// approval_decided that follows it.
func (s *Server) decisionQueued(r *http.Request, runID string, evs []store.Event, ap *Approval) (bool, error) {
	names := func(kind string, payload []byte) bool {
		if kind != trace.SignalApproval {
			return false
		}
		var a trace.ApprovalSignal
		return json.Unmarshal(payload, &a) == nil && a.ApprovalID == ap.ID && a.ArgsHash == ap.ArgsHash
	}
	for i := range evs {
		if evs[i].Type == trace.EvSignal {
			var sg trace.Signal
			if json.Unmarshal(evs[i].Payload, &sg) == nil && names(sg.Kind, sg.Payload) {
				return true, nil
			}
		}
	}
	sigs, err := s.st.PendingSignals(r.Context(), runID)
	if err != nil {
		return false, err
	}
	for _, sg := range sigs {
		if names(sg.Kind, sg.Payload) {
			return true, nil
		}
	}
	return false, nil
}
