package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
)

const evalUsage = `usage:
  agentplane eval run SET --agent NAME@VERSION [--parallel N] [--tasks GLOB] [--record] [--keep DIR] [--json]
  agentplane eval compare BASE CANDIDATE --set SET [--runs QUERY] [--thresholds FILE] [--max-... F] [--parallel N] [--json]
    BASE and CANDIDATE are NAME@VERSION; QUERY selects recorded runs to replay, e.g. agent=NAME,status=completed,limit=50
    (without --runs, the set's tasks run live on both versions)`

func (c *command) eval(args []string) error {
	if len(args) == 0 {
		return exitCode{2, evalUsage}
	}
	switch args[0] {
	case "run":
		return c.evalRun(args[1:])
	case "compare":
		return c.evalCompare(args[1:])
	}
	return exitCode{2, fmt.Sprintf("eval: unknown subcommand %q\n%s", args[0], evalUsage)}
}

// evalEnv is what both subcommands load: the data directory's platform
// (agent versions, tools, recorded runs), the set and the models.
type evalEnv struct {
	p     *platform.Platform
	set   *eval.Set
	gw    *model.Gateway
	rates *model.Rates
}

func (c *command) openEval(cm *common, setPath, tasks string) (*evalEnv, error) {
	set, err := eval.LoadSet(setPath, exampleWorlds()...)
	if err != nil {
		return nil, err
	}
	if tasks != "" {
		if set, err = set.Filter(tasks); err != nil {
			return nil, err
		}
	}
	// The models: --models, else the set's, else DATA/models.yaml.
	file := cm.models
	if file == "" {
		file = set.Models
	}
	cfg, name, err := platform.LoadModelsConfig(cm.data, file)
	if err != nil {
		return nil, err
	}
	gw, rates, err := cfg.BuildWith(name, platform.BuildOptions{Types: exampleProviders()})
	if err != nil {
		return nil, err
	}
	// The source platform only provides definitions and recorded runs; it
	// needs no models of its own.
	src := *cm
	src.models = ""
	p, err := c.open(&src, func(o *platform.Options) { o.Gateway, o.Rates = gw, rates })
	if err != nil {
		return nil, err
	}
	return &evalEnv{p: p, set: set, gw: gw, rates: rates}, nil
}

// resolveVersion loads NAME@VERSION (or NAME@ALIAS) from the registry.
func resolveVersion(ctx context.Context, p *platform.Platform, ref string) (*agent.Definition, error) {
	if !strings.Contains(ref, "@") {
		return nil, exitCode{2, fmt.Sprintf("eval: %q: name the version, NAME@VERSION (versions are what an eval judges)", ref)}
	}
	d, _, err := p.Registry.Resolve(ctx, ref, "", agent.ResolveOptions{IncludeRetired: true})
	if err != nil {
		return nil, fmt.Errorf("eval: %s: %w (store it first: agentplane agents apply -f FILE)", ref, err)
	}
	return d, nil
}

