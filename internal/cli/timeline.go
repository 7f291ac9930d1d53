package cli

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	// stamps prefixes each event with its sequence number (the SSE id) and
	// time, as agentplane trace prints it.
	stamps bool
	// removed notes, by blob hex, the payloads retention or an erasure
	// removed ("payload expired 2026-12-01"): shown where the content was.
	removed map[string]string
}

// preview is what the timeline shows of content c stored as a blob: its
// preview, or the note saying it was removed.
func (t *timeline) preview(c trace.Content) string {
	if note, ok := t.removed[c.Blob]; ok {
		return "[" + note + "]"
	}
	return c.Preview + "…"
}

// resultShown is how much of a run's final output a timeline prints.
const resultShown = 400

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

// cleanLines is clean but keeps newlines (a run's whole output).
func cleanLines(s string, n int) string { return (&timeline{pol: strict}).cleanLines(s, n) }

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

// claim prints the sandbox's own report under its name: a claim, with the
// host fields it contradicts.
func (t *timeline) claim(c *trace.SandboxClaim) {
	if c == nil {
		return
	}
	if c.ExitCode == nil {
		fmt.Fprintf(t.w, "            guest claim: none (%s)\n", clean(c.Error, 160))
		return
	}
	fmt.Fprintf(t.w, "            guest claim (the sandbox's own report, unverified): exec %dms, exit %d", c.ExecMS, *c.ExitCode)
	if len(c.Disputed) > 0 {
		fmt.Fprintf(t.w, "; DISPUTED by the host: %s", clean(strings.Join(c.Disputed, ", "), 80))
	}
	fmt.Fprintln(t.w)
}

