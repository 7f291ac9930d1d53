package carddispute_test

// Tests that read the example with the platform's own parsers (tool
// manifests, agent definitions, scripted model turns) and play the scripted
// run against the simulated bank.

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/tool"
)

func manifests(t *testing.T) map[string]*tool.Manifest {
	t.Helper()
	ms, err := tool.ParseManifests(carddispute.ToolsFile, read(t, carddispute.ToolsFile))
	if err != nil {
		t.Fatalf("tool.ParseManifests: %v", err)
	}
	out := map[string]*tool.Manifest{}
	for _, m := range ms {
		out[m.Name] = m
	}
	return out
}

func TestManifestsParse(t *testing.T) {
	ms := manifests(t)
	if len(ms) != len(bank.ToolNames()) {
		t.Fatalf("parsed %d manifests, want %d", len(ms), len(bank.ToolNames()))
	}
	for _, name := range bank.ToolNames() {
		m, ok := ms[name]
		if !ok {
			t.Errorf("no manifest for %s", name)
			continue
		}
		want := expectedTools[name]
		if m.Connector != want.connector || m.SideEffects != want.sideEffects || m.UntrustedOutput != want.untrusted {
			t.Errorf("%s: parsed %+v", name, m)
		}
	}
	refund := ms[bank.ToolIssueRefund]
	for _, tc := range []struct {
		amount float64
		need   bool
	}{{12499, true}, {10000.01, true}, {10000, false}, {500, false}} {
		args := fmt.Sprintf(`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":%v}`, tc.amount)
		if need, _ := refund.NeedsApproval(json.RawMessage(args)); need != tc.need {
			t.Errorf("refund of %v: needs approval = %v, want %v", tc.amount, need, tc.need)
		}
	}
	// The schemas reject what the bank would refuse anyway.
	for name, args := range map[string]string{
		bank.ToolIssueRefund:         `{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":"12499"}`,
		bank.ToolGetTicket:           `{"ticket_id":"T-40127","note":"x"}`,
		bank.ToolRaiseDispute:        `{"customer_id":"c_88213","transaction_ids":[],"reason":"x"}`,
		bank.ToolGetCardTransactions: `{"customer_id":"c_88213","limit":0}`,
	} {
		if err := ms[name].ValidateArgs(json.RawMessage(args)); err == nil {
			t.Errorf("%s accepts %s", name, args)
		}
	}
}

func TestDefinitionParsesAndBinds(t *testing.T) {
	d, err := agent.ParseDefinition(carddispute.AgentFile, read(t, carddispute.AgentFile), nil)
	if err != nil {
		t.Fatalf("agent.ParseDefinition: %v", err)
	}
	if d.Agent != "card-dispute-assistant" || d.Version != 1 || d.Model.Alias != "reasoning-standard" || d.Model.Small != "reasoning-small" {
		t.Errorf("definition header: %+v", d)
	}
	b := d.Budgets
	if b.MaxSteps != 40 || b.MaxInputTokens != 1_500_000 || b.Currency != "INR" || b.CostMicros != 150_000_000 || b.MaxWallClock.Hours() != 2 {
		t.Errorf("budgets = %+v", b)
	}
	want := map[string]agent.Action{
		"no-card-numbers-in-email":       {Kind: agent.ActionDeny, Reason: "emails never carry a full card number; use the last four digits"},
		"refund-needs-supervisor":        {Kind: agent.ActionRequireApproval, Group: "card-ops-supervisors", Expires: agent.DefaultApprovalExpiry},
		"refunds-in-run-need-supervisor": {Kind: agent.ActionRequireApproval, Group: "card-ops-supervisors", Expires: agent.DefaultApprovalExpiry},
		"tainted-external-email":         {Kind: agent.ActionRequireApproval, Group: "card-ops-agents", Expires: agent.DefaultApprovalExpiry},
	}
	if len(d.Policies) != len(want) {
		t.Errorf("%d policies, want %d", len(d.Policies), len(want))
	}
	for _, p := range d.Policies {
		if w, ok := want[p.Name]; !ok || p.Then != w {
			t.Errorf("policy %s: then = %+v, want %+v", p.Name, p.Then, w)
		}
	}
	if _, err := d.CompilePolicies(); err != nil {
		t.Errorf("policies do not compile: %v", err)
	}

	var list []*tool.Manifest
	for _, m := range manifests(t) {
		list = append(list, m)
	}
	set, err := tool.NewSet(list...)
	if err != nil {
		t.Fatal(err)
	}
	bk, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer bk.Close()
	cat := tool.NewCatalog()
	if err := bk.Register(cat); err != nil {
		t.Fatal(err)
	}
	if err := set.CheckCatalog(cat); err != nil {
		t.Errorf("tier-1 tools without a function: %v", err)
	}
	if err := d.Bind(set); err != nil {
		t.Fatalf("Bind: %v", err)
	}
	if got := strings.Join(d.Granted(), ","); got != strings.Join(bank.ToolNames(), ",") {
		t.Errorf("granted %s, want %v", got, bank.ToolNames())
	}
}

func TestScriptParses(t *testing.T) {
	s, err := scripted.Parse(carddispute.TurnsFile, read(t, carddispute.TurnsFile))
	if err != nil {
		t.Fatalf("scripted.Parse: %v", err)
	}
	ms := manifests(t)
	for i, turn := range s.Turns {
		for _, c := range turn.ToolCalls {
			m, ok := ms[c.Name]
			if !ok {
				t.Errorf("turn %d calls %s, which tools.yaml does not declare", i, c.Name)
				continue
			}
			if err := m.ValidateArgs(c.Args); err != nil {
				t.Errorf("turn %d: %v", i, err)
			}
		}
	}
}

