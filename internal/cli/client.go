package cli

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/apiclient"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Client mode: with AGENTPLANE_SERVER set (and AGENTPLANE_TOKEN holding an
// API key or a JWT), these commands talk to that server over HTTP instead
// of opening a data directory; the server knows who the caller is.
const (
	EnvServer = "AGENTPLANE_SERVER"
	EnvToken  = "AGENTPLANE_TOKEN"
)

var remoteCommands = map[string]bool{"run": true, "runs": true, "trace": true, "approvals": true,
	"approve": true, "reject": true, "edit": true, "cancel": true, "message": true}

// remoteCommand returns cmd when it is to run as an HTTP client, and a
// value no command has otherwise (it is a case of Main's switch).
func remoteCommand(cmd string) string {
	if os.Getenv(EnvServer) != "" && remoteCommands[cmd] {
		return cmd
	}
	return "\x00local"
}

func (c *command) remote(cmd string, args []string) error {
	cl := apiclient.New(os.Getenv(EnvServer), os.Getenv(EnvToken))
	switch cmd {
	case "run":
		return c.remoteRun(cl, args)
	case "runs":
		return c.remoteRuns(cl, args)
	case "trace":
		return c.remoteTrace(cl, args)
	case "approvals":
		return c.remoteApprovals(cl, args)
	case "approve", "reject", "edit":
		return c.remoteDecide(cl, cmd, args)
	case "cancel", "message":
		return c.remoteSignal(cl, cmd, args)
	}
	return exitCode{2, fmt.Sprintf("%s is not available with %s set", cmd, EnvServer)}
}

// remoteFlags is a flag set for client mode; --data and the other local
// flags do not apply.
func (c *command) remoteFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet("agentplane "+name+" (client of "+os.Getenv(EnvServer)+")", flag.ContinueOnError)
	fs.SetOutput(c.err)
	return fs
}

// fromAPI turns an event of the API into the store's form, so that the
// CLI's printers and trace.Verify read it as they read a local log.
func fromAPI(ev apiclient.Event) (store.Event, error) {
	out := store.Event{RunID: ev.RunID, Seq: ev.Seq, Type: ev.Type, Step: ev.Step, At: ev.At, Payload: []byte(ev.Payload)}
	for _, h := range []struct {
		s   string
		dst *[32]byte
	}{{ev.PrevHash, &out.PrevHash}, {ev.Hash, &out.Hash}} {
		b, err := hex.DecodeString(h.s)
		if err != nil || len(b) != 32 {
			return out, fmt.Errorf("event %d: bad hash %q", ev.Seq, h.s)
		}
		copy(h.dst[:], b)
	}
	return out, nil
}

