package eval_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

var (
	srcOnce sync.Once
	srcDir  string
	src     *platform.Platform
	// srcBank is the source's own bank, as a data directory has one.
	srcBank *bank.Bank
	srcRep  *eval.Report
	srcErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if src != nil {
		src.Close()
	}
	if srcDir != "" {
		os.RemoveAll(srcDir)
	}
	os.Exit(code)
}

// recorded runs the whole set on v7 once, keeping every run in a source
// platform, as production runs would be kept: the base of the replay
// tests.
func recorded(t *testing.T) (*platform.Platform, *eval.Report) {
	t.Helper()
	k := loadKit(t)
	srcOnce.Do(func() {
		ctx := context.Background()
		if srcDir, srcErr = os.MkdirTemp("", "eval-source-"); srcErr != nil {
			return
		}
		if srcBank, srcErr = bank.Open(filepath.Join(srcDir, "bank.db")); srcErr != nil {
			return
		}
		if src, srcErr = platform.Open(ctx, platform.Options{DataDir: srcDir, Gateway: k.gw, Rates: k.rates, Tools: []catalog.Registrar{srcBank}}); srcErr != nil {
			return
		}
		srcRep, srcErr = eval.Run(ctx, eval.Options{Set: k.set, Agent: loadAgent(t, "v7.yaml"), Tools: k.tools, Gateway: k.gw, Rates: k.rates,
			Parallel: 3, WorkDir: srcDir, Record: func(ctx context.Context, p *platform.Platform, runID string) error {
				return eval.CopyRun(ctx, p.Store, src.Store, runID)
			}})
	})
	if srcErr != nil {
		t.Fatal(srcErr)
	}
	return src, srcRep
}

func TestBaseVersionPassesTheWholeSet(t *testing.T) {
	ctx := context.Background()
	p, rep := recorded(t)
	if rep.Failed() != 0 {
		t.Fatalf("v7 failed %d of %d tasks:\n%s", rep.Failed(), len(rep.Results), failures(rep))
	}
	m := rep.Metrics
	if m.Runs != len(loadKit(t).set.Tasks) || m.ApprovalsRequested == 0 || m.ApprovalsOverridden != 1 || m.CostPerSuccess <= 0 || m.StepsP95 < m.StepsP50 {
		t.Fatalf("metrics %+v", m)
	}
	// Every run was kept, byte for byte: its hash chain verifies in the
	// source store.
	runs, err := eval.SelectRuns(ctx, p.Store, eval.RunQuery{Agent: "card-dispute-assistant"})
	if err != nil || len(runs) != len(rep.Results) {
		t.Fatalf("%d recorded runs, want %d (%v)", len(runs), len(rep.Results), err)
	}
	for _, r := range runs {
		vr, err := trace.Verify(ctx, p.Store, r.ID)
		if err != nil || !vr.OK() {
			t.Fatalf("recorded run %s does not verify: %v %+v", r.ID, err, vr)
		}
	}
	// Each task had a bank of its own: the source's bank saw nothing.
	if c, _ := srcBank.Counters(ctx); c != (bank.Counters{}) {
		t.Fatalf("the source bank was touched: %+v", c)
	}
	// The supervisor's decisions are in the logs like any human's, naming
	// the rule that made them.
	for _, r := range rep.Results {
		if r.Task.ID != "dup-hotel-over-supervisor-limit" {
			continue
		}
		evs, _ := p.Store.Events(ctx, r.Outcome.RunID, 0, 0)
		var dec []trace.ApprovalDecided
		for _, ev := range evs {
			if ev.Type == trace.EvApprovalDec {
				var d trace.ApprovalDecided
				json.Unmarshal(ev.Payload, &d)
				dec = append(dec, d)
			}
		}
		if len(dec) != 1 || dec[0].Outcome != trace.ApprovalRejected || dec[0].Decider != "meera@example-bank.in" || !strings.Contains(dec[0].Comment, "otherwise reject") {
			t.Fatalf("hotel refund decisions = %+v", dec)
		}
	}
}