func (c *command) evalRun(args []string) error {
	var cm common
	fs := c.flags("eval run", &cm)
	ref := fs.String("agent", "", "the agent version to evaluate, NAME@VERSION (required)")
	parallel := fs.Int("parallel", 4, "tasks run at once, each in its own simulated environment")
	tasks := fs.String("tasks", "", "only tasks whose id matches this glob (e.g. 'inj-*')")
	record := fs.Bool("record", false, "copy each eval run into the data directory, to replay later with eval compare --runs")
	keep := fs.String("keep", "", "keep every task's environment (data directory and simulated world) under this directory")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	timeout := fs.Duration("task-timeout", 2*time.Minute, "bound on each task")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || *ref == "" {
		return exitCode{2, evalUsage}
	}
	env, err := c.openEval(&cm, pos[0], *tasks)
	if err != nil {
		return err
	}
	defer env.p.Close()
	d, err := resolveVersion(c.ctx, env.p, *ref)
	if err != nil {
		return err
	}
	tools, err := env.p.ToolSet(c.ctx)
	if err != nil {
		return err
	}
	o := eval.Options{Set: env.set, Agent: d, Tools: tools, Gateway: env.gw, Rates: env.rates, Parallel: *parallel,
		TaskTimeout: *timeout, Progress: c.progress(fmt.Sprintf("eval %s@%d", d.Agent, d.Version))}
	if *keep != "" {
		if err := os.MkdirAll(*keep, 0o700); err != nil {
			return err
		}
		o.WorkDir, o.Keep = *keep, true
	}
	if *record {
		o.Record = func(ctx context.Context, from *platform.Platform, runID string) error {
			return eval.CopyRun(ctx, from.Store, env.p.Store, runID)
		}
	}
	rep, err := eval.Run(c.ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(c.out).Encode(reportJSON(rep)); err != nil {
			return err
		}
	} else {
		printReport(c.out, rep)
		if *record {
			fmt.Fprintf(c.out, "\nrecorded %d runs in %s; replay them on another version with:\n  agentplane eval compare %s@%d NAME@VERSION --set %s --runs agent=%s --data %s\n",
				len(rep.Results), cm.data, d.Agent, d.Version, pos[0], d.Agent, cm.data)
		}
	}
	if n := rep.Failed(); n > 0 {
		return exitCode{1, fmt.Sprintf("eval: %d of %d tasks failed", n, len(rep.Results))}
	}
	return nil
}

