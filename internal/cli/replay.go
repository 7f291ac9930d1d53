package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// mockFlags collects --mock TOOL=JSON.
type mockFlags map[string]json.RawMessage

func (m mockFlags) String() string { return fmt.Sprint(map[string]json.RawMessage(m)) }
func (m mockFlags) Set(s string) error {
	k, v, ok := splitAssign(s)
	if !ok || !json.Valid([]byte(v)) {
		return fmt.Errorf("want TOOL=JSON, got %q", s)
	}
	m[k] = json.RawMessage(v)
	return nil
}

func (c *command) replay(args []string) error {
	if len(args) > 0 && args[0] == "diff" {
		return c.replayDiff(args[1:])
	}
	var cm common
	fs := c.flags("replay", &cm)
	from := fs.Int("from-step", 1, "the first step that runs live; earlier steps are served from the log")
	agentRef := fs.String("agent", "", "replay on another agent version (NAME@VERSION or NAME@ALIAS)")
	alias := fs.String("model", "", "replay with another model alias")
	instr := fs.String("instructions", "", "replay with the instructions in this file")
	mode := fs.String("mode", "recorded", "recorded: model outputs from the log where it has them; live: ask the model again from --from-step")
	internal := fs.Bool("internal-live", false, "the target environment allows tools with side_effects internal to run live")
	admin := fs.Bool("admin", false, "act as the tenant's admin: --agent may name a version number when the tenant requires aliases")
	mocks := mockFlags{}
	fs.Var(mocks, "mock", "TOOL=JSON: the output a non-matching call of TOOL gets instead of running (repeatable)")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return exitCode{2, "usage: agentplane replay RUN|last --from-step N [--agent NAME@VERSION] [--model ALIAS] [--instructions FILE] [--mode recorded|live] [--mock TOOL=JSON]"}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	of, err := c.runRef(p, "replay", pos[0])
	if err != nil {
		return err
	}
	req := runs.ReplayRequest{Of: of, FromStep: *from, Agent: *agentRef, ModelAlias: *alias, Mode: *mode, Mocks: mocks, InternalLive: *internal, Admin: *admin}
	if *instr != "" {
		b, err := os.ReadFile(*instr)
		if err != nil {
			return err
		}
		req.Instructions = string(b)
	}
	run, err := p.Runs.Replay(c.ctx, req)
	if err != nil {
		return err
	}
	if !*asJSON {
		fmt.Fprintf(c.out, "replay %s of %s from step %d, mode %s\n", run.ID, req.Of, req.FromStep, req.Mode)
	}
	var after int64
	final, err := c.execute(p, run.ID, *asJSON, &after)
	if err != nil {
		return err
	}
	if !*asJSON {
		fmt.Fprintf(c.out, "\ncompare: agentplane replay diff %s %s\n", req.Of, run.ID)
	}
	if final.Status == store.StatusWaiting {
		return exitCode{3, fmt.Sprintf("replay %s waits (for an approval of a live call)", run.ID)}
	}
	if final.Status != store.StatusCompleted {
		return exitCode{1, fmt.Sprintf("replay %s ended %s", run.ID, final.Status)}
	}
	return nil
}

// decisionLine is one tool call as the diff shows it.
type decisionLine struct {
	Step     int    `json:"step"`
	Tool     string `json:"tool"`
	Args     string `json:"args"`
	Status   string `json:"status"`
	Replayed string `json:"replayed,omitempty"`
}

type runDecisions struct {
	Run      *store.Run      `json:"-"`
	Mode     string          `json:"mode"`
	Calls    []decisionLine  `json:"calls"`
	Diverged *trace.Diverged `json:"diverged,omitempty"`
	Bank     bank.Counters   `json:"bank"`
}