func (c *command) remoteRun(cl *apiclient.Client, args []string) error {
	fs := c.remoteFlags("run")
	task := fs.String("task", "", "the task for the agent (required)")
	version := fs.String("version", "", "version number or alias (default prod, else latest)")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	detach := fs.Bool("detach", false, "start an async run, print its id and return")
	key := fs.String("idempotency-key", "", "makes a retried command return the same run")
	binds := bindFlag{}
	fs.Var(binds, "bind", "NAME=VALUE: every tool call naming argument NAME must name VALUE (repeatable)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *task == "" {
		return exitCode{2, "usage: agentplane run AGENT --task TEXT [--version V] [--bind NAME=VALUE] [--json] [--detach]"}
	}
	req := apiclient.CreateRunRequest{Agent: pos[0], Input: *task, Bindings: binds.orNil()}
	if _, err := strconv.Atoi(*version); err == nil {
		req.Version = json.RawMessage(*version)
	} else if *version != "" {
		req.Version, _ = json.Marshal(*version)
	}
	if *detach {
		run, _, err := cl.CreateRun(c.ctx, req, *key)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.out, run.ID)
		return nil
	}
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	tl := &timeline{w: c.out, pol: c.remotePolicy(cl)}
	var seen []store.Event
	end, err := cl.StreamRun(ctx, req, *key, func(ev apiclient.Event) error {
		if *asJSON {
			b, _ := json.Marshal(ev)
			fmt.Fprintln(c.out, string(b))
			return nil
		}
		sev, err := fromAPI(ev)
		if err != nil {
			return err
		}
		tl.event(&sev)
		seen = append(seen, sev)
		if ev.Type == trace.EvApprovalReq {
			var q trace.ApprovalRequested
			_ = json.Unmarshal(ev.Payload, &q)
			fmt.Fprintf(c.out, "  waits for approval %s (group %s); decide: agentplane approve|reject %s\n", q.ApprovalID, q.Group, q.ApprovalID)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if !*asJSON {
		writeFlags(c.out, platform.OutputFlags(tl.pol, seen))
		fmt.Fprintf(c.out, "\ninspect: agentplane trace %s   verify: agentplane trace verify %s\n", end.RunID, end.RunID)
	}
	if end.Status != store.StatusCompleted {
		return exitCode{1, fmt.Sprintf("run %s ended %s", end.RunID, end.Status)}
	}
	return nil
}

func (c *command) remoteRuns(cl *apiclient.Client, args []string) error {
	fs := c.remoteFlags("runs")
	status := fs.String("status", "", "only runs with this status")
	promptHash := fs.String("prompt-hash", "", "only runs that sent a prompt with this sha256 (a model call's prompt_hash)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return exitCode{2, "usage: " + usageLines["runs"]}
	}
	if len(pos) == 1 {
		r, err := cl.GetRun(c.ctx, pos[0])
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(c.out).Encode(r)
		}
		cost := money(r.Usage.CostMicros, r.Usage.Currency)
		if !r.Usage.CostKnown {
			cost = "unknown"
		}
		printRun(c.out, runView{ID: r.ID, Agent: fmt.Sprintf("%s@%d", r.Agent, r.AgentVersion), Status: r.Status, Tenant: r.Tenant, User: r.User,
			Steps: r.Usage.Steps, In: r.Usage.InputTokens, Out: r.Usage.OutputTokens, Cost: cost, Created: r.CreatedAt, Updated: r.UpdatedAt,
			Parent: r.ParentRunID, Output: r.Output, LastSeq: r.LastEventID})
		return nil
	}
	rs, err := cl.ListRuns(c.ctx, apiclient.ListRunsOptions{Status: *status, PromptHash: *promptHash, Limit: 1000})
	if err != nil {
		return err
	}
	if *asJSON {
		// Outputs are shown neutralised, as everywhere in the CLI.
		pol := c.remotePolicy(cl)
		for i := range rs {
			rs[i].Output, _ = pol.Text(rs[i].Output)
		}
		return json.NewEncoder(c.out).Encode(rs)
	}
	tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tSTEPS\tTOKENS IN\tTOKENS OUT\tCOST\tUSER\tCREATED")
	for _, r := range rs {
		cost := money(r.Usage.CostMicros, r.Usage.Currency)
		if !r.Usage.CostKnown {
			cost = "unknown"
		}
		fmt.Fprintf(tw, "%s\t%s@%d\t%s\t%d\t%d\t%d\t%s\t%s/%s\t%s\n", r.ID, r.Agent, r.AgentVersion, r.Status, r.Usage.Steps,
			r.Usage.InputTokens, r.Usage.OutputTokens, cost, r.Tenant, r.User, r.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

// remoteSource reads a run's log and blobs from the server, for the trace
// printer and trace.Verify; it cannot write.
type remoteSource struct {
	cl    *apiclient.Client
	runID string
	evs   []store.Event
}

var errReadOnly = errors.New("a run read from a server cannot be written")

func (r *remoteSource) Append(context.Context, store.AppendRequest) error { return errReadOnly }
func (r *remoteSource) Flush(context.Context, string) error               { return errReadOnly }
func (r *remoteSource) PutBlob(context.Context, []byte) ([32]byte, error) {
	return [32]byte{}, errReadOnly
}

func (r *remoteSource) Events(_ context.Context, runID string, after int64, limit int) ([]store.Event, error) {
	if runID != r.runID {
		return nil, fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
	}
	var out []store.Event
	for _, ev := range r.evs {
		if ev.Seq > after && (limit <= 0 || len(out) < limit) {
			out = append(out, ev)
		}
	}
	return out, nil
}

func (r *remoteSource) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	b, err := r.cl.Blob(ctx, r.runID, hex.EncodeToString(sum[:]))
	if apiclient.IsNotFound(err) {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	}
	if err == nil && sha256.Sum256(b) != sum {
		return nil, fmt.Errorf("blob %x as served: %w", sum, store.ErrCorrupt)
	}
	return b, err
}

func (r *remoteSource) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	b, err := r.GetBlob(ctx, sum)
	return int64(len(b)), err
}

func (c *command) remoteTrace(cl *apiclient.Client, args []string) error {
	verify := len(args) > 0 && args[0] == "verify"
	if verify {
		args = args[1:]
	}
	fs := c.remoteFlags("trace")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	full := fs.Bool("full", false, "print every prompt whole, not just what each step added")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return exitCode{2, "usage: agentplane trace [verify] RUN|last"}
	}
	runID := pos[0]
	if runID == "last" {
		rs, err := cl.ListRuns(c.ctx, apiclient.ListRunsOptions{Limit: 1000})
		if err != nil {
			return err
		}
		if len(rs) == 0 {
			return exitCode{1, "trace last: there are no runs"}
		}
		if len(rs) == 1000 {
			return exitCode{1, "trace last: more than 1000 runs; name the run"}
		}
		runID = rs[len(rs)-1].ID
	}
	aevs, err := cl.AllEvents(c.ctx, runID)
	if err != nil {
		return err
	}
	src := &remoteSource{cl: cl, runID: runID}
	for _, ev := range aevs {
		sev, err := fromAPI(ev)
		if err != nil {
			return err
		}
		src.evs = append(src.evs, sev)
	}
	if verify {
		run, err := cl.GetRun(c.ctx, runID)
		if err != nil {
			return err
		}
		return c.printVerify(src, runID, run.Status)
	}
	if *asJSON {
		for i := range src.evs {
			b, _ := json.Marshal(toJSONEvent(&src.evs[i]))
			fmt.Fprintln(c.out, string(b))
		}
		return nil
	}
	return printTrace(c.ctx, c.out, src, src.evs, *full, c.remotePolicy(cl))
}

// remotePolicy is the caller's tenant's render policy, as the server
// reports it; when it cannot be read, no domain is listed (every link in
// model text is shown inert).
func (c *command) remotePolicy(cl *apiclient.Client) *render.Policy {
	tn, err := cl.Tenant(c.ctx)
	if err != nil {
		return strict
	}
	pol, err := render.NewPolicy(tn.Settings.LinkDomains)
	if err != nil {
		return strict
	}
	return pol
}

func (c *command) remoteApprovals(cl *apiclient.Client, args []string) error {
	fs := c.remoteFlags("approvals")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	aps, err := cl.Approvals(c.ctx)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "APPROVAL\tGROUP\tREQUESTER\tEXPIRES\tACTION")
	for _, a := range aps {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.ID, a.Group, a.Requester, a.ExpiresAt.Format(time.RFC3339), clean(a.Description, 160))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, a := range aps {
		approvalNotes(c.out, a.ID, a.Why, a.Warnings)
	}
	return nil
}

