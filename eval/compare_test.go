package eval_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/store"
)

// replayTasks are the recorded runs the replay tests use: duplicates below
// and above the approval limit, one above the supervisor's limit, a
// planted instruction, and a charge that is no duplicate.
var replayTasks = map[string]bool{"demo-airline-injected": true, "dup-grocery-small": true, "dup-hotel-over-supervisor-limit": true,
	"inj-exfil-and-refund": true, "notdup-two-amounts-one-day": true}

func replayRuns(t *testing.T) []*store.Run {
	t.Helper()
	p, rep := recorded(t)
	all, err := eval.SelectRuns(context.Background(), p.Store, eval.RunQuery{Agent: "card-dispute-assistant", Status: "completed"})
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range rep.Results {
		if replayTasks[r.Task.ID] {
			ids[r.Outcome.RunID] = true
		}
	}
	var out []*store.Run
	for _, r := range all {
		if ids[r.ID] {
			out = append(out, r)
		}
	}
	if len(out) != len(replayTasks) {
		t.Fatalf("found %d of the %d recorded runs", len(out), len(replayTasks))
	}
	return out
}

func compare(t *testing.T, candidate string, runs []*store.Run, set *eval.Set) *eval.Comparison {
	t.Helper()
	k := loadKit(t)
	p, _ := recorded(t)
	if set == nil {
		set = k.set
	}
	c, err := eval.Compare(context.Background(), eval.CompareOptions{Set: set, Base: loadAgent(t, "v7.yaml"), Candidate: loadAgent(t, candidate),
		Source: p, Runs: runs, Tools: k.tools, Gateway: k.gw, Rates: k.rates, Parallel: 4, WorkDir: t.TempDir(), Thresholds: eval.DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCompareByReplayCatchesAWorseVersion(t *testing.T) {
	ctx := context.Background()
	p, _ := recorded(t)
	before, _ := p.Store.ListRuns(ctx, store.RunFilter{})
	c := compare(t, "v8-refunds-both.yaml", replayRuns(t), nil)
	if c.Mode != "replay" || c.Unmatched != 0 {
		t.Fatalf("mode %s, %d unmatched", c.Mode, c.Unmatched)
	}
	b, k := c.Base.Metrics, c.Candidate.Metrics
	// The base replays reproduce their recordings: nothing diverges and
	// everything passes, at the recorded cost.
	if b.Passed != b.Runs || b.Diverged != 0 || b.Errors != 0 {
		t.Fatalf("base replays: %+v\n%s", b, failures(c.Base))
	}
	// The candidate refunds both charges of each duplicate; the replay
	// withholds the second refund (it is not in the recording) and the
	// grader judges it as the candidate's decision.
	byTask := map[string]*eval.TaskResult{}
	for _, r := range c.Candidate.Results {
		byTask[r.Task.ID] = r
	}
	for id, wantPass := range map[string]bool{"demo-airline-injected": false, "dup-grocery-small": false, "dup-hotel-over-supervisor-limit": false,
		"inj-exfil-and-refund": false, "notdup-two-amounts-one-day": true} {
		r := byTask[id]
		if r.Passed() != wantPass {
			t.Errorf("%s: passed=%v, want %v: %v %v", id, r.Passed(), wantPass, r.Err, r.Failures)
		}
	}
	grocery := byTask["dup-grocery-small"].Outcome
	if grocery.Diverged == nil || len(grocery.Records["refunds"]) != 2 {
		t.Errorf("grocery replay: diverged %+v, simulated refunds %v", grocery.Diverged, grocery.Records["refunds"])
	}
	if k.Diverged != 4 {
		t.Errorf("candidate diverged in %d replays, want the 4 duplicates", k.Diverged)
	}
	if len(c.Regressions) == 0 || !strings.Contains(strings.Join(c.Regressions, "\n"), "task success fell from 100.0% to 20.0%") {
		t.Fatalf("regressions = %v", c.Regressions)
	}
	// Nothing reached the source: no refund at its bank, no new runs.
	if ct, _ := srcBank.Counters(ctx); ct != (bank.Counters{}) {
		t.Fatalf("a replay reached the source bank: %+v", ct)
	}
	if after, _ := p.Store.ListRuns(ctx, store.RunFilter{}); len(after) != len(before) {
		t.Fatalf("replays were written to the source: %d runs, were %d", len(after), len(before))
	}
}

func TestCompareByReplayPassesANeutralChange(t *testing.T) {
	c := compare(t, "v8-reworded.yaml", replayRuns(t), nil)
	if len(c.Regressions) != 0 {
		t.Fatalf("a reworded prompt regresses: %v\n%s", c.Regressions, failures(c.Candidate))
	}
	b, k := c.Base.Metrics, c.Candidate.Metrics
	if k.Passed != k.Runs || k.Diverged != 0 || k.StepsP95 != b.StepsP95 || k.ApprovalsRequested != b.ApprovalsRequested {
		t.Fatalf("candidate %+v\nbase %+v", k, b)
	}
}

// Without recorded runs, the set's tasks run live on both versions.
func TestCompareLiveOnTheSet(t *testing.T) {
	k := loadKit(t)
	set, err := k.set.Filter("inj-exfil-*")
	if err != nil {
		t.Fatal(err)
	}
	c := compare(t, "v8-obeys-tickets.yaml", nil, set)
	if c.Mode != "set" || len(c.Base.Results) != 3 {
		t.Fatalf("mode %s, %d results", c.Mode, len(c.Base.Results))
	}
	regs := strings.Join(c.Regressions, "\n")
	for _, w := range []string{"task success fell from 100.0% to 0.0%", "approval-override rate rose"} {
		if !strings.Contains(regs, w) {
			t.Errorf("regressions do not say %q:\n%s", w, regs)
		}
	}
}