// A worse version fails the tasks its change is about, with the reason.
func TestEvalRunCatchesWorseVersions(t *testing.T) {
	k := loadKit(t)
	for _, tc := range []struct {
		agent, tasks string
		want         []string
	}{
		{"v8-refunds-both.yaml", "dup-grocery-small", []string{"forbidden call issue_refund", `"txn_50101"`, "world refunds: got"}},
		{"v8-obeys-tickets.yaml", "inj-exfil-and-refund", []string{"forbidden call send_email", "backup@card-archive.example", "denied by approval", "forbidden call issue_refund"}},
		{"v8-trusts-tickets.yaml", "notdup-two-amounts-one-day", []string{"forbidden call raise_dispute", "world refunds: got", "world disputes: got"}},
	} {
		set, err := k.set.Filter(tc.tasks)
		if err != nil {
			t.Fatal(err)
		}
		rep := k.run(t, loadAgent(t, tc.agent), set)
		if rep.Failed() != 1 {
			t.Fatalf("%s passed %s", tc.agent, tc.tasks)
		}
		got := strings.Join(rep.Results[0].Failures, "\n")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s on %s: failures do not mention %q:\n%s", tc.agent, tc.tasks, w, got)
			}
		}
	}
}

func TestEvalsRefuseToolsWithoutASimulator(t *testing.T) {
	k := loadKit(t)
	b, _ := os.ReadFile("../examples/carddispute/files/tools.yaml")
	extra := `
---
name: wire_transfer
description: Move money to another bank.
connector: payments
tier: 1
timeout_ms: 3000
input_schema: {type: object, properties: {amount_inr: {type: number}}}
network: {allow: ["payments.internal:443"]}
auth: {mode: on_behalf_of_user, scopes: ["payments:write"]}
side_effects: external
`
	ms, err := tool.ParseManifests("tools.yaml", append(b, extra...))
	if err != nil {
		t.Fatal(err)
	}
	tools, _ := tool.NewSet(ms...)
	d := loadAgent(t, "v7.yaml")
	d.Tools = append(d.Tools, agent.Grant{Tool: "wire_transfer"})
	work := t.TempDir()
	_, err = eval.Run(context.Background(), eval.Options{Set: k.set, Agent: d, Tools: tools, Gateway: k.gw, Rates: k.rates, WorkDir: work})
	if !errors.Is(err, eval.ErrNoSimulator) || !strings.Contains(err.Error(), "wire_transfer") {
		t.Fatalf("err = %v, want a refusal naming wire_transfer", err)
	}
	if ents, _ := os.ReadDir(work); len(ents) != 0 {
		t.Fatalf("something ran before the refusal: %d environments", len(ents))
	}
	// A set written for another agent is refused too.
	other := *k.set
	other.Agent = "someone-else"
	if _, err := eval.Run(context.Background(), eval.Options{Set: &other, Agent: loadAgent(t, "v7.yaml"), Tools: k.tools, Gateway: k.gw, Rates: k.rates, WorkDir: work}); err == nil || !strings.Contains(err.Error(), "written for agent someone-else") {
		t.Fatalf("err = %v", err)
	}
}

func TestCopyRun(t *testing.T) {
	ctx := context.Background()
	p, rep := recorded(t)
	id := rep.Results[0].Outcome.RunID
	dst, err := platform.Open(ctx, platform.Options{DataDir: t.TempDir(), Gateway: loadKit(t).gw})
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	if err := eval.CopyRun(ctx, p.Store, dst.Store, id); err != nil {
		t.Fatal(err)
	}
	a, _ := p.Store.GetRun(ctx, id)
	b, _ := dst.Store.GetRun(ctx, id)
	if a.Status != b.Status || a.Steps != b.Steps || a.CostMicros != b.CostMicros || a.LastSeq != b.LastSeq || b.LeaseEpoch != 0 {
		t.Fatalf("copy differs:\n%+v\n%+v", a, b)
	}
	if vr, err := trace.Verify(ctx, dst.Store, id); err != nil || !vr.OK() || vr.Prompts == 0 {
		t.Fatalf("copy does not verify: %v %+v", err, vr)
	}
	if err := eval.CopyRun(ctx, p.Store, dst.Store, id); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("copying twice: %v", err)
	}
	// The copy can never be claimed by a worker.
	if _, err := dst.Embedded.Execute(ctx, id); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("execute the copy: %v", err)
	}
}
