package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

func (c *command) agents(args []string) error {
	if len(args) == 0 {
		return exitCode{2, "usage: " + usageLines["agents"]}
	}
	var cm common
	fs := c.flags("agents "+args[0], &cm)
	file := fs.String("f", "", "agent definition YAML")
	pos, p, err := c.parseAndOpen(fs, &cm, args[1:])
	if err != nil {
		return err
	}
	defer p.Close()
	switch args[0] {
	case "apply":
		if *file == "" {
			return exitCode{2, "agents apply: -f FILE is required"}
		}
		d, err := agent.LoadDefinitionFile(*file)
		if err != nil {
			return err
		}
		created, err := p.Registry.Apply(c.ctx, d)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintf(c.out, "agent %s version %d stored\n", d.Agent, d.Version)
		} else {
			fmt.Fprintf(c.out, "agent %s version %d unchanged (identical content already stored)\n", d.Agent, d.Version)
		}
		return nil
	case "list":
		vs, err := p.Store.ListAgentVersions(c.ctx, "")
		if err != nil {
			return err
		}
		als, err := p.Store.ListAliases(c.ctx, "")
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "AGENT\tVERSION\tCREATED\tSPEC HASH\tALIASES\tSTATE")
		for _, v := range vs {
			var names []string
			for _, a := range als {
				if a.Agent == v.Name && a.Version == v.Version {
					names = append(names, a.Alias)
				}
				if a.Agent == v.Name && a.CanaryVersion == v.Version && a.CanaryPercent > 0 {
					names = append(names, fmt.Sprintf("%s(canary %d%%)", a.Alias, a.CanaryPercent))
				}
			}
			state := "live"
			if !v.RetiredAt.IsZero() {
				state = "retired " + v.RetiredAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%x\t%v\t%s\n", v.Name, v.Version, v.CreatedAt.Format(time.RFC3339), v.SpecHash[:6], names, state)
		}
		return tw.Flush()
	case "retire":
		if len(pos) != 1 {
			return exitCode{2, "usage: agentplane agents retire NAME@VERSION"}
		}
		name, ver, _ := strings.Cut(pos[0], "@")
		n, err := strconv.Atoi(ver)
		if err != nil {
			return exitCode{2, fmt.Sprintf("agents retire: want NAME@VERSION, got %q", pos[0])}
		}
		still, err := p.Registry.Retire(c.ctx, name, n)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "agent %s version %d retired: it starts no new run; runs already on it finish\n", name, n)
		for _, a := range still {
			fmt.Fprintf(c.out, "  alias %s still leads to it: runs through %s@%s are refused until it moves (agentplane agents alias %s %s=VERSION)\n",
				a, name, a, name, a)
		}
		return nil
	case "alias":
		if len(pos) != 2 {
			return exitCode{2, "usage: agentplane agents alias NAME ALIAS=VERSION"}
		}
		alias, ver, ok := splitAssign(pos[1])
		n, err := strconv.Atoi(ver)
		if !ok || err != nil {
			return exitCode{2, fmt.Sprintf("agents alias: want ALIAS=VERSION, got %q", pos[1])}
		}
		if err := p.Registry.SetAlias(c.ctx, pos[0], alias, n, 0, 0); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "%s@%s -> version %d\n", pos[0], alias, n)
		return nil
	}
	if isHelp(args[0]) {
		fmt.Fprintf(c.out, "usage: %s\n", usageLines["agents"])
		return nil
	}
	return exitCode{2, fmt.Sprintf("agents: unknown subcommand %q\nusage: %s", args[0], usageLines["agents"])}
}

func (c *command) tools(args []string) error {
	if len(args) == 0 {
		return exitCode{2, "usage: agentplane tools apply -f FILE|DIR | list"}
	}
	var cm common
	fs := c.flags("tools "+args[0], &cm)
	file := fs.String("f", "", "tool manifest YAML file or directory")
	if _, err := parseInterleaved(fs, args[1:]); err != nil {
		return err
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	switch args[0] {
	case "apply":
		if *file == "" {
			return exitCode{2, "tools apply: -f FILE|DIR is required"}
		}
		names, err := p.ApplyTools(c.ctx, *file)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.out, "stored %d tools: %v\n", len(names), names)
		return nil
	case "list":
		set, err := p.ToolSet(c.ctx)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "TOOL\tCONNECTOR\tTIER\tSIDE EFFECTS\tUNTRUSTED OUTPUT\tTIMEOUT")
		for _, n := range set.Names() {
			m, _ := set.Get(n)
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%dms\n", m.Name, m.Connector, m.Tier, m.SideEffects, m.UntrustedOutput, m.TimeoutMS)
		}
		return tw.Flush()
	}
	if isHelp(args[0]) {
		fmt.Fprintf(c.out, "usage: %s\n", usageLines["tools"])
		return nil
	}
	return exitCode{2, fmt.Sprintf("tools: unknown subcommand %q\nusage: %s", args[0], usageLines["tools"])}
}