func (c *command) evalCompare(args []string) error {
	var cm common
	fs := c.flags("eval compare", &cm)
	setPath := fs.String("set", "", "the eval set: its tasks' worlds and expectations judge the runs (required)")
	query := fs.String("runs", "", "replay recorded runs selected by QUERY (agent=NAME,status=S,tenant=T,version=V,limit=N); without it the set's tasks run live on both versions")
	thresholdsFile := fs.String("thresholds", "", "YAML file of thresholds (see docs/design/evals.md)")
	th := eval.DefaultThresholds()
	fs.Float64Var(&th.MaxSuccessDrop, "max-success-drop", th.MaxSuccessDrop, "largest allowed drop in task success (fraction, 0.05 = 5 points)")
	fs.Float64Var(&th.MaxCostIncrease, "max-cost-increase", th.MaxCostIncrease, "largest allowed relative rise in cost per successful task")
	fs.Float64Var(&th.MaxStepsP95Increase, "max-steps-p95-increase", th.MaxStepsP95Increase, "largest allowed relative rise in p95 steps")
	fs.Float64Var(&th.MaxOverrideIncrease, "max-override-increase", th.MaxOverrideIncrease, "largest allowed rise in the approval-override rate (fraction)")
	fs.Float64Var(&th.MaxToolErrorIncrease, "max-tool-error-increase", th.MaxToolErrorIncrease, "largest allowed rise in the tool error rate (fraction)")
	fs.Float64Var(&th.MaxStoppedRateIncrease, "max-stopped-increase", th.MaxStoppedRateIncrease, "largest allowed rise in runs stopped by budgets or loop detection (fraction)")
	parallel := fs.Int("parallel", 4, "runs at once, each in its own simulated environment")
	asJSON := fs.Bool("json", false, "print the comparison as JSON")
	timeout := fs.Duration("task-timeout", 2*time.Minute, "bound on each run")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 || *setPath == "" {
		return exitCode{2, evalUsage}
	}
	if *thresholdsFile != "" {
		// Flags given explicitly win over the file.
		fromFile, err := eval.LoadThresholds(*thresholdsFile)
		if err != nil {
			return err
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		merge := func(name string, dst *float64, v float64) {
			if !set[name] {
				*dst = v
			}
		}
		merge("max-success-drop", &th.MaxSuccessDrop, fromFile.MaxSuccessDrop)
		merge("max-cost-increase", &th.MaxCostIncrease, fromFile.MaxCostIncrease)
		merge("max-steps-p95-increase", &th.MaxStepsP95Increase, fromFile.MaxStepsP95Increase)
		merge("max-override-increase", &th.MaxOverrideIncrease, fromFile.MaxOverrideIncrease)
		merge("max-tool-error-increase", &th.MaxToolErrorIncrease, fromFile.MaxToolErrorIncrease)
		merge("max-stopped-increase", &th.MaxStoppedRateIncrease, fromFile.MaxStoppedRateIncrease)
	}
	if err := th.Validate(); err != nil {
		return exitCode{2, "eval compare: " + err.Error()}
	}
	env, err := c.openEval(&cm, *setPath, "")
	if err != nil {
		return err
	}
	defer env.p.Close()
	base, err := resolveVersion(c.ctx, env.p, pos[0])
	if err != nil {
		return err
	}
	cand, err := resolveVersion(c.ctx, env.p, pos[1])
	if err != nil {
		return err
	}
	tools, err := env.p.ToolSet(c.ctx)
	if err != nil {
		return err
	}
	o := eval.CompareOptions{Set: env.set, Base: base, Candidate: cand, Source: env.p, Tools: tools, Gateway: env.gw, Rates: env.rates,
		Parallel: *parallel, TaskTimeout: *timeout, Thresholds: th, Progress: c.progress("eval compare")}
	if *query != "" {
		q, err := eval.ParseRunQuery(*query)
		if err != nil {
			return exitCode{2, "eval compare: " + err.Error()}
		}
		switch {
		case q.Agent == "":
			q.Agent = env.set.Agent
		case q.Agent != env.set.Agent:
			return exitCode{2, fmt.Sprintf("eval compare: --runs selects runs of %s, but the set is for %s", q.Agent, env.set.Agent)}
		}
		if o.Runs, err = eval.SelectRuns(c.ctx, env.p.Store, q); err != nil {
			return err
		}
		if len(o.Runs) == 0 {
			return exitCode{1, fmt.Sprintf("eval compare: --runs %s selected no ended runs in %s", *query, cm.data)}
		}
	}
	cmp, err := eval.Compare(c.ctx, o)
	if err != nil {
		return err
	}
	if *asJSON {
		if err := json.NewEncoder(c.out).Encode(compareJSON(cmp, th)); err != nil {
			return err
		}
	} else {
		printComparison(c.out, cmp, *query)
	}
	if len(cmp.Regressions) > 0 {
		return exitCode{1, fmt.Sprintf("eval compare: %s regresses beyond the thresholds (%d)", cmp.Candidate.Version, len(cmp.Regressions))}
	}
	return nil
}

// progress reports on stderr: one line redrawn in place on a terminal,
// plain lines otherwise (logs, CI).
func (c *command) progress(label string) func(eval.Progress) {
	tty := false
	if f, ok := c.err.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("TERM") != "dumb" {
			tty = true
		}
	}
	start := time.Now()
	return func(p eval.Progress) {
		el := time.Since(start).Round(100 * time.Millisecond)
		if !tty {
			if p.Last == nil {
				return
			}
			verdict := "pass"
			if !p.Last.Passed() {
				verdict = "FAIL"
			}
			what := p.Last.Task.ID
			if p.Last.Of != "" {
				what = p.Last.Of + " (" + p.Last.Task.ID + ")"
			}
			fmt.Fprintf(c.err, "%s: %d/%d %s on %s: %s (%s)\n", label, p.Done, p.Total, what, p.Last.Version, verdict, p.Last.Duration.Round(time.Millisecond))
			return
		}
		const width = 30
		fill := width * p.Done / max(p.Total, 1)
		bar := strings.Repeat("=", fill)
		if fill < width {
			bar += ">" + strings.Repeat(" ", width-fill-1)
		}
		fmt.Fprintf(c.err, "\r\033[K%s [%s] %d/%d  %d failed  %s", label, bar, p.Done, p.Total, p.Failed, el)
		if p.Done == p.Total {
			fmt.Fprintln(c.err)
		}
	}
}

