package cli

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"unicode"

	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// timeline prints events as a compact, human-readable run timeline. Every
// text it prints is neutralised under pol, the run's tenant's render
// policy (nil: no link domains listed), and made safe for a terminal.
type timeline struct {
	w        io.Writer
	currency string
	pol      *render.Policy
}

func (t *timeline) clean(s string, n int) string {
	s, _ = t.pol.Text(s)
	return sanitize(s, n, false)
}

func (t *timeline) cleanLines(s string, n int) string {
	s, _ = t.pol.Text(s)
	return sanitize(s, n, true)
}

// strict lists no link domains: every link is inert.
var strict = &render.Policy{}

// clean makes text from models and tools safe to show: neutralised (package
// render: no images, no live links, bidi and invisible characters made
// visible), control characters (including ANSI escapes) turned into
// spaces, and cut to n runes.
func clean(s string, n int) string { return (&timeline{pol: strict}).clean(s, n) }

func sanitize(s string, n int, keepNL bool) string {
	var b strings.Builder
	count := 0
	for _, r := range s {
		if count >= n {
			b.WriteString("…")
			break
		}
		if keepNL && r == '\n' {
			b.WriteRune(r)
			count++
			continue
		}
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			r = ' '
		}
		b.WriteRune(r)
		count++
	}
	return b.String()
}

func money(micros int64, cur string) string {
	if cur == "" {
		cur = "?"
	}
	return fmt.Sprintf("%d.%06d %s", micros/1_000_000, micros%1_000_000, cur)
}