func (c *command) run(args []string) error {
	var cm common
	fs := c.flags("run", &cm)
	task := fs.String("task", "", "the task for the agent (required)")
	user := fs.String("user", os.Getenv("USER"), "the user the run acts for")
	tenant := fs.String("tenant", "default", "the user's tenant")
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	script := fs.String("script", "", "scripted model turns YAML, served for every scripted alias")
	detach := fs.Bool("detach", false, "queue the run and print its id; a worker executes it")
	admin := fs.Bool("admin", false, "act as the tenant's admin: may name a version number or latest when the tenant requires aliases")
	binds := bindFlag{}
	fs.Var(binds, "bind", "NAME=VALUE: every tool call naming argument NAME must name VALUE (repeatable; e.g. --bind customer_id=c_88213)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *task == "" {
		return exitCode{2, "usage: agentplane run AGENT --task TEXT [--user U] [--tenant T] [--bind NAME=VALUE] [--admin] [--json]"}
	}
	if *user == "" {
		*user = "local"
	}
	p, err := c.open(&cm, func(o *platform.Options) {
		if *script != "" {
			s, err := scripted.Load(*script)
			if err == nil {
				o.Script = s
			}
		}
	})
	if err != nil {
		return err
	}
	defer p.Close()
	if *script != "" {
		if _, err := scripted.Load(*script); err != nil {
			return err
		}
	}
	run, err := p.Runs.Start(c.ctx, runs.StartRequest{Agent: pos[0], Task: *task, Tenant: *tenant, User: *user, Mode: "stream", Bindings: binds.orNil(), Admin: *admin})
	if err != nil {
		return err
	}
	if *detach {
		fmt.Fprintln(c.out, run.ID)
		return nil
	}
	var after int64
	final, err := c.execute(p, run.ID, *asJSON, &after)
	if err != nil {
		return err
	}
	if final.Status == store.StatusWaiting {
		pend, err := p.Runs.PendingApprovals(c.ctx, final.Tenant)
		if err != nil {
			return err
		}
		for _, a := range pend {
			if a.Run.ID == run.ID {
				fmt.Fprintf(c.out, "\nrun %s waits for approval %s (group %s): %s\n  decide: agentplane approve|reject %s --as USER%s\n  then:   agentplane worker --until-idle%s\n",
					run.ID, a.Request.ApprovalID, a.Request.Group, clean(a.Request.Description, 200), a.Request.ApprovalID, dataFlag(&cm), dataFlag(&cm)+modelsFlag(&cm))
			}
		}
		return exitCode{3, ""}
	}
	if !*asJSON {
		fmt.Fprintf(c.out, "\ninspect: agentplane trace %s%s   verify: agentplane trace verify %s%s\n", run.ID, dataFlag(&cm), run.ID, dataFlag(&cm))
	}
	if final.Status != store.StatusCompleted {
		return exitCode{1, fmt.Sprintf("run %s ended %s", run.ID, final.Status)}
	}
	return nil
}

// execute drives one run in-process while streaming its events.
// Events after *after are printed, and *after advances, so a caller can
// resume printing where a previous call stopped.
func (c *command) execute(p *platform.Platform, runID string, asJSON bool, after *int64) (*store.Run, error) {
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan error, 1)
	go func() {
		err := p.Engine.Drive(ctx, runID)
		done <- err
	}()
	tl := &timeline{w: c.out, pol: strict}
	if run, err := p.Store.GetRun(ctx, runID); err == nil {
		if pol, err := p.RenderPolicy(ctx, run.Tenant); err == nil {
			tl.pol = pol
		}
	}
	var seen []store.Event
	flush := func() error {
		evs, err := p.Store.Events(context.WithoutCancel(ctx), runID, *after, 0)
		if err != nil {
			return err
		}
		for i := range evs {
			if asJSON {
				b, _ := json.Marshal(toJSONEvent(&evs[i]))
				fmt.Fprintln(c.out, string(b))
			} else {
				tl.event(&evs[i])
				seen = append(seen, evs[i])
			}
			*after = evs[i].Seq
		}
		return nil
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if ferr := flush(); ferr != nil {
				return nil, ferr
			}
			if !asJSON {
				writeFlags(c.out, platform.OutputFlags(tl.pol, seen))
			}
			if err != nil && !errors.Is(err, engine.ErrNotRunnable) {
				return nil, err
			}
			return p.Store.GetRun(context.WithoutCancel(ctx), runID)
		case <-tick.C:
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
}

