package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// approvals lists pending approvals.
func (c *command) approvals(args []string) error {
	var cm common
	fs := c.flags("approvals", &cm)
	tenant := fs.String("tenant", "", "only this tenant's approvals")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	pend, err := p.Runs.PendingApprovals(c.ctx, *tenant)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "APPROVAL\tGROUP\tREQUESTER\tEXPIRES\tACTION")
	for _, a := range pend {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.Request.ApprovalID, a.Request.Group, a.Request.Requester,
			a.Request.ExpiresAt.Format(time.RFC3339), clean(a.Request.Description, 160))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range pend {
		approvalNotes(c.out, a.Request.ApprovalID, a.Request.Why, a.Request.Warnings)
	}
	return nil
}

// approvalNotes prints, under the table, why a request was made again and
// the warnings an approver must read before deciding.
func approvalNotes(w io.Writer, id, why string, warnings []string) {
	if why != "" {
		fmt.Fprintf(w, "%s: asked again: %s\n", id, clean(why, 300))
	}
	for _, x := range warnings {
		fmt.Fprintf(w, "%s: WARNING: %s\n", id, clean(x, 400))
	}
}

// decide implements approve, reject and edit.
func (c *command) decide(decision string, args []string) error {
	var cm common
	fs := c.flags(decision, &cm)
	as := fs.String("as", "", "the user deciding (required; must be in the approval's group and not the requester)")
	tenant := fs.String("tenant", "", "the decider's tenant (default: the run's)")
	comment := fs.String("comment", "", "a comment recorded with the decision and shown to the model")
	newArgs := new(string)
	if decision == "edit" {
		newArgs = fs.String("args", "", "the new arguments as a JSON object (required)")
	}
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *as == "" || (decision == "edit" && *newArgs == "") {
		return exitCode{2, "usage: " + usageLines[decision]}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	verb := map[string]string{"approve": "approve", "reject": "reject", "edit": "edit"}[decision]
	req := runs.DecideRequest{ApprovalID: pos[0], Tenant: *tenant, Decider: *as, Decision: verb, Comment: *comment}
	if *newArgs != "" {
		req.Args = json.RawMessage(*newArgs)
	}
	if err := p.Runs.Decide(c.ctx, req); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: %s recorded; a worker resumes the run\n", pos[0], verb)
	return nil
}

// signalRun implements cancel and message.
func (c *command) signalRun(kind string, args []string) error {
	var cm common
	fs := c.flags(kind, &cm)
	text := fs.String("text", "", "message: the text to add")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (kind == trace.SignalMessage && *text == "") {
		return exitCode{2, fmt.Sprintf("usage: agentplane %s RUN%s", kind, map[bool]string{true: " --text TEXT"}[kind == trace.SignalMessage])}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	var run *store.Run
	if kind == trace.SignalCancel {
		run, err = p.Runs.Cancel(c.ctx, runs.CancelRequest{RunID: pos[0]})
	} else {
		run, err = p.Runs.Message(c.ctx, runs.MessageRequest{RunID: pos[0], Text: *text})
	}
	if errors.Is(err, runs.ErrRunEnded) {
		return exitCode{1, err.Error()}
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s sent to %s; it takes effect at the run's next step boundary\n", kind, run.ID)
	return nil
}