func (t *timeline) event(ev *store.Event) {
	w := t.w
	switch ev.Type {
	case trace.EvRunStarted:
		var p trace.RunStarted
		_ = json.Unmarshal(ev.Payload, &p)
		var b struct {
			MaxCost struct{ Currency string } `json:"max_cost"`
		}
		_ = json.Unmarshal(p.Budgets, &b)
		t.currency = b.MaxCost.Currency
		fmt.Fprintf(w, "run %s  %s@%d  tenant=%s user=%s  model=%s\n", ev.RunID, p.Agent, p.AgentVersion, p.Tenant, p.User, p.ModelAlias)
		fmt.Fprintf(w, "  task    %s\n", t.clean(p.Task, 200))
		if len(p.Bindings) > 0 {
			keys := make([]string, 0, len(p.Bindings))
			for k := range p.Bindings {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			var parts []string
			for _, k := range keys {
				parts = append(parts, k+"="+p.Bindings[k])
			}
			fmt.Fprintf(w, "  bound   %s (every tool call naming these arguments must name these values)\n", t.clean(strings.Join(parts, " "), 300))
		}
	case trace.EvStepStarted:
		fmt.Fprintf(w, "  step %d\n", ev.Step)
	case trace.EvModelCall:
		var p trace.ModelCall
		_ = json.Unmarshal(ev.Payload, &p)
		if p.Error != "" {
			fmt.Fprintf(w, "    model  %s  error: %s\n", p.Alias, t.clean(p.Error, 600))
			return
		}
		cost := "cost unknown"
		if p.CostKnown {
			cost = money(p.CostMicros, p.Currency)
		}
		if p.ReplayedFrom > 0 {
			cost = fmt.Sprintf("replayed from seq %d: no call, no cost", p.ReplayedFrom)
		}
		u := p.Response.Usage
		fmt.Fprintf(w, "    model  %s  in=%d out=%d  %s  %dms\n", p.Alias, u.TotalInput(), u.OutputTokens, cost, p.LatencyMS)
		if txt := strings.TrimSpace(p.Response.Text()); txt != "" {
			fmt.Fprintf(w, "           %q\n", t.clean(txt, 160))
		}
	case trace.EvToolAttempt:
		var p trace.ToolAttempt
		_ = json.Unmarshal(ev.Payload, &p)
		args := p.Args.Text
		if p.Args.IsBlob() {
			args = p.Args.Preview + "…"
		}
		verdict := "allowed"
		if !p.Decision.Allowed && p.Decision.Approval != nil {
			verdict = "waits for approval by " + p.Decision.Approval.Group
		} else if !p.Decision.Allowed {
			verdict = "DENIED by " + p.Decision.Control + ": " + t.clean(p.Decision.Reason, 120)
		}
		fmt.Fprintf(w, "    call   %s %s  [%s] key=%s\n", p.Tool, t.clean(args, 120), verdict, p.IdempotencyKey)
	case trace.EvToolResult:
		var p trace.ToolResult
		_ = json.Unmarshal(ev.Payload, &p)
		out := p.Output.Text
		if p.Output.IsBlob() {
			out = p.Output.Preview
		}
		extra := ""
		if p.Replayed != "" {
			extra = "  [replay: " + p.Replayed + "]"
		}
		if p.Truncated {
			extra = "  (too large for the context: the model sees handle blob:" + t.clean(p.Output.Blob, 12) + "… and a preview)"
		}
		show := 100
		if p.Status != trace.StatusOK {
			show = 400 // a refusal or an error is worth reading whole
		}
		fmt.Fprintf(w, "    result %s %s %dB %dms  %s%s\n", p.Tool, p.Status, p.Bytes, p.LatencyMS, t.clean(out, show), extra)
		if b := p.Sandbox; b != nil {
			fmt.Fprintf(w, "    sandbox %s tier %d (%s) %s: provision %dms, wall %dms (host-measured; %dms by the sandbox's own clock), %s exit %d, out %dB",
				b.Executor, b.Tier, t.clean(b.ID, 40), b.Lifecycle, b.ProvisionMS, b.WallMS, b.ExecMS, b.Outcome, b.ExitCode, b.StdoutBytes)
			if b.Downgraded {
				fmt.Fprintf(w, ", DOWNGRADED from tier %d", b.RequestedTier)
			}
			fmt.Fprintln(w)
		}
	case trace.EvLoopNote:
		var p trace.LoopNote
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "    note   [%s] %s\n", p.Reason, t.clean(p.Text, 160))
	case trace.EvSignal:
		var p trace.Signal
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "    signal %s %s\n", p.Kind, t.clean(string(p.Payload), 120))
	case trace.EvTaint:
		var p trace.Taint
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "    taint  the run has read untrusted content (from %s); policies now see run.tainted\n", p.Tool)
	case trace.EvApprovalReq:
		var p trace.ApprovalRequested
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "    approval requested %s from group %s (expires %s)\n", p.ApprovalID, p.Group, p.ExpiresAt.Format("2006-01-02 15:04 MST"))
	case trace.EvApprovalDec:
		var p trace.ApprovalDecided
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "    approval %s %s", p.ApprovalID, p.Outcome)
		if p.Decider != "" {
			fmt.Fprintf(w, " by %s", p.Decider)
		}
		if p.Comment != "" {
			fmt.Fprintf(w, ": %s", t.clean(p.Comment, 160))
		}
		fmt.Fprintln(w)
	case trace.EvDiverged:
		var p trace.Diverged
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "  diverged from the original at step %d: %s\n", p.Step, t.clean(p.Reason, 160))
	case trace.EvSandboxEnd:
		var p trace.SandboxTeardowns
		_ = json.Unmarshal(ev.Payload, &p)
		for _, sb := range p.Sandboxes {
			by := map[string]string{"caller": "the platform", "reaper": "the reaper (idle too long)", "nobody": "a startup sweep"}[sb.By]
			if by == "" {
				by = t.clean(sb.By, 20)
			}
			fmt.Fprintf(w, "  sandbox %s (%s) destroyed by %s after %d call(s): %s", t.clean(sb.ID, 40), sb.Executor, by, sb.Uses, t.clean(sb.Reason, 80))
			if sb.Err != "" {
				fmt.Fprintf(w, " [error: %s]", t.clean(sb.Err, 160))
			}
			fmt.Fprintln(w)
		}
	case trace.EvBudget:
		var p trace.Budget
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "  budget  %s reached (limit %d, value %d)\n", p.Bound, p.Limit, p.Value)
	case trace.EvRunCompleted, trace.EvRunFailed:
		var p trace.RunEnded
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "  end     %s", p.Status)
		if p.Reason != "" {
			fmt.Fprintf(w, " (%s)", t.clean(p.Reason, 200))
		}
		fmt.Fprintln(w)
		if p.Result != "" {
			fmt.Fprintf(w, "  result  %s\n", t.clean(p.Result, 400))
		}
	default:
		fmt.Fprintf(w, "  %s\n", ev.Type)
	}
}

// jsonEvent is the JSON-lines form of an event (agentplane run --json, trace --json).
type jsonEvent struct {
	RunID    string          `json:"run_id"`
	Seq      int64           `json:"seq"`
	Type     string          `json:"type"`
	Step     int             `json:"step"`
	At       string          `json:"at"`
	Payload  json.RawMessage `json:"payload"`
	PrevHash string          `json:"prev_hash"`
	Hash     string          `json:"hash"`
}

func toJSONEvent(ev *store.Event) jsonEvent {
	return jsonEvent{RunID: ev.RunID, Seq: ev.Seq, Type: ev.Type, Step: ev.Step,
		At: ev.At.Format("2006-01-02T15:04:05.000000Z07:00"), Payload: json.RawMessage(ev.Payload),
		PrevHash: hex.EncodeToString(ev.PrevHash[:]), Hash: hex.EncodeToString(ev.Hash[:])}
}