func decisions(ctx context.Context, p *platform.Platform, runID string) (*runDecisions, error) {
	run, err := p.Store.GetRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	evs, err := p.Store.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, err
	}
	d := &runDecisions{Run: run, Mode: "original"}
	args := map[[2]int]string{}
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvRunStarted:
			var rs trace.RunStarted
			_ = json.Unmarshal(ev.Payload, &rs)
			if rs.Replay != nil {
				d.Mode = fmt.Sprintf("replay of %s from step %d (%s)", rs.Replay.Of, rs.Replay.FromStep, rs.Replay.Mode)
			}
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			_ = json.Unmarshal(ev.Payload, &a)
			text := a.Args.Text
			if a.Args.IsBlob() {
				b, _ := trace.Load(ctx, p.Store, a.Args)
				text = string(b)
			}
			args[[2]int{ev.Step, a.Index}] = text
		case trace.EvToolResult:
			var r trace.ToolResult
			_ = json.Unmarshal(ev.Payload, &r)
			d.Calls = append(d.Calls, decisionLine{Step: ev.Step, Tool: r.Tool, Args: args[[2]int{ev.Step, r.Index}], Status: r.Status, Replayed: r.Replayed})
		case trace.EvDiverged:
			var dv trace.Diverged
			_ = json.Unmarshal(ev.Payload, &dv)
			d.Diverged = &dv
		}
	}
	b, err := bankOf(p)
	if err != nil {
		return nil, err
	}
	d.Bank, err = b.CountersForRun(ctx, runID)
	return d, err
}

func (c *command) replayDiff(args []string) error {
	var cm common
	fs := c.flags("replay diff", &cm)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return exitCode{2, "usage: agentplane replay diff RUN_A RUN_B"}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	a, err := decisions(c.ctx, p, pos[0])
	if err != nil {
		return err
	}
	b, err := decisions(c.ctx, p, pos[1])
	if err != nil {
		return err
	}
	if *asJSON {
		return json.NewEncoder(c.out).Encode(map[string]*runDecisions{"a": a, "b": b})
	}
	fmt.Fprintf(c.out, "A %s: %s, %s, %d steps\nB %s: %s, %s, %d steps\n", a.Run.ID, a.Mode, a.Run.Status, a.Run.Steps, b.Run.ID, b.Mode, b.Run.Status, b.Run.Steps)
	for _, d := range []*runDecisions{a, b} {
		if d.Diverged != nil {
			fmt.Fprintf(c.out, "%s first left its original at step %d: %s\n", d.Run.ID, d.Diverged.Step, d.Diverged.Reason)
		}
	}
	fmt.Fprintln(c.out, "\ndecisions (tool calls):")
	n := max(len(a.Calls), len(b.Calls))
	same := 0
	for i := 0; i < n; i++ {
		var la, lb string
		if i < len(a.Calls) {
			la = fmt.Sprintf("%d %s %s -> %s", a.Calls[i].Step, a.Calls[i].Tool, clean(a.Calls[i].Args, 60), a.Calls[i].Status)
		}
		if i < len(b.Calls) {
			lb = fmt.Sprintf("%d %s %s -> %s", b.Calls[i].Step, b.Calls[i].Tool, clean(b.Calls[i].Args, 60), b.Calls[i].Status)
			if b.Calls[i].Replayed != "" {
				lb += " [" + b.Calls[i].Replayed + "]"
			}
		}
		mark := "  "
		if i >= len(a.Calls) || i >= len(b.Calls) || a.Calls[i].Tool != b.Calls[i].Tool || a.Calls[i].Args != b.Calls[i].Args {
			mark = "≠ "
		} else {
			same++
		}
		fmt.Fprintf(c.out, "%s%-70s | %s\n", mark, la, lb)
	}
	fmt.Fprintf(c.out, "\n%d of %d calls identical\n", same, n)
	fmt.Fprintf(c.out, "\nside effects at the simulated bank (this run's own):\n  A: %s\n  B: %s\n", bankLine(a.Bank), bankLine(b.Bank))
	return nil
}

func bankLine(ct bank.Counters) string {
	return strings.TrimSpace(fmt.Sprintf("%d disputes, %d refunds (%s INR), %d emails sent", ct.DisputesRaised, ct.RefundsIssued, bank.FormatRupees(ct.RefundedPaise), ct.EmailsSent))
}