func (t *timeline) event(ev *store.Event) {
	w := t.w
	if t.stamps {
		fmt.Fprintf(w, "%5d %s ", ev.Seq, ev.At.UTC().Format("15:04:05.000"))
	}
	if id := trace.ErasureOf(ev); id != "" {
		fmt.Fprintf(w, "%s  [erased by %s: only the type, step, time and hashes remain]\n", ev.Type, id)
		return
	}
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
		if r := p.Replay; r != nil {
			fmt.Fprintf(w, "  replay  of %s from step %d, mode %s", clean(r.Of, 80), r.FromStep, clean(r.Mode, 20))
			if r.ModelAlias != "" {
				fmt.Fprintf(w, ", model %s", clean(r.ModelAlias, 80))
			}
			if r.Instructions != "" {
				fmt.Fprint(w, ", instructions patched")
			}
			fmt.Fprintln(w)
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
			args = t.preview(p.Args)
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
			out = strings.TrimSuffix(t.preview(p.Output), "…")
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
			fmt.Fprintf(w, "    sandbox %s tier %d (%s) %s, host-measured: provision %dms, wall %dms, %s exit %d, out %dB",
				b.Executor, b.Tier, t.clean(b.ID, 40), b.Lifecycle, b.ProvisionMS, b.WallMS, t.clean(b.Outcome, 20), b.ExitCode, b.StdoutBytes)
			if b.Downgraded {
				fmt.Fprintf(w, ", DOWNGRADED from tier %d", b.RequestedTier)
			}
			fmt.Fprintln(w)
			if b.Unclean != "" {
				fmt.Fprintf(w, "            not clean (sandbox destroyed): %s\n", clean(b.Unclean, 200))
			}
			t.claim(b.Claim)
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
		from := p.Tool
		switch {
		case p.Detail != "":
			from = p.Detail
		case p.Source != "" && p.Tool == "":
			from = p.Source
		}
		fmt.Fprintf(w, "    taint  the run has read untrusted content (%s: %s); policies now see run.tainted\n", clean(orDefault(p.Source, trace.TaintToolOutput), 30), clean(from, 200))
	case trace.EvApprovalReq:
		var p trace.ApprovalRequested
		_ = json.Unmarshal(ev.Payload, &p)
		fmt.Fprintf(w, "    approval requested %s from group %s (expires %s)\n", p.ApprovalID, p.Group, p.ExpiresAt.Format("2006-01-02 15:04 MST"))
		if len(p.Groups) > 1 {
			fmt.Fprintf(w, "      the call needs every one of the groups %s\n", clean(strings.Join(p.Groups, ", "), 200))
		}
		if p.Why != "" {
			fmt.Fprintf(w, "      asked again (after %s): %s\n", clean(p.Previous, 80), clean(p.Why, 300))
		}
		for _, x := range p.Warnings {
			fmt.Fprintf(w, "      WARNING for the approver: %s\n", clean(x, 400))
		}
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
		if p.EditedArgs != nil {
			if p.PreviousArgs != nil {
				fmt.Fprintf(w, "      edit: %s\n", clean(trace.EditSummary([]byte(*p.PreviousArgs), []byte(*p.EditedArgs)), 400))
				fmt.Fprintf(w, "      old arguments %s\n", clean(*p.PreviousArgs, 300))
			}
			fmt.Fprintf(w, "      new arguments %s\n", clean(*p.EditedArgs, 300))
		}
		if r := p.Recheck; r != nil {
			switch {
			case r.Allowed:
				fmt.Fprintf(w, "      decided again: allowed\n")
			case r.Approval != nil:
				fmt.Fprintf(w, "      decided again: needs approval (%s); covered by the editor: %s\n", clean(r.Rule, 120), clean(orDefault(strings.Join(p.Covers, ", "), "none"), 120))
			default:
				fmt.Fprintf(w, "      decided again: refused by %s: %s\n", clean(r.Control, 30), clean(r.Reason, 300))
			}
		}
	case trace.EvCompaction:
		var p trace.Compaction
		_ = json.Unmarshal(ev.Payload, &p)
		if p.Error != "" {
			fmt.Fprintf(w, "    compaction failed: %s\n", clean(p.Error, 200))
			return
		}
		note := p.Note.Text
		if p.Note.IsBlob() {
			note = t.preview(p.Note)
		}
		fmt.Fprintf(w, "    compaction %d messages folded into a note, %d kept, %d identifiers (%d restored)  in=%d out=%d\n",
			p.CompactedMessages, p.KeptMessages, p.Identifiers, len(p.Restored), p.InputTokens, p.OutputTokens)
		fmt.Fprintf(w, "           %q\n", clean(note, 160))
	case trace.EvToolsLoaded:
		var p trace.ToolsLoaded
		_ = json.Unmarshal(ev.Payload, &p)
		var names []string
		for _, ref := range p.Loaded {
			names = append(names, ref.Name)
		}
		how := ""
		if p.Replayed != "" {
			how = " (" + p.Replayed + ")"
		}
		fmt.Fprintf(w, "    search %q: %d hits, loaded %s%s\n", clean(p.Query, 120), len(p.Hits), clean(orDefault(strings.Join(names, ", "), "nothing new"), 400), how)
		if len(p.Dropped) > 0 {
			fmt.Fprintf(w, "      not loaded (no longer searchable): %s\n", clean(strings.Join(p.Dropped, ", "), 300))
		}
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
			fmt.Fprintf(w, "  result  %s\n", t.clean(p.Result, resultShown))
			if utf8.RuneCountInString(p.Result) > resultShown {
				fmt.Fprintf(w, "          (cut: agentplane runs %s prints the whole output)\n", ev.RunID)
			}
		}
	default:
		fmt.Fprintf(w, "  %s\n", ev.Type)
	}
}

// runView is what `agentplane runs RUN` shows of a run, local or remote.
type runView struct {
	ID, Agent, Status, Tenant, User string
	Steps                           int
	In, Out                         int64
	Cost                            string
	Created, Updated                time.Time
	Parent                          string
	Output                          string
	LastSeq                         int64
}

// printRun prints one run with its whole output (the final answer, or why
// it ended), made safe for a terminal but not cut.
func printRun(w io.Writer, r runView) {
	fmt.Fprintf(w, "run      %s\nagent    %s\nstatus   %s\nfor      %s/%s\n", r.ID, clean(r.Agent, 80), r.Status, clean(r.Tenant, 80), clean(r.User, 80))
	fmt.Fprintf(w, "usage    %d steps, %d tokens in, %d out, cost %s\n", r.Steps, r.In, r.Out, r.Cost)
	fmt.Fprintf(w, "created  %s\nupdated  %s\nevents   %d (agentplane trace %s)\n", r.Created.UTC().Format(time.RFC3339), r.Updated.UTC().Format(time.RFC3339), r.LastSeq, r.ID)
	if r.Parent != "" {
		fmt.Fprintf(w, "replays  %s\n", r.Parent)
	}
	if r.Output == "" {
		fmt.Fprintln(w, "output   (none yet)")
		return
	}
	fmt.Fprintf(w, "output\n%s\n", cleanLines(r.Output, len(r.Output)))
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

// orDefault is s, or def when s is empty.
func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
