package eval

import (
	"context"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// The judgement of a replay's withheld calls: played when allowed or
// approved by the policy, not when rejected, and not after a rejected
// call whose mock the model believed.
func TestSimulateWithheld(t *testing.T) {
	ctx := context.Background()
	set, err := ParseSet("tiny.yaml", []byte(`set: tiny
agent: a
world: tiny
run_as: {tenant: t, user: u}
users: [{user: u, scopes: ["tiny:write"]}, {user: boss}]
approvals:
  decider: boss
  rules:
    - {decision: approve, when: {tool: put, args: {key: $owner, value: {max: 100}}}}
  otherwise: reject
tasks:
  - {id: one, task: "Store things.", world: {owner: mine}}
`), tinyWorld{})
	if err != nil {
		t.Fatal(err)
	}
	task := set.Tasks[0]
	ms, err := tool.ParseManifests("tools.yaml", []byte(tinyTools))
	if err != nil {
		t.Fatal(err)
	}
	w := &harness{set: set, tools: ms, workDir: t.TempDir()}
	e, err := w.openEnv(ctx, "t", task, set.Tenant, "", nil...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.close()
	call := func(step int, args, replayed, control string) Call {
		v, _ := decodeJSON([]byte(args))
		return Call{Step: step, Tool: "put", Args: []byte(args), SideEffects: "external", Status: "ok", Effective: "ok", Replayed: replayed, Control: control, args: v}
	}
	denied := func(c Call) Call { c.Status, c.Effective = "denied", "denied"; return c }
	for i, tc := range []struct {
		name          string
		calls         []Call
		wantEffective []string
		puts          int
		requested     int
		rejected      int
		counterfact   int
	}{
		{"allowed and approved calls are played", []Call{
			call(3, `{"key":"other","value":5}`, trace.ReplayedMock, ""),
			call(4, `{"key":"mine","value":50}`, trace.ReplayedMock, "approval"),
		}, []string{"ok", "ok"}, 2, 1, 0, 0},
		{"a rejected call is not played, nor what rests on its mock", []Call{
			call(4, `{"key":"mine","value":500}`, trace.ReplayedMock, "approval"),
			call(4, `{"key":"mine","value":1}`, trace.ReplayedMock, "approval"),
			call(6, `{"key":"mine","value":2}`, trace.ReplayedMock, "approval"),
		}, []string{"denied", "ok", "not played"}, 1, 2, 1, 4},
		{"a control's refusal is never played; the world judges what is", []Call{
			call(4, `{"key":"mine","value":-1}`, trace.ReplayedDenied, ""),
			denied(call(5, `{"key":"x","value":1}`, "", "policy")),
		}, []string{"error", "denied"}, 0, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &Outcome{RunID: fmt.Sprintf("run_case%d", i), Calls: tc.calls}
			if err := simulateWithheld(ctx, e, o, "", &task.Approvals, set.Tenant, set.User); err != nil {
				t.Fatal(err)
			}
			for i, c := range o.Calls {
				if c.Effective != tc.wantEffective[i] {
					t.Errorf("call %d (%s): effective %q, want %q", i, c.Tool, c.Effective, tc.wantEffective[i])
				}
			}
			if err := readWorld(ctx, e, o); err != nil {
				t.Fatal(err)
			}
			if len(o.Records["puts"]) != tc.puts {
				t.Errorf("world: %d puts, want %d", len(o.Records["puts"]), tc.puts)
			}
			if o.Approvals.Requested != tc.requested || o.Approvals.Rejected != tc.rejected || o.Counterfactual != tc.counterfact {
				t.Errorf("approvals %+v, counterfactual %d", o.Approvals, o.Counterfactual)
			}
		})
	}
}
