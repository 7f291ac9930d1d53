package eval_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/tool"
)

// tallyWorld is a third world, minimal and written here to show that
// package eval needs nothing of the examples: one tool, tally_add {n},
// with external side effects and idempotent by the call's key, and one
// kind of record, "adds". A task's fixture is {owner: NAME} ($owner).
type tallyWorld struct{}

type tallyFixture struct{ owner string }

func (f tallyFixture) Vars() map[string]string { return map[string]string{"owner": f.owner} }

func (tallyWorld) Name() string                 { return "tally" }
func (tallyWorld) Tools() []string              { return []string{"tally_add"} }
func (tallyWorld) Variables() []string          { return []string{"owner"} }
func (tallyWorld) Records() map[string][]string { return map[string][]string{"adds": {"n", "owner"}} }

func (tallyWorld) Fixture(raw json.RawMessage, _ string) (eval.Fixture, error) {
	var f struct {
		Owner string `json:"owner"`
	}
	if raw != nil {
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			return nil, err
		}
		if f.Owner == "" {
			return nil, eval.FieldErrorf("owner", "required")
		}
	}
	return tallyFixture{f.Owner}, nil
}

func (tallyWorld) Open(_ context.Context, _ string, fx eval.Fixture) (eval.Env, error) {
	return &tallyEnv{owner: fx.(tallyFixture).owner, byKey: map[string]tallyAdd{}}, nil
}

type tallyAdd struct {
	run string
	n   json.Number
}

type tallyEnv struct {
	owner string
	mu    sync.Mutex
	byKey map[string]tallyAdd
}

func (e *tallyEnv) Register(c *tool.Catalog) error {
	return c.Register("tally_add", func(_ context.Context, call tool.Call) (tool.Result, error) {
		var a struct {
			N json.Number `json:"n"`
		}
		if err := json.Unmarshal(call.Args, &a); err != nil {
			return tool.Result{IsError: true, Output: json.RawMessage(`{"error":"want n"}`)}, nil
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, seen := e.byKey[call.IdempotencyKey]; !seen {
			e.byKey[call.IdempotencyKey] = tallyAdd{run: call.RunID, n: a.N}
		}
		return tool.Result{Output: json.RawMessage(fmt.Sprintf(`{"added":%s,"total_calls":%d}`, a.N, len(e.byKey)))}, nil
	})
}

func (e *tallyEnv) Records(_ context.Context, runID string) (map[string][]map[string]any, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]map[string]any{"adds": {}}
	for _, a := range e.byKey {
		if a.run == runID {
			out["adds"] = append(out["adds"], map[string]any{"n": a.n, "owner": e.owner})
		}
	}
	return out, nil
}

func (e *tallyEnv) Close() error { return nil }

const tallyTool = `name: tally_add
description: Add n to the tally.
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  properties: {n: {type: integer}}
  required: [n]
auth: {mode: on_behalf_of_user, scopes: ["tally:write"]}
side_effects: external
`

const tallySet = `set: tally
agent: tallier
world: tally
run_as: {tenant: t, user: u}
users: [{user: u, scopes: ["tally:write"]}, {user: boss}]
approvals: {decider: boss}
expect:
  max_steps: 4
  forbidden: [{tool: tally_add, args: {n: {min: 10}}}]
tasks:
  - id: add-three
    task: "Add 3."
    world: {owner: asha}
    expect:
      calls: [{tool: tally_add, args: {n: 3}, count: 1}]
      world: {adds: [{n: 3, owner: $owner}]}
  - id: add-four
    task: "Add 4."
    world: {owner: ravi}
    expect:
      world: {adds: [{n: 4, owner: ravi}]}
`

// tallyModel follows the instructions it is given: it adds the number in
// the task once, or twice when the instructions say "twice", then stops.
func tallyModel(_ context.Context, req *model.Request) (*model.Response, error) {
	var task string
	results := 0
	for _, m := range req.Messages {
		for _, p := range m.Content {
			switch p.Type {
			case model.PartText:
				if task == "" {
					task = p.Text
				}
			case model.PartToolResult:
				results++
			}
		}
	}
	want := 1
	if strings.Contains(req.System, "twice") {
		want = 2
	}
	if results >= want {
		return &model.Response{Content: []model.Part{{Type: model.PartText, Text: "done"}}, StopReason: "end_turn", Usage: model.Usage{InputTokens: 10, OutputTokens: 2}}, nil
	}
	var n int
	fmt.Sscanf(strings.TrimPrefix(task, "Add "), "%d", &n)
	in := fmt.Sprintf(`{"n":%d}`, n)
	return &model.Response{Content: []model.Part{{Type: model.PartToolUse, ToolUseID: fmt.Sprintf("c%d", results), Name: "tally_add", Input: json.RawMessage(in)}},
		StopReason: "tool_use", Usage: model.Usage{InputTokens: 10, OutputTokens: 5}}, nil
}

