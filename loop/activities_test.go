package loop_test

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/trace"
)

// TestActivityInputsRoundTrip: every activity input survives JSON, as it
// must to reach a worker on another machine; a model call's request keeps
// its prompt hash.
func TestActivityInputsRoundTrip(t *testing.T) {
	temp := 0.2
	run := engine.RunInfo{ID: "run_1", Tenant: "t1", User: "u", Agent: "a", AgentVersion: 3, Task: "do it",
		Bindings: map[string]string{"customer_id": "c1"}, CreatedAt: time.Unix(1_800_000_000, 123000).UTC()}
	req := &model.Request{System: "sys", Temperature: &temp, Messages: []model.Message{
		{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "hi"}}},
		{Role: model.RoleAssistant, Content: []model.Part{{Type: model.PartToolUse, ToolUseID: "toolu_1", Name: "echo", Input: json.RawMessage(`{"text":"x"}`)}}},
	}, Tools: []model.ToolDef{{Name: "echo", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`)}}, CachedTools: 1}
	state := broker.RunState{Tainted: true, Steps: 2, CostMicros: 5, Currency: "USD", Calls: map[string]int{"echo": 1},
		Allowed: []broker.PriorCall{{Tool: "echo", At: time.Unix(1_800_000_001, 0).UTC(), Args: json.RawMessage(`{"text":"x"}`)}}}
	dec := trace.Decision{Control: broker.ControlApproval, Reason: "needs approval", Approval: &trace.ApprovalNeed{Group: "payers", ExpiresMS: 1000}}
	inputs := []any{
		loop.StartInput{Run: run},
		loop.ModelCallInput{Request: req, PromptHash: "sha256:ab", PromptBytes: 9, Delta: []int64{1, 2}, Alias: "m", Currency: "USD",
			Attribution: model.Attribution{Tenant: "t1", RunID: "run_1", Step: 2, Budget: model.Budget{MaxInputTokens: 10, MaxCost: model.Money{Micros: 9, Currency: "USD"}}}},
		loop.DecideInput{Run: run, Step: 2, Index: 1, CallID: "toolu_1", Tool: "echo", Manifest: "ab", Args: []byte(`{"text":"x"}`),
			ArgsHash: "cd", Key: "run_1:2:1", State: state, Decided: &dec},
		loop.DecideInput{Run: run, Tool: "echo", Args: []byte("{not json")},
		loop.ExecuteInput{Run: run, Step: 2, Index: 1, CallID: "toolu_1", Tool: "echo", Manifest: "ab", Args: []byte(`{}`), Key: "run_1:2:1",
			Decision: dec, Bindings: map[string]string{"customer_id": "c1"}, Handles: []string{"ef"}, ReplayLive: true},
		loop.TeardownInput{Tenant: "t1", RunID: "run_1"},
		loop.SearchInput{Run: run, CallID: "toolu_1", Index: 1, Query: "refund a card transaction", Limit: 5,
			Searchable: []trace.ToolRef{{Name: "issue_refund", Hash: "ab", Reviewed: true}}, Offered: []string{"echo"},
			Recorded: &trace.ToolsLoaded{CallID: "toolu_0", Hits: []trace.SearchHit{{Name: "issue_refund", Score: 1.5}}, Loaded: []trace.ToolRef{{Name: "issue_refund", Hash: "ab"}}}},
		loop.CompactInput{Alias: "small", PreviousNote: "note", Steps: req.Messages, Kept: 2, Currency: "USD"},
		loop.ApprovalRequestInput{Request: trace.ApprovalRequested{ApprovalID: "ap", Tool: "pay", ExpiresAt: time.Unix(1_800_086_400, 0).UTC()}, Args: []byte(`{"amount":5}`)},
		loop.ApprovalDecisionInput{Run: run, Step: 2, Tool: "pay", ApprovalID: "ap", Signal: trace.ApprovalSignal{ApprovalID: "ap", Decision: "edit", Args: json.RawMessage(`{"amount":4}`)},
			Args: []byte(`{"amount":5}`), Groups: []string{"payers"}, State: state},
	}
	for _, in := range inputs {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatalf("%T: %v", in, err)
		}
		back := reflect.New(reflect.TypeOf(in))
		if err := json.Unmarshal(b, back.Interface()); err != nil {
			t.Fatalf("%T: %v", in, err)
		}
		if got := back.Elem().Interface(); !reflect.DeepEqual(got, in) {
			t.Errorf("%T does not round-trip:\n got %#v\nwant %#v", in, got, in)
		}
		if mc, ok := in.(loop.ModelCallInput); ok {
			h1, _ := trace.PromptHash(mc.Request)
			h2, _ := trace.PromptHash(back.Elem().Interface().(loop.ModelCallInput).Request)
			if h1 != h2 {
				t.Errorf("prompt hash changed in transit: %s != %s", h1, h2)
			}
		}
	}
}

// TestActivitiesRunFromJSON: the loop's activities are registered by name
// and run on a serialised input, as a remote worker runs them.
func TestActivitiesRunFromJSON(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	reg := f.p.Loop.Activities()
	want := []string{loop.ActApprovalDecision, loop.ActApprovalRequest, loop.ActCompact, loop.ActModelCall,
		loop.ActStart, loop.ActSandboxTeardown, loop.ActToolDecide, loop.ActToolExecute, loop.ActToolSearch}
	if got := reg.Names(); len(got) != len(want) {
		t.Fatalf("registered %v, want %d activities", got, len(want))
	}
	for _, n := range want {
		if _, ok := reg.Lookup(n); !ok {
			t.Fatalf("activity %s not registered", n)
		}
	}
	ctx := context.Background()
	act, _ := reg.Lookup(loop.ActToolExecute)
	in, _ := json.Marshal(loop.ExecuteInput{Run: engine.RunInfo{ID: "r", Tenant: "t1"}, Step: 1, Tool: "echo", Args: []byte(`{"text":"x"}`),
		Key: "r:1:0", Decision: trace.Decision{Control: "policy", Reason: "no"}})
	out, err := act.InvokeJSON(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	var res trace.ToolResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatal(err)
	}
	if res.Status != trace.StatusDenied || res.Output.Text != `{"control":"policy","error":"no"}` {
		t.Fatalf("refused call from JSON: %+v", res)
	}
	// A malformed input is a permanent failure: no engine retries it.
	if _, err := act.InvokeJSON(ctx, []byte(`{"step":"one"}`)); err == nil || engine.IsRetryable(err) {
		t.Fatalf("bad input: err = %v, want a non-retryable error", err)
	}
}
