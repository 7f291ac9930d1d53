package eval

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/tool"
)

// TaskResult is one graded run.
type TaskResult struct {
	Task *Task
	// Version is the agent version the run used ("name@7").
	Version string
	// Of is, for a replay, the recorded run it replays.
	Of      string
	Outcome *Outcome
	// Failures lists the expectations the outcome missed.
	Failures []string
	// Err is a failure of the harness (the run could not be completed);
	// such a task counts as failed.
	Err error
	// Duration is the whole task; Setup the part spent building its
	// environment (platform, world, fixture; for a replay, the copy of the
	// recorded run).
	Duration, Setup time.Duration
}

// Passed reports whether the run completed and met every expectation.
func (r *TaskResult) Passed() bool { return r.Err == nil && r.Outcome != nil && len(r.Failures) == 0 }

// Report is the result of an eval run: one result per task, in the set's
// order, and their metrics.
type Report struct {
	Set     *Set
	Version string
	Results []*TaskResult
	Metrics Metrics
	Elapsed time.Duration
}

// Failed counts the results that did not pass.
func (r *Report) Failed() int {
	n := 0
	for _, t := range r.Results {
		if !t.Passed() {
			n++
		}
	}
	return n
}

// Progress is reported once before the first task starts (Last nil) and
// then as each task ends.
type Progress struct {
	Done, Total, Failed int
	Last                *TaskResult
}

// Options configure Run.
type Options struct {
	Set *Set
	// Agent is the version under test.
	Agent *agent.Definition
	// Tools are the manifests the agent's grants resolve against.
	Tools *tool.Set
	// Gateway and Rates serve the model calls of every environment.
	Gateway loop.Models
	Rates   *model.Rates
	// Parallel is how many tasks run at once (default: the number of CPUs).
	Parallel int
	// WorkDir holds the environments' directories (default: the system's
	// temporary directory). Keep leaves them there after the run.
	WorkDir string
	Keep    bool
	// TaskTimeout bounds each task (default 2 minutes).
	TaskTimeout time.Duration
	// Progress, when set, is called after each task, one call at a time.
	Progress func(Progress)
	// Record, when set, is called with each finished run's platform before
	// its environment is removed (to keep the run: CopyRun).
	Record func(ctx context.Context, p *platform.Platform, runID string) error
}

// Run runs every task of the set against the agent version, each in a
// fresh simulated environment of its own, in parallel, and grades them.
// Before anything runs it refuses an agent granted a tool with no
// simulator, and a set written for another agent.
func Run(ctx context.Context, o Options) (*Report, error) {
	w, err := prepare(o.Set, o.Tools, o.Gateway, o.Rates, o.WorkDir, o.Keep, o.Agent)
	if err != nil {
		return nil, err
	}
	ref := fmt.Sprintf("%s@%d", o.Agent.Agent, o.Agent.Version)
	start := time.Now()
	rep := &Report{Set: o.Set, Version: ref, Results: make([]*TaskResult, len(o.Set.Tasks))}
	jobs := make([]func(context.Context) *TaskResult, len(o.Set.Tasks))
	for i, t := range o.Set.Tasks {
		jobs[i] = func(ctx context.Context) *TaskResult { return w.runTask(ctx, t, o.Agent, o.Record) }
	}
	rep.Results = runJobs(ctx, jobs, o.Parallel, o.TaskTimeout, o.Progress)
	rep.Metrics = Summarise(rep.Results)
	rep.Elapsed = time.Since(start)
	return rep, ctx.Err()
}

// prepare checks what every environment needs, once, before any runs.
func prepare(s *Set, tools *tool.Set, gw loop.Models, rates *model.Rates, workDir string, keep bool, agents ...*agent.Definition) (*harness, error) {
	if s == nil || len(s.Tasks) == 0 {
		return nil, errors.New("eval: no tasks")
	}
	if s.World == nil {
		return nil, errors.New("eval: the set has no world")
	}
	if gw == nil {
		return nil, errors.New("eval: no models configured")
	}
	w := &harness{set: s, gateway: gw, rates: rates, workDir: workDir, keep: keep}
	seen := map[string]bool{}
	for _, d := range agents {
		if d.Agent != s.Agent {
			return nil, fmt.Errorf("eval: set %s (%s) is written for agent %s, not %s", s.Name, s.File, s.Agent, d.Agent)
		}
		ms, err := granted(s.World, d, tools)
		if err != nil {
			return nil, fmt.Errorf("eval: %w", err)
		}
		for _, m := range ms {
			if !seen[m.Name] {
				seen[m.Name] = true
				w.tools = append(w.tools, m)
			}
		}
	}
	if gwy, ok := gw.(*model.Gateway); ok {
		for _, d := range agents {
			if _, ok := gwy.Alias(d.Model.Alias); !ok {
				return nil, fmt.Errorf("eval: %s@%d uses model alias %q, which the models configuration does not define", d.Agent, d.Version, d.Model.Alias)
			}
		}
	}
	return w, nil
}

// runJobs runs jobs with at most parallel at once, reporting progress.
func runJobs(ctx context.Context, jobs []func(context.Context) *TaskResult, parallel int, timeout time.Duration, progress func(Progress)) []*TaskResult {
	if parallel <= 0 {
		parallel = runtime.NumCPU()
	}
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	out := make([]*TaskResult, len(jobs))
	if progress != nil {
		progress(Progress{Total: len(jobs)})
	}
	var mu sync.Mutex
	done, failed := 0, 0
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, job := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			tctx, cancel := context.WithTimeout(ctx, timeout)
			start := time.Now()
			r := job(tctx)
			cancel()
			r.Duration = time.Since(start)
			mu.Lock()
			defer mu.Unlock()
			out[i] = r
			done++
			if !r.Passed() {
				failed++
			}
			if progress != nil {
				progress(Progress{Done: done, Total: len(jobs), Failed: failed, Last: r})
			}
		}()
	}
	wg.Wait()
	return out
}

// runTask runs one task live in a fresh environment and grades it.
func (w *harness) runTask(ctx context.Context, t *Task, d *agent.Definition, record func(context.Context, *platform.Platform, string) error) *TaskResult {
	res := &TaskResult{Task: t, Version: fmt.Sprintf("%s@%d", d.Agent, d.Version)}
	start := time.Now()
	e, err := w.openEnv(ctx, t.ID, t, w.set.Tenant, "", d)
	if err != nil {
		res.Err = err
		return res
	}
	defer e.close()
	res.Setup = time.Since(start)
	run, err := e.p.Runs.Start(ctx, runs.StartRequest{Agent: res.Version, Task: t.Text, Tenant: w.set.Tenant, User: w.set.User, Mode: "async"})
	if err != nil {
		res.Err = fmt.Errorf("task %s: %w", t.ID, err)
		return res
	}
	if _, err := e.drive(ctx, run.ID, &t.Approvals); err != nil {
		res.Err = fmt.Errorf("task %s: %w", t.ID, err)
		return res
	}
	o, err := collect(ctx, e, run.ID)
	if err == nil {
		err = readWorld(ctx, e, o)
	}
	if err != nil {
		res.Err = fmt.Errorf("task %s: %w", t.ID, err)
		return res
	}
	res.Outcome = o
	res.Failures = Grade(t, o)
	if record != nil {
		if err := record(ctx, e.p, run.ID); err != nil {
			res.Err = fmt.Errorf("task %s: record the run: %w", t.ID, err)
		}
	}
	return res
}