// runResult is what one play of the script through miniLoop did.
type runResult struct {
	final     string
	approvals []string
	tainted   bool
	steps     int
}

// miniLoop plays the scripted model against the bank the way the platform's
// loop does in outline: offer the tools, validate each proposed call against
// its manifest, note approvals (and grant them), call the tool with the key
// run_id:step:index, and feed the results back. It stands in for the real
// loop so that the example can be checked on its own.
func miniLoop(t *testing.T, b *bank.Bank, runID string) runResult {
	t.Helper()
	ctx := context.Background()
	script, err := scripted.Parse(carddispute.TurnsFile, read(t, carddispute.TurnsFile))
	if err != nil {
		t.Fatal(err)
	}
	provider := scripted.New(script, scripted.Options{})
	ms := manifests(t)
	cat := tool.NewCatalog()
	if err := b.Register(cat); err != nil {
		t.Fatal(err)
	}
	var defs []model.ToolDef
	for _, name := range bank.ToolNames() {
		n, desc, schema := ms[name].Def()
		defs = append(defs, model.ToolDef{Name: n, Description: desc, InputSchema: schema})
	}
	agent := decodeOne[agentFile](t, carddispute.AgentFile)
	msgs := []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "Please resolve support ticket T-40127."}}}}
	var res runResult
	for step := 1; step <= agent.Budgets.MaxSteps; step++ {
		resp, err := provider.Complete(ctx, &model.Request{Model: "scripted-standard", System: agent.Instructions, Messages: msgs, Tools: defs})
		if err != nil {
			t.Fatalf("step %d: model: %v", step, err)
		}
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Content: resp.Content})
		calls := resp.ToolCalls()
		if len(calls) == 0 {
			res.final, res.steps = resp.Text(), step
			return res
		}
		var results []model.Part
		for i, c := range calls {
			m := ms[c.Name]
			if m == nil {
				t.Fatalf("step %d: model called undeclared tool %s", step, c.Name)
			}
			if err := m.ValidateArgs(c.Input); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if need, _ := m.NeedsApproval(c.Input); need {
				res.approvals = append(res.approvals, c.Name)
			}
			fn, _ := cat.Lookup(c.Name)
			out, err := fn(ctx, tool.Call{
				Tool: c.Name, Args: c.Input, IdempotencyKey: fmt.Sprintf("%s:%d:%d", runID, step, i),
				RunID: runID, Tenant: "example-bank", User: "u_priya",
			})
			if err != nil {
				t.Fatalf("step %d: %s: %v", step, c.Name, err)
			}
			if out.IsError {
				t.Fatalf("step %d: %s failed: %s", step, c.Name, out.Output)
			}
			res.tainted = res.tainted || m.UntrustedOutput
			results = append(results, model.Part{Type: model.PartToolResult, ToolUseID: c.ToolUseID, Text: string(out.Output)})
		}
		msgs = append(msgs, model.Message{Role: model.RoleUser, Content: results})
	}
	t.Fatalf("run did not finish within %d steps", agent.Budgets.MaxSteps)
	return res
}

func TestScriptedRunAgainstBank(t *testing.T) {
	ctx := context.Background()
	b, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	res := miniLoop(t, b, "run_demo")
	if res.steps != 7 || !res.tainted || !strings.Contains(res.final, "T-40127") {
		t.Fatalf("run = %+v", res)
	}
	if len(res.approvals) != 1 || res.approvals[0] != bank.ToolIssueRefund {
		t.Fatalf("manifest approvals = %v, want exactly one for issue_refund", res.approvals)
	}
	want := bank.Counters{DisputesRaised: 1, RefundsIssued: 1, RefundedPaise: bank.DuplicateAmountPaise, EmailsSent: 1, EmailsDrafted: 1}
	got, err := b.CountersForRun(ctx, "run_demo")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("counters = %+v, want %+v", got, want)
	}
	refunds, _ := b.Refunds(ctx)
	if len(refunds) != 1 || refunds[0].TransactionID != bank.DuplicateTxnB || refunds[0].CustomerID != bank.CustomerID {
		t.Fatalf("refunds = %+v", refunds)
	}
	disputes, _ := b.Disputes(ctx)
	if len(disputes) != 1 || strings.Join(disputes[0].TransactionIDs, ",") != "txn_1001,txn_1002" {
		t.Fatalf("disputes = %+v", disputes)
	}
	emails, _ := b.Emails(ctx)
	if len(emails) != 1 || emails[0].To != bank.CustomerEmail || !strings.Contains(emails[0].Body, "12,499") {
		t.Fatalf("emails = %+v", emails)
	}

	// Played again under the same run id, as a worker does after a crash,
	// the run changes nothing: every side effect comes back from its key.
	again := miniLoop(t, b, "run_demo")
	if again.final != res.final {
		t.Fatalf("second play ended differently: %q", again.final)
	}
	want.DuplicateCallsSuppressed = 4 // dispute, refund, draft, email
	if got, _ := b.CountersForRun(ctx, "run_demo"); got != want {
		t.Fatalf("after a second play: %+v, want %+v", got, want)
	}
}