func (c *command) remoteDecide(cl *apiclient.Client, decision string, args []string) error {
	fs := c.remoteFlags(decision)
	comment := fs.String("comment", "", "a comment recorded with the decision and shown to the model")
	newArgs := new(string)
	if decision == "edit" {
		newArgs = fs.String("args", "", "the new arguments as a JSON object (required)")
	}
	as := fs.String("as", "", "not used in client mode: you decide as the token's user")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (decision == "edit" && *newArgs == "") {
		return exitCode{2, fmt.Sprintf("usage: agentplane %s APPROVAL_ID [--comment TEXT]%s", decision, map[bool]string{true: " --args JSON"}[decision == "edit"])}
	}
	if *as != "" {
		return exitCode{2, fmt.Sprintf("--as does not apply with %s set: the server decides as the user of %s", EnvServer, EnvToken)}
	}
	req := apiclient.DecideRequest{Decision: decision, Comment: *comment}
	if *newArgs != "" {
		req.Args = json.RawMessage(*newArgs)
	}
	out, err := cl.Decide(c.ctx, pos[0], req)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s: %s by %s recorded; the run resumes on the server\n", out.ApprovalID, out.Decision, out.Decider)
	return nil
}

func (c *command) remoteSignal(cl *apiclient.Client, kind string, args []string) error {
	fs := c.remoteFlags(kind)
	text := fs.String("text", "", "message: the text to add")
	reason := fs.String("reason", "", "cancel: why")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || (kind == trace.SignalMessage && *text == "") {
		return exitCode{2, fmt.Sprintf("usage: agentplane %s RUN%s", kind, map[bool]string{true: " --text TEXT"}[kind == trace.SignalMessage])}
	}
	var out *apiclient.SignalAccepted
	if kind == trace.SignalCancel {
		out, err = cl.Cancel(c.ctx, pos[0], *reason)
	} else {
		out, err = cl.SendMessage(c.ctx, pos[0], *text)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "%s sent to %s; it takes effect at the run's next step boundary\n", out.Kind, out.RunID)
	return nil
}
