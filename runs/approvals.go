package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// PendingApproval is an approval request still waiting for a decision.
type PendingApproval struct {
	Run     *store.Run
	Request trace.ApprovalRequested
	// RequestedAt is the time of the approval_requested event.
	RequestedAt time.Time
}

// PendingApprovals lists the approvals waiting in runs of tenant ("" = all).
// They are read from the runs' logs: the log is the only record.
func (s *Service) PendingApprovals(ctx context.Context, tenant string) ([]PendingApproval, error) {
	waiting, err := s.o.Store.ListRuns(ctx, store.RunFilter{Tenant: tenant, Status: store.StatusWaiting})
	if err != nil {
		return nil, err
	}
	var out []PendingApproval
	for _, r := range waiting {
		reqs, err := s.pendingIn(ctx, r)
		if err != nil {
			return nil, err
		}
		out = append(out, reqs...)
	}
	return out, nil
}

// pendingIn lists the approvals of run's log that have no decision yet.
func (s *Service) pendingIn(ctx context.Context, run *store.Run) ([]PendingApproval, error) {
	evs, err := s.o.Store.Events(ctx, run.ID, 0, 0)
	if err != nil {
		return nil, err
	}
	open := map[string]PendingApproval{}
	var order []string
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvApprovalReq:
			var q trace.ApprovalRequested
			if json.Unmarshal(ev.Payload, &q) == nil {
				open[q.ApprovalID] = PendingApproval{Run: run, Request: q, RequestedAt: ev.At}
				order = append(order, q.ApprovalID)
			}
		case trace.EvApprovalDec:
			var d trace.ApprovalDecided
			if json.Unmarshal(ev.Payload, &d) == nil {
				delete(open, d.ApprovalID)
			}
		}
	}
	var out []PendingApproval
	for _, id := range order {
		if q, ok := open[id]; ok {
			out = append(out, q)
		}
	}
	return out, nil
}

// maxComment bounds an approver's comment and a cancel's reason.
const maxComment = 4096

// DecideRequest is a human's decision on an approval.
type DecideRequest struct {
	ApprovalID string
	// Tenant scopes the lookup: another tenant's approval is not found.
	Tenant   string
	Decider  string
	Decision string // approve | reject | edit
	Args     json.RawMessage
	Comment  string
}

// Decide checks a decision and signals it to the run: the approval must be
// pending in a run of the caller's tenant, the decider must belong to its
// group and must not be the run's requester, and edited arguments must be
// a JSON object. The loop binds the decision to the request's tool and
// arguments hash.
func (s *Service) Decide(ctx context.Context, d DecideRequest) error {
	runID, _, _, err := trace.ParseApprovalID(d.ApprovalID)
	if err != nil {
		return fmt.Errorf("%w: %v", store.ErrNotFound, err)
	}
	run, err := s.run(ctx, runID, d.Tenant)
	if err != nil {
		return fmt.Errorf("approval %s: %w", d.ApprovalID, store.ErrNotFound)
	}
	pending, err := s.pendingIn(ctx, run)
	if err != nil {
		return err
	}
	var req *trace.ApprovalRequested
	for i := range pending {
		if pending[i].Request.ApprovalID == d.ApprovalID {
			req = &pending[i].Request
		}
	}
	if req == nil {
		return fmt.Errorf("approval %s: %w", d.ApprovalID, ErrApprovalNotPending)
	}
	switch d.Decision {
	case "approve", "reject":
		if len(d.Args) > 0 {
			return fmt.Errorf("approval %s: arguments are only accepted with edit", d.ApprovalID)
		}
	case "edit":
		c, err := jsoncanon.Canonicalize(d.Args)
		if err != nil || len(c) == 0 || c[0] != '{' {
			return fmt.Errorf("approval %s: edit needs the new arguments as a JSON object", d.ApprovalID)
		}
		d.Args = c
	default:
		return fmt.Errorf("approval %s: decision must be approve, reject or edit, not %q", d.ApprovalID, d.Decision)
	}
	if d.Decider == "" {
		return fmt.Errorf("approval %s: %w: no decider", d.ApprovalID, ErrNotApprover)
	}
	if d.Decider == run.User {
		return fmt.Errorf("approval %s: %w: %s started the run and cannot approve its own request", d.ApprovalID, ErrNotApprover, d.Decider)
	}
	if s.o.Approvers == nil {
		return fmt.Errorf("approval %s: %w: no user directory is configured to check group %s", d.ApprovalID, ErrNotApprover, req.Group)
	}
	ok, err := s.o.Approvers.InGroup(ctx, run.Tenant, d.Decider, req.Group)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("approval %s: %w: %s is not in group %s", d.ApprovalID, ErrNotApprover, d.Decider, req.Group)
	}
	if len(d.Comment) > maxComment {
		return fmt.Errorf("approval %s: the comment is longer than %d bytes", d.ApprovalID, maxComment)
	}
	// A secret pasted into the comment is recorded as its placeholder,
	// like the text of a task or a message.
	comment, _ := trace.UserText(d.Comment)
	payload, err := json.Marshal(trace.ApprovalSignal{ApprovalID: d.ApprovalID, Decision: d.Decision, ArgsHash: req.ArgsHash,
		Args: d.Args, Decider: d.Decider, Comment: comment})
	if err != nil {
		return err
	}
	// Keyed by the request, the decision is stored at most once: of
	// decisions racing through any number of processes, the engine keeps
	// the first and refuses the others, whether or not the run has read it.
	err = s.o.Engine.Signal(ctx, runID, engine.Signal{Kind: trace.SignalApproval, Payload: payload, Key: approvalKey(req)})
	if errors.Is(err, engine.ErrDuplicateSignal) {
		return fmt.Errorf("approval %s: %w: a decision on it is already on its way to the run", d.ApprovalID, ErrApprovalNotPending)
	}
	return err
}

// approvalKey names one approval request among a run's signals: its id and
// the hash of the arguments it asked about.
func approvalKey(q *trace.ApprovalRequested) string {
	return "approval:" + q.ApprovalID + ":" + q.ArgsHash
}
