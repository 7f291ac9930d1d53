package eval

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// RunQuery selects recorded runs: agent=NAME,status=completed,tenant=T,
// version=7,limit=50. Replays (runs with a parent) are never selected.
type RunQuery struct {
	Agent, Status, Tenant string
	Version               int
	Limit                 int
}

// ParseRunQuery parses "key=value,key=value".
func ParseRunQuery(s string) (RunQuery, error) {
	var q RunQuery
	if strings.TrimSpace(s) == "" {
		return q, errors.New("empty run query (want e.g. agent=NAME,status=completed,limit=50)")
	}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || v == "" {
			return q, fmt.Errorf("run query: %q is not key=value", part)
		}
		switch k {
		case "agent":
			q.Agent = v
		case "status":
			q.Status = v
		case "tenant":
			q.Tenant = v
		case "version", "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return q, fmt.Errorf("run query: %s=%q: want a positive number", k, v)
			}
			if k == "version" {
				q.Version = n
			} else {
				q.Limit = n
			}
		default:
			return q, fmt.Errorf("run query: unknown key %q (known: agent, status, tenant, version, limit)", k)
		}
	}
	return q, nil
}

// SelectRuns lists the ended, non-replay runs of st matching q, newest
// last; with a limit, the newest q.Limit.
func SelectRuns(ctx context.Context, st store.RunStore, q RunQuery) ([]*store.Run, error) {
	rs, err := st.ListRuns(ctx, store.RunFilter{Agent: q.Agent, Status: q.Status, Tenant: q.Tenant})
	if err != nil {
		return nil, err
	}
	var out []*store.Run
	for _, r := range rs {
		if r.ParentRunID != "" || !store.Terminal(r.Status) || (q.Version > 0 && r.AgentVersion != q.Version) {
			continue
		}
		out = append(out, r)
	}
	if q.Limit > 0 && len(out) > q.Limit {
		out = out[len(out)-q.Limit:]
	}
	return out, nil
}

// Thresholds say how much worse the candidate may be than the base before
// the comparison fails. Rates are fractions (0.02 is two points);
// increases of cost and steps are relative (0.10 is ten per cent).
type Thresholds struct {
	MaxSuccessDrop         float64 `yaml:"max_success_drop" json:"max_success_drop"`
	MaxCostIncrease        float64 `yaml:"max_cost_per_success_increase" json:"max_cost_per_success_increase"`
	MaxStepsP95Increase    float64 `yaml:"max_steps_p95_increase" json:"max_steps_p95_increase"`
	MaxOverrideIncrease    float64 `yaml:"max_override_rate_increase" json:"max_override_rate_increase"`
	MaxToolErrorIncrease   float64 `yaml:"max_tool_error_rate_increase" json:"max_tool_error_rate_increase"`
	MaxStoppedRateIncrease float64 `yaml:"max_stopped_rate_increase" json:"max_stopped_rate_increase"`
}

// DefaultThresholds fit deterministic evals: no drop in success, override
// rate or stopped runs; cost per success up to 10 %, p95 steps up to 25 %,
// tool errors up to 2 points.
func DefaultThresholds() Thresholds {
	return Thresholds{MaxCostIncrease: 0.10, MaxStepsP95Increase: 0.25, MaxToolErrorIncrease: 0.02}
}