func tallyAgent(t *testing.T, version int, instructions string) *agent.Definition {
	t.Helper()
	d, err := agent.ParseDefinition("tallier.yaml", []byte(fmt.Sprintf(`agent: tallier
version: %d
model: {alias: m}
instructions: %q
tools: [{tool: tally_add}]
budgets: {max_steps: 10, max_input_tokens: 100000, max_cost_inr: 10, max_wall_clock: 1m}
`, version, instructions)), nil)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// Evals for any agent: a world written in this file, not in package eval,
// runs, grades and compares two versions of its own agent.
func TestEvalOfAWorldDefinedOutsidePackageEval(t *testing.T) {
	ctx := context.Background()
	set, err := eval.ParseSet("tally.yaml", []byte(tallySet), tallyWorld{})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := tool.ParseManifests("tally.yaml", []byte(tallyTool))
	if err != nil {
		t.Fatal(err)
	}
	tools, err := tool.NewSet(ms...)
	if err != nil {
		t.Fatal(err)
	}
	price := &model.Price{Currency: "INR", InputPerMTok: 1_000_000, OutputPerMTok: 1_000_000}
	gw, err := model.NewGateway(model.GatewayOptions{Providers: map[string]model.Provider{"tally": model.ProviderFunc(tallyModel)},
		Aliases: []model.AliasConfig{{Name: "m", Provider: "tally", ModelID: "tally-1", Price: price}}})
	if err != nil {
		t.Fatal(err)
	}
	v1, v2 := tallyAgent(t, 1, "Add the number in the task."), tallyAgent(t, 2, "Add the number in the task twice, to be sure.")

	rep, err := eval.Run(ctx, eval.Options{Set: set, Agent: v1, Tools: tools, Gateway: gw, Parallel: 2, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() != 0 {
		t.Fatalf("v1 failed:\n%s", failures(rep))
	}
	rep, err = eval.Run(ctx, eval.Options{Set: set, Agent: v2, Tools: tools, Gateway: gw, Parallel: 2, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Failed() != 2 || !strings.Contains(failures(rep), "world adds: got") || !strings.Contains(failures(rep), "made 2 times, want 1") {
		t.Fatalf("v2 should fail both tasks on its records:\n%s", failures(rep))
	}
	cmp, err := eval.Compare(ctx, eval.CompareOptions{Set: set, Base: v1, Candidate: v2, Tools: tools, Gateway: gw, Parallel: 2,
		WorkDir: t.TempDir(), Thresholds: eval.DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.Regressions) == 0 || !strings.Contains(strings.Join(cmp.Regressions, "\n"), "task success fell from 100.0% to 0.0%") {
		t.Fatalf("regressions = %v", cmp.Regressions)
	}
	cmp, err = eval.Compare(ctx, eval.CompareOptions{Set: set, Base: v2, Candidate: v1, Tools: tools, Gateway: gw, Parallel: 2,
		WorkDir: t.TempDir(), Thresholds: eval.DefaultThresholds()})
	if err != nil {
		t.Fatal(err)
	}
	if len(cmp.Regressions) != 0 {
		t.Fatalf("the better version regresses: %v", cmp.Regressions)
	}

	// A tool the world does not simulate is refused before anything runs.
	echo, _ := tool.ParseManifests("echo.yaml", []byte("name: echo\ndescription: e\ntier: 1\ntimeout_ms: 100\ninput_schema: {type: object}\nauth: {mode: none}\nside_effects: none\n"))
	both, _ := tool.NewSet(append(ms, echo...)...)
	v3 := tallyAgent(t, 3, "Add the number in the task.")
	v3.Tools = append(v3.Tools, agent.Grant{Tool: "echo"})
	if _, err := eval.Run(ctx, eval.Options{Set: set, Agent: v3, Tools: both, Gateway: gw, WorkDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "world tally's") {
		t.Fatalf("granted a tool the world does not simulate: %v", err)
	}
}
