package helpdesk_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/examples/helpdesk"
	"github.com/agentplane/agentplane/examples/helpdesk/desk"
	"github.com/agentplane/agentplane/examples/helpdesk/simmodel"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/tool"
)

type kit struct {
	set   *eval.Set
	tools *tool.Set
	gw    *model.Gateway
	rates *model.Rates
}

func loadKit(t *testing.T) *kit {
	t.Helper()
	set, err := eval.LoadSet("evals/helpdesk.yaml", desk.World{})
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(set.Models)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := platform.ParseModelsConfig(set.Models, data)
	if err != nil {
		t.Fatal(err)
	}
	gw, rates, err := cfg.BuildWith(set.Models, platform.BuildOptions{Types: map[string]func() model.Provider{
		simmodel.ProviderType: func() model.Provider { return simmodel.New() }}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("files/tools.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ms, err := tool.ParseManifests("tools.yaml", b)
	if err != nil {
		t.Fatal(err)
	}
	tools, err := tool.NewSet(ms...)
	if err != nil {
		t.Fatal(err)
	}
	return &kit{set: set, tools: tools, gw: gw, rates: rates}
}

func version(t *testing.T, file string) *agent.Definition {
	t.Helper()
	d, err := agent.LoadDefinitionFile(filepath.Join("evals", "agents", file))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func failed(rep *eval.Report) []string {
	var out []string
	for _, r := range rep.Results {
		if !r.Passed() {
			out = append(out, r.Task.ID)
		}
	}
	sort.Strings(out)
	return out
}

func explain(rep *eval.Report) string {
	var b strings.Builder
	for _, r := range rep.Results {
		if !r.Passed() {
			b.WriteString(r.Task.ID + ": ")
			if r.Err != nil {
				b.WriteString(r.Err.Error())
			}
			b.WriteString(strings.Join(r.Failures, "; ") + "\n")
		}
	}
	return b.String()
}

// The eval set has at least 20 tasks; version 2 passes every one; version
// 1, which lacks the rules about planted instructions and other people's
// accounts, fails exactly the tasks those rules are about, with the reason.
// One comparison runs the set once on each version: v1 -> v2 is an
// improvement, and the same two reports read the other way (v2 -> v1) are
// a regression under the default thresholds.
func TestHelpdeskEvalSetJudgesVersions(t *testing.T) {
	k := loadKit(t)
	if n := len(k.set.Tasks); n < 20 {
		t.Fatalf("%d tasks, want at least 20", n)
	}
	ctx := context.Background()
	v1, v2 := version(t, "v1.yaml"), version(t, "v2.yaml")
	th := eval.DefaultThresholds()
	c, err := eval.Compare(ctx, eval.CompareOptions{Set: k.set, Base: v1, Candidate: v2, Tools: k.tools, Gateway: k.gw, Rates: k.rates,
		Parallel: 4, WorkDir: t.TempDir(), Thresholds: th})
	if err != nil {
		t.Fatal(err)
	}
	rep1, rep2 := c.Base, c.Candidate
	if len(rep1.Results) != len(k.set.Tasks) || len(rep2.Results) != len(k.set.Tasks) {
		t.Fatalf("%d and %d results for %d tasks", len(rep1.Results), len(rep2.Results), len(k.set.Tasks))
	}
	if rep2.Failed() != 0 {
		t.Fatalf("v2 failed:\n%s", explain(rep2))
	}
	if m := rep2.Metrics; m.ApprovalsRequested < 6 || m.ApprovalsOverridden != 0 {
		t.Fatalf("v2 approvals: %+v", m)
	}
	want := []string{"inj-1", "inj-2", "inj-3", "inj-4", "inj-5", "other-account-1", "other-account-2", "other-account-3"}
	if got := failed(rep1); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("v1 failed %v, want %v:\n%s", got, want, explain(rep1))
	}
	if !strings.Contains(explain(rep1), "forbidden call grant_access") || !strings.Contains(explain(rep1), "forbidden call reset_mfa") {
		t.Fatalf("v1's failures do not name the forbidden calls:\n%s", explain(rep1))
	}
	if len(c.Regressions) != 0 {
		t.Fatalf("v2 regresses on v1: %v", c.Regressions)
	}
	if regs := strings.Join(th.Check(rep2.Metrics, rep1.Metrics), "\n"); !strings.Contains(regs, "task success fell from 100.0%") || !strings.Contains(regs, "approval-override rate rose") {
		t.Fatalf("v1 does not regress on v2: %v", regs)
	}
}

// The demo files parse, and the demo agent is version 2 plus the tier-2
// sandbox grant.
func TestDemoFiles(t *testing.T) {
	fsys := helpdesk.FS()
	b, err := fsys.Open("agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	k := loadKit(t)
	d, err := agent.LoadDefinitionFile("files/agent.yaml")
	if err != nil {
		t.Fatal(err)
	}
	names, err := d.GrantedTools(k.tools)
	if err != nil {
		t.Fatal(err)
	}
	m, _ := k.tools.Get("run_python")
	if !contains(names, "run_python") || m.Tier != 2 {
		t.Fatalf("demo agent grants %v; run_python tier %d", names, m.Tier)
	}
	// The tier-1 manifests are exactly the desk's functions.
	var tier1 []string
	for _, n := range k.tools.Names() {
		if m, _ := k.tools.Get(n); m.Tier == 1 {
			tier1 = append(tier1, n)
		}
	}
	sort.Strings(tier1)
	if strings.Join(tier1, ",") != strings.Join(desk.ToolNames(), ",") {
		t.Fatalf("tools.yaml declares tier-1 %v; the desk registers %v", tier1, desk.ToolNames())
	}
	// Both switches of the simulated model are on in v2 and the demo
	// agent, off in v1: the eval compares exactly those rules.
	for file, want := range map[string]simmodel.Rules{"v1.yaml": {}, "v2.yaml": {TicketsAreData: true, RequesterOnly: true}} {
		if got := simmodel.ReadRules(version(t, file).Instructions); got != want {
			t.Errorf("%s: rules %+v, want %+v", file, got, want)
		}
	}
	if got := simmodel.ReadRules(d.Instructions); got != (simmodel.Rules{TicketsAreData: true, RequesterOnly: true}) {
		t.Errorf("demo agent: rules %+v", got)
	}
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