func (c *command) runs(args []string) error {
	var cm common
	fs := c.flags("runs", &cm)
	status := fs.String("status", "", "only runs with this status")
	tenant := fs.String("tenant", "", "only runs of this tenant")
	promptHash := fs.String("prompt-hash", "", "only runs that sent a prompt with this sha256 (a model call's prompt_hash, shown by trace)")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 1 {
		return exitCode{2, "usage: " + usageLines["runs"]}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	if len(pos) == 1 {
		runID, err := c.runRef(p, "runs", pos[0])
		if err != nil {
			return err
		}
		r, err := p.Store.GetRun(c.ctx, runID)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(c.out).Encode(r)
		}
		cost := money(r.CostMicros, r.Currency)
		if r.CostUnknown {
			cost = "unknown"
		}
		printRun(c.out, runView{ID: r.ID, Agent: fmt.Sprintf("%s@%d", r.Agent, r.AgentVersion), Status: r.Status, Tenant: r.Tenant, User: r.User,
			Steps: r.Steps, In: r.InputTokens, Out: r.OutputTokens, Cost: cost, Created: r.CreatedAt, Updated: r.UpdatedAt,
			Parent: r.ParentRunID, Output: r.Result, LastSeq: r.LastSeq})
		return nil
	}
	if _, ok := store.PromptHashHex(*promptHash); *promptHash != "" && !ok {
		return exitCode{2, "runs --prompt-hash: want a prompt's sha256 as a model call records it (sha256:HEX or HEX; trace RUN --json shows it)"}
	}
	rs, err := p.Store.ListRuns(c.ctx, store.RunFilter{Status: *status, Tenant: *tenant, PromptHash: *promptHash})
	if err != nil {
		return err
	}
	pc := &policyCache{get: func(tenant string) (*render.Policy, error) { return p.RenderPolicy(c.ctx, tenant) }}
	flagsOf := func(r *store.Run) ([]string, error) {
		evs, err := p.Store.Events(c.ctx, r.ID, 0, 0)
		if err != nil {
			return nil, err
		}
		return platform.OutputFlags(pc.of(r.Tenant), evs).Names(), nil
	}
	if *asJSON {
		// Result is shown neutralised, as everywhere else; the log keeps the
		// exact bytes (agentplane trace RUN --json).
		out := make([]jsonRun, 0, len(rs))
		for _, r := range rs {
			flags, err := flagsOf(r)
			if err != nil {
				return err
			}
			x := *r
			x.Result, _ = pc.of(r.Tenant).Text(r.Result)
			out = append(out, jsonRun{Run: &x, OutputFlags: flags})
		}
		return json.NewEncoder(c.out).Encode(out)
	}
	tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tAGENT\tSTATUS\tSTEPS\tTOKENS IN\tTOKENS OUT\tCOST\tUSER\tCREATED\tOUTPUT FLAGS")
	for _, r := range rs {
		cost := money(r.CostMicros, r.Currency)
		if r.CostUnknown {
			cost = "unknown"
		}
		status := r.Status
		if r.ParentRunID != "" {
			status += " (" + replayLabel(c.ctx, p, r) + ")"
		}
		flags, err := flagsOf(r)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s@%d\t%s\t%d\t%d\t%d\t%s\t%s/%s\t%s\t%s\n", r.ID, r.Agent, r.AgentVersion, status, r.Steps,
			r.InputTokens, r.OutputTokens, cost, r.Tenant, r.User, r.CreatedAt.Format(time.RFC3339), strings.Join(flags, ","))
	}
	return tw.Flush()
}

func (c *command) trace(args []string) error {
	if len(args) > 0 && args[0] == "export" {
		return c.traceExport(args[1:])
	}
	verify := len(args) > 0 && args[0] == "verify"
	if verify {
		args = args[1:]
	}
	var cm common
	fs := c.flags("trace", &cm)
	asJSON := fs.Bool("json", false, "print events as JSON lines")
	full := fs.Bool("full", false, "print every prompt whole, not just what each step added")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return exitCode{2, "usage: agentplane trace [verify] RUN|last"}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	runID, err := c.runRef(p, "trace", pos[0])
	if err != nil {
		return err
	}
	run, err := p.Store.GetRun(c.ctx, runID)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("run %s: not found: it never existed, or it was deleted past its tenant's metadata_ttl (a deleted run leaves no log to show or verify)", runID)
	}
	if err != nil {
		return err
	}
	if verify {
		return c.printVerify(trace.SourceFor(p.Store, run.Tenant), runID, run.Status)
	}
	evs, err := p.Store.Events(c.ctx, runID, 0, 0)
	if err != nil {
		return err
	}
	if *asJSON {
		for i := range evs {
			b, _ := json.Marshal(toJSONEvent(&evs[i]))
			fmt.Fprintln(c.out, string(b))
		}
		return nil
	}
	pol, err := p.RenderPolicy(c.ctx, run.Tenant)
	if err != nil {
		return err
	}
	return printTrace(c.ctx, c.out, trace.SourceFor(p.Store, run.Tenant), evs, *full, pol)
}