func printReport(w io.Writer, rep *eval.Report) {
	tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tRESULT\tSTEPS\tCOST\tAPPROVED/ASKED\tTIME\tFIRST FAILURE")
	for _, r := range rep.Results {
		verdict, steps, cost, appr, first := "pass", "-", "-", "-", ""
		if !r.Passed() {
			verdict = "FAIL"
		}
		if o := r.Outcome; o != nil {
			steps = fmt.Sprint(o.Steps)
			cost = money(o.CostMicros, o.Currency)
			appr = fmt.Sprintf("%d/%d", o.Approvals.Requested-o.Approvals.Overridden(), o.Approvals.Requested)
		}
		switch {
		case r.Err != nil:
			first = "error: " + r.Err.Error()
		case len(r.Failures) > 0:
			first = r.Failures[0]
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Task.ID, verdict, steps, cost, appr, r.Duration.Round(10*time.Millisecond), clean(first, 90))
	}
	tw.Flush()
	if rep.Failed() > 0 {
		fmt.Fprintln(w, "\nfailures:")
		for _, r := range rep.Results {
			if r.Passed() {
				continue
			}
			fmt.Fprintf(w, "  %s", r.Task.ID)
			if r.Outcome != nil {
				fmt.Fprintf(w, " (run %s)", r.Outcome.RunID)
			}
			fmt.Fprintln(w)
			if r.Err != nil {
				fmt.Fprintf(w, "    error: %v\n", r.Err)
			}
			for _, f := range r.Failures {
				fmt.Fprintf(w, "    %s\n", f)
			}
		}
	}
	m := rep.Metrics
	fmt.Fprintf(w, "\n%s on %s: %d of %d tasks passed, %d failed, in %s\n", rep.Version, rep.Set.Name, m.Passed, m.Runs, m.Runs-m.Passed, rep.Elapsed.Round(100*time.Millisecond))
	printMetrics(w, []string{""}, []eval.Metrics{m})
}

// printMetrics prints one column of metrics per version.
func printMetrics(w io.Writer, heads []string, ms []eval.Metrics) {
	tw := tabwriter.NewWriter(w, 0, 2, 3, ' ', 0)
	if len(heads) > 1 {
		fmt.Fprintf(tw, "\t%s\n", strings.Join(heads, "\t"))
	}
	row := func(name string, f func(eval.Metrics) string) {
		cells := make([]string, len(ms))
		for i, m := range ms {
			cells[i] = f(m)
		}
		fmt.Fprintf(tw, "  %s\t%s\n", name, strings.Join(cells, "\t"))
	}
	row("task success", func(m eval.Metrics) string { return fmt.Sprintf("%.1f%% (%d/%d)", 100*m.SuccessRate, m.Passed, m.Runs) })
	row("cost per successful task", func(m eval.Metrics) string { return m.CostString() })
	row("steps p50 / p95", func(m eval.Metrics) string { return fmt.Sprintf("%d / %d", m.StepsP50, m.StepsP95) })
	row("approval-override rate", func(m eval.Metrics) string {
		return fmt.Sprintf("%.1f%% (%d of %d)", 100*m.OverrideRate, m.ApprovalsOverridden, m.ApprovalsRequested)
	})
	row("tool error rate", func(m eval.Metrics) string {
		return fmt.Sprintf("%.1f%% (%d of %d)", 100*m.ToolErrorRate, m.ToolErrors, m.ToolCalls)
	})
	row("stopped by budget or loop", func(m eval.Metrics) string { return fmt.Sprintf("%.1f%% (%d)", 100*m.StoppedRate, m.Stopped) })
	if ms[0].Diverged > 0 || (len(ms) > 1 && ms[1].Diverged > 0) {
		row("replays that diverged", func(m eval.Metrics) string { return fmt.Sprint(m.Diverged) })
	}
	if ms[0].Errors > 0 || (len(ms) > 1 && ms[1].Errors > 0) {
		row("harness errors", func(m eval.Metrics) string { return fmt.Sprint(m.Errors) })
	}
	tw.Flush()
}