// LoadThresholds reads thresholds from YAML over the defaults, strictly.
func LoadThresholds(path string) (Thresholds, error) {
	t := DefaultThresholds()
	data, err := os.ReadFile(path)
	if err != nil {
		return t, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&t); err != nil {
		return t, fmt.Errorf("%s: %w", path, err)
	}
	if err := t.Validate(); err != nil {
		return t, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Validate refuses negative thresholds.
func (t Thresholds) Validate() error {
	for name, v := range map[string]float64{"max_success_drop": t.MaxSuccessDrop, "max_cost_per_success_increase": t.MaxCostIncrease,
		"max_steps_p95_increase": t.MaxStepsP95Increase, "max_override_rate_increase": t.MaxOverrideIncrease,
		"max_tool_error_rate_increase": t.MaxToolErrorIncrease, "max_stopped_rate_increase": t.MaxStoppedRateIncrease} {
		if v < 0 {
			return fmt.Errorf("%s must not be negative", name)
		}
	}
	return nil
}

const eps = 1e-9

// Check lists the ways the candidate regresses beyond the thresholds.
func (t Thresholds) Check(base, cand Metrics) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if cand.Errors > 0 {
		bad("%d candidate runs could not be completed by the harness", cand.Errors)
	}
	if d := base.SuccessRate - cand.SuccessRate; d > t.MaxSuccessDrop+eps {
		bad("task success fell from %.1f%% to %.1f%% (allowed drop %.1f points)", 100*base.SuccessRate, 100*cand.SuccessRate, 100*t.MaxSuccessDrop)
	}
	// With no success at all the cost per success is undefined; the
	// success threshold speaks for that case.
	if cand.CostPerSuccess >= 0 && base.CostPerSuccess > 0 {
		if inc := float64(cand.CostPerSuccess)/float64(base.CostPerSuccess) - 1; inc > t.MaxCostIncrease+eps {
			bad("cost per successful task rose %.0f%%, from %s to %s (allowed %.0f%%)", 100*inc, base.CostString(), cand.CostString(), 100*t.MaxCostIncrease)
		}
	}
	if base.StepsP95 > 0 {
		if inc := float64(cand.StepsP95)/float64(base.StepsP95) - 1; inc > t.MaxStepsP95Increase+eps {
			bad("p95 steps rose from %d to %d (allowed %.0f%%)", base.StepsP95, cand.StepsP95, 100*t.MaxStepsP95Increase)
		}
	}
	if d := cand.OverrideRate - base.OverrideRate; d > t.MaxOverrideIncrease+eps {
		bad("approval-override rate rose from %.1f%% to %.1f%% (allowed %.1f points)", 100*base.OverrideRate, 100*cand.OverrideRate, 100*t.MaxOverrideIncrease)
	}
	if d := cand.ToolErrorRate - base.ToolErrorRate; d > t.MaxToolErrorIncrease+eps {
		bad("tool error rate rose from %.1f%% to %.1f%% (allowed %.1f points)", 100*base.ToolErrorRate, 100*cand.ToolErrorRate, 100*t.MaxToolErrorIncrease)
	}
	if d := cand.StoppedRate - base.StoppedRate; d > t.MaxStoppedRateIncrease+eps {
		bad("runs stopped by budgets or loop detection rose from %.1f%% to %.1f%% (allowed %.1f points)", 100*base.StoppedRate, 100*cand.StoppedRate, 100*t.MaxStoppedRateIncrease)
	}
	return out
}

// CompareOptions configure Compare.
type CompareOptions struct {
	Set             *Set
	Base, Candidate *agent.Definition
	// Source holds the recorded runs. With Runs set, each is replayed on
	// both versions; with Runs nil, the set's tasks are run live on both.
	Source *platform.Platform
	Runs   []*store.Run
	Tools  *tool.Set
	// Gateway, Rates, Parallel, WorkDir, Keep, TaskTimeout and Progress are
	// as in Options.
	Gateway     loop.Models
	Rates       *model.Rates
	Parallel    int
	WorkDir     string
	Keep        bool
	TaskTimeout time.Duration
	Progress    func(Progress)
	Thresholds  Thresholds
}

// Comparison is the outcome of Compare.
type Comparison struct {
	// Mode is "replay" (recorded runs replayed) or "set" (tasks run live).
	Mode            string
	Base, Candidate *Report
	// Unmatched counts replayed runs whose task is in no task of the set
	// (judged by the set's own expectations on the world's seed state).
	Unmatched   int
	Regressions []string
	Elapsed     time.Duration
}

// Compare measures the base and the candidate version on the same work and
// checks the candidate against the thresholds.
//
// In replay mode every recorded run is replayed twice, once per version,
// each time in a fresh environment of its own: the recorded run is copied
// into it, its simulated world is set up as the matching task's (by task
// text), and runs.Service.Replay re-runs it live from step 1 — the model is
// asked again, calls that match the recording get the recorded results,
// and from the first divergence tools without side effects run against
// the environment's simulated world while calls with side effects get the
// set's replay mocks (or a denial). Nothing reaches the source's world or
// any real system. The withheld calls are then judged as the candidate's
// decisions (see simulateWithheld) and graded like an eval run.
func Compare(ctx context.Context, o CompareOptions) (*Comparison, error) {
	start := time.Now()
	w, err := prepare(o.Set, o.Tools, o.Gateway, o.Rates, o.WorkDir, o.Keep, o.Base, o.Candidate)
	if err != nil {
		return nil, err
	}
	if err := o.Thresholds.Validate(); err != nil {
		return nil, err
	}
	c := &Comparison{Mode: "set"}
	versions := []*agent.Definition{o.Base, o.Candidate}
	var jobs []func(context.Context) *TaskResult
	if o.Runs != nil {
		c.Mode = "replay"
		if len(o.Runs) == 0 {
			return nil, errors.New("eval compare: the run query selected no recorded runs")
		}
		for _, r := range o.Runs {
			t := o.Set.TaskByText(r.Task)
			if t == nil {
				c.Unmatched++
				if t, err = o.Set.Fallback(r.Task); err != nil {
					return nil, fmt.Errorf("eval compare: run %s: %w", r.ID, err)
				}
			}
			for _, d := range versions {
				jobs = append(jobs, func(ctx context.Context) *TaskResult { return w.replayTask(ctx, o.Source, r, t, d) })
			}
		}
	} else {
		for _, t := range o.Set.Tasks {
			for _, d := range versions {
				jobs = append(jobs, func(ctx context.Context) *TaskResult { return w.runTask(ctx, t, d, nil) })
			}
		}
	}
	results := runJobs(ctx, jobs, o.Parallel, o.TaskTimeout, o.Progress)
	c.Base = &Report{Set: o.Set, Version: fmt.Sprintf("%s@%d", o.Base.Agent, o.Base.Version)}
	c.Candidate = &Report{Set: o.Set, Version: fmt.Sprintf("%s@%d", o.Candidate.Agent, o.Candidate.Version)}
	for i, r := range results {
		if i%2 == 0 {
			c.Base.Results = append(c.Base.Results, r)
		} else {
			c.Candidate.Results = append(c.Candidate.Results, r)
		}
	}
	c.Base.Metrics, c.Candidate.Metrics = Summarise(c.Base.Results), Summarise(c.Candidate.Results)
	c.Regressions = o.Thresholds.Check(c.Base.Metrics, c.Candidate.Metrics)
	if c.Base.Metrics.Errors > 0 {
		c.Regressions = append(c.Regressions, fmt.Sprintf("%d base runs could not be completed by the harness; the comparison is not sound", c.Base.Metrics.Errors))
	}
	c.Elapsed = time.Since(start)
	sort.Strings(c.Regressions)
	return c, ctx.Err()
}

// replayTask replays a recorded run on version d in a fresh environment.
func (w *harness) replayTask(ctx context.Context, src *platform.Platform, run *store.Run, t *Task, d *agent.Definition) *TaskResult {
	res := &TaskResult{Task: t, Of: run.ID, Version: fmt.Sprintf("%s@%d", d.Agent, d.Version)}
	start := time.Now()
	e, err := w.openEnv(ctx, "replay", t, run.Tenant, run.User, d)
	if err != nil {
		res.Err = err
		return res
	}
	defer e.close()
	if err := CopyRun(ctx, src.Store, e.p.Store, run.ID); err != nil {
		res.Err = fmt.Errorf("replay of %s: %w", run.ID, err)
		return res
	}
	res.Setup = time.Since(start)
	rp, err := e.p.Runs.Replay(ctx, runs.ReplayRequest{Of: run.ID, FromStep: 1, Agent: res.Version, Mode: trace.ReplayLive, Mocks: w.set.ReplayMocks})
	if err != nil {
		res.Err = fmt.Errorf("replay of %s: %w", run.ID, err)
		return res
	}
	if _, err := e.drive(ctx, rp.ID, &t.Approvals); err != nil {
		res.Err = fmt.Errorf("replay of %s: %w", run.ID, err)
		return res
	}
	o, err := collect(ctx, e, rp.ID)
	if err == nil {
		err = simulateWithheld(ctx, e, o, run.ID, &t.Approvals, run.Tenant, run.User)
	}
	if err == nil {
		err = readWorld(ctx, e, o)
	}
	if err != nil {
		res.Err = fmt.Errorf("replay of %s: %w", run.ID, err)
		return res
	}
	res.Outcome = o
	res.Failures = Grade(t, o)
	return res
}