func (c *command) worker(args []string) error {
	var cm common
	fs := c.flags("worker", &cm)
	untilIdle := fs.Bool("until-idle", false, "exit when no run is left to execute")
	conc := fs.Int("concurrency", 8, "runs executed at once")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	c.warnNoModels(p, &cm)
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	// What there is to do, to report on afterwards.
	var pending []*store.Run
	for _, st := range []string{store.StatusQueued, store.StatusRunning, store.StatusWaiting} {
		rs, err := p.Store.ListRuns(c.ctx, store.RunFilter{Status: st})
		if err != nil {
			return err
		}
		pending = append(pending, rs...)
	}
	if !*untilIdle {
		fmt.Fprintf(c.out, "worker: %d runs queued, running or waiting; working until interrupted\n", len(pending))
	}
	if err := p.Engine.Work(ctx, engine.WorkOptions{Concurrency: *conc, UntilIdle: *untilIdle}); err != nil {
		return err
	}
	for _, r := range pending {
		now, err := p.Store.GetRun(c.ctx, r.ID)
		if err != nil {
			return err
		}
		if now.Status == r.Status && now.LastSeq == r.LastSeq {
			continue // a waiting run nothing woke
		}
		line := fmt.Sprintf("run %s  %s@%d  %s", now.ID, now.Agent, now.AgentVersion, now.Status)
		if now.Status == store.StatusWaiting {
			line += "  (agentplane approvals lists what it waits for)"
		} else if now.Status == store.StatusFailed && now.Result != "" {
			line += "  " + clean(now.Result, 160)
		}
		fmt.Fprintln(c.out, line)
	}
	return nil
}

// runRef resolves a run argument: an id, or last for the newest run.
func (c *command) runRef(p *platform.Platform, cmd, ref string) (string, error) {
	if ref != "last" {
		return ref, nil
	}
	rs, err := p.Store.ListRuns(c.ctx, store.RunFilter{})
	if err != nil {
		return "", err
	}
	if len(rs) == 0 {
		return "", exitCode{1, cmd + " last: there are no runs"}
	}
	return rs[len(rs)-1].ID, nil
}

// replayLabel says what a replay run replays and in which determinism mode.
func replayLabel(ctx context.Context, p *platform.Platform, r *store.Run) string {
	evs, err := p.Store.Events(ctx, r.ID, 0, 1)
	if err == nil && len(evs) == 1 && evs[0].Type == trace.EvRunStarted {
		var rs trace.RunStarted
		if json.Unmarshal(evs[0].Payload, &rs) == nil && rs.Replay != nil {
			return fmt.Sprintf("replay of %s from step %d, mode %s", rs.Replay.Of, rs.Replay.FromStep, rs.Replay.Mode)
		}
	}
	return "replay of " + r.ParentRunID
}

// bindFlag collects repeated --bind NAME=VALUE flags.
type bindFlag map[string]string

func (b bindFlag) String() string { return "" }

func (b bindFlag) Set(v string) error {
	k, val, ok := splitAssign(v)
	if !ok {
		return fmt.Errorf("want NAME=VALUE, got %q", v)
	}
	if _, dup := b[k]; dup {
		return fmt.Errorf("%s is bound twice", k)
	}
	b[k] = val
	return nil
}

func (b bindFlag) orNil() map[string]string {
	if len(b) == 0 {
		return nil
	}
	return b
}

// dataFlag and modelsFlag repeat the flags a follow-up command needs, for
// hints a user copies (nothing when the default is in effect).
func dataFlag(cm *common) string {
	if cm.data == "" || cm.data == ".agentplane" || cm.data == os.Getenv("AGENTPLANE_DATA") {
		return ""
	}
	return " --data " + shellQuote(cm.data)
}

func modelsFlag(cm *common) string {
	if cm.models == "" {
		return ""
	}
	return " --models " + shellQuote(cm.models)
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == ':' || r == '@' || r == '=' || r == '+' || r == ',' ||
			(r >= '0' && r <= '9') || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z'))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// isHelp reports whether a subcommand position asks for help.
func isHelp(a string) bool { return a == "-h" || a == "-help" || a == "--help" || a == "help" }

// jsonRun is a run as runs --json prints it.
type jsonRun struct {
	*store.Run
	OutputFlags []string `json:"OutputFlags"`
}