func printComparison(w io.Writer, c *eval.Comparison, query string) {
	n := len(c.Base.Results)
	if c.Mode == "replay" {
		fmt.Fprintf(w, "eval compare: %d recorded runs (%s) replayed live on %s and %s, each in a fresh simulated world; %d matched no task of %s\n\n",
			n, query, c.Base.Version, c.Candidate.Version, c.Unmatched, c.Base.Set.Name)
	} else {
		fmt.Fprintf(w, "eval compare: the %d tasks of %s run live on %s and %s\n\n", n, c.Base.Set.Name, c.Base.Version, c.Candidate.Version)
	}
	printMetrics(w, []string{"BASE " + c.Base.Version, "CANDIDATE " + c.Candidate.Version}, []eval.Metrics{c.Base.Metrics, c.Candidate.Metrics})
	var worse, better []string
	for i := range c.Base.Results {
		b, k := c.Base.Results[i], c.Candidate.Results[i]
		name := b.Task.ID
		if b.Of != "" {
			name = fmt.Sprintf("%s (%s)", b.Of, b.Task.ID)
		}
		switch {
		case b.Passed() && !k.Passed():
			why := ""
			if k.Err != nil {
				why = "error: " + k.Err.Error()
			} else if len(k.Failures) > 0 {
				why = k.Failures[0]
			}
			worse = append(worse, fmt.Sprintf("  %s: %s", name, clean(why, 110)))
		case !b.Passed() && k.Passed():
			better = append(better, "  "+name)
		}
	}
	if len(worse) > 0 {
		fmt.Fprintf(w, "\npass on %s, fail on %s (%d):\n%s\n", c.Base.Version, c.Candidate.Version, len(worse), strings.Join(worse, "\n"))
	}
	if len(better) > 0 {
		fmt.Fprintf(w, "\nfail on %s, pass on %s (%d):\n%s\n", c.Base.Version, c.Candidate.Version, len(better), strings.Join(better, "\n"))
	}
	if len(c.Regressions) == 0 {
		fmt.Fprintf(w, "\nok: %s does not regress beyond the thresholds (%s)\n", c.Candidate.Version, c.Elapsed.Round(100*time.Millisecond))
		return
	}
	fmt.Fprintf(w, "\nregressions beyond the thresholds:\n")
	for _, r := range c.Regressions {
		fmt.Fprintf(w, "  - %s\n", r)
	}
}

// JSON shapes of the reports.

type taskJSON struct {
	Task      string   `json:"task"`
	Of        string   `json:"replay_of,omitempty"`
	Version   string   `json:"version"`
	Run       string   `json:"run,omitempty"`
	Passed    bool     `json:"passed"`
	Status    string   `json:"status,omitempty"`
	Steps     int      `json:"steps"`
	Cost      string   `json:"cost,omitempty"`
	Failures  []string `json:"failures,omitempty"`
	Error     string   `json:"error,omitempty"`
	Diverged  bool     `json:"diverged,omitempty"`
	ElapsedMS int64    `json:"elapsed_ms"`
}

func tasksJSON(rs []*eval.TaskResult) []taskJSON {
	out := []taskJSON{}
	for _, r := range rs {
		t := taskJSON{Task: r.Task.ID, Of: r.Of, Version: r.Version, Passed: r.Passed(), Failures: r.Failures, ElapsedMS: r.Duration.Milliseconds()}
		if r.Err != nil {
			t.Error = r.Err.Error()
		}
		if o := r.Outcome; o != nil {
			t.Run, t.Status, t.Steps, t.Cost, t.Diverged = o.RunID, o.Status, o.Steps, money(o.CostMicros, o.Currency), o.Diverged != nil
		}
		out = append(out, t)
	}
	return out
}

func reportJSON(rep *eval.Report) any {
	return map[string]any{"set": rep.Set.Name, "version": rep.Version, "tasks": tasksJSON(rep.Results), "metrics": rep.Metrics,
		"elapsed_ms": rep.Elapsed.Milliseconds()}
}

func compareJSON(c *eval.Comparison, th eval.Thresholds) any {
	regs := c.Regressions
	if regs == nil {
		regs = []string{}
	}
	return map[string]any{"mode": c.Mode, "unmatched": c.Unmatched, "thresholds": th, "regressions": regs,
		"base":      map[string]any{"version": c.Base.Version, "metrics": c.Base.Metrics, "tasks": tasksJSON(c.Base.Results)},
		"candidate": map[string]any{"version": c.Candidate.Version, "metrics": c.Candidate.Metrics, "tasks": tasksJSON(c.Candidate.Results)}}
}
