package scripted

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
)

const branching = `
turns:
  - tool_calls: [{name: get_ticket, args: {id: T-1}}]
  - text: "Refunding."
    tool_calls: [{name: list_transactions, args: {}}]
  - text: "The refund was issued."
    branches:
      - if_tool_result_contains: '"control":"approval"'
        turns:
          - text: "The refund was rejected; I will tell the customer."
            tool_calls: [{name: get_ticket, args: {id: T-1}}]
          - text: "The refund was not issued."
      - if_tool_result_contains: "timeout"
        turns:
          - text: "The bank timed out."
`

// history builds a request whose i-th tool result is results[i].
func history(results ...string) *model.Request {
	req := &model.Request{Tools: tools, Messages: []model.Message{userText("go")}}
	for i, r := range results {
		id := fmt.Sprintf("toolu_%02d_0", i)
		req.Messages = append(req.Messages,
			model.Message{Role: model.RoleAssistant, Content: []model.Part{{Type: model.PartToolUse, ToolUseID: id, Name: "get_ticket", Input: json.RawMessage(`{}`)}}},
			model.Message{Role: model.RoleUser, Content: []model.Part{{Type: model.PartToolResult, ToolUseID: id, Text: r}}})
	}
	return req
}

// TestBranchOnDecision: the turn after a decision depends on the tool
// result the model read, on every later call too (the provider holds no
// state), and the default path is played when no branch matches.
func TestBranchOnDecision(t *testing.T) {
	s, err := Parse("branching.yaml", []byte(branching))
	if err != nil {
		t.Fatal(err)
	}
	p := New(s, Options{})
	rejected := `{"control":"approval","error":"rejected by meera"}`
	for _, tc := range []struct {
		name    string
		results []string
		want    string
		wantErr string
	}{
		{"approved", []string{"ticket", `{"refund_id":"r1"}`}, "The refund was issued.", ""},
		{"rejected", []string{"ticket", rejected}, "The refund was rejected; I will tell the customer.", ""},
		{"rejected, next turn on the same branch", []string{"ticket", rejected, "ticket again"}, "The refund was not issued.", ""},
		{"other branch", []string{"ticket", "timeout after 5s"}, "The bank timed out.", ""},
		{"a match before the decision point does not count", []string{rejected, `{"refund_id":"r1"}`}, "The refund was issued.", ""},
		{"past the end of the branch", []string{"ticket", rejected, "x", "y"}, "", "script has 4 turns, request asked for turn 5"},
	} {
		resp, err := p.Complete(t.Context(), history(tc.results...))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: err = %v, want %q", tc.name, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if resp.Text() != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, resp.Text(), tc.want)
		}
	}
	// Tool-use ids stay numbered by the turn's position in the run.
	resp, err := p.Complete(t.Context(), history("ticket", rejected))
	if err != nil {
		t.Fatal(err)
	}
	if c := resp.ToolCalls(); len(c) != 1 || c[0].ToolUseID != "toolu_02_0" {
		t.Errorf("calls = %+v, want one with id toolu_02_0", c)
	}
}

func TestBranchErrors(t *testing.T) {
	for _, tc := range []struct{ script, want string }{
		{"turns:\n  - text: a\n    branches: [{turns: [{text: b}]}]\n", "turns[0] (line 2): branches[0]: if_tool_result_contains is required"},
		{"turns:\n  - text: a\n    branches: [{if_tool_result_contains: x}]\n", "branches[0]: no turns"},
		{"turns:\n  - text: a\n    branches: [{if_tool_result_contains: x, turns: [{}]}]\n", "branches[0].turns[0]: turn has neither text nor tool_calls"},
		{"turns:\n  - text: a\n    branches: [{if: x, turns: [{text: b}]}]\n", `unknown field "if" in a branch`},
	} {
		_, err := Parse("s.yaml", []byte(tc.script))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: err = %v, want %q", tc.script, err, tc.want)
		}
	}
	deep := "turns:\n  - text: a\n"
	indent := "    "
	for range maxBranchDepth + 1 {
		deep += indent + "branches:\n" + indent + "  - if_tool_result_contains: x\n" + indent + "    turns:\n" + indent + "      - text: a\n"
		indent += "        "
	}
	if _, err := Parse("deep.yaml", []byte(deep)); err == nil || !strings.Contains(err.Error(), "nest deeper than") {
		t.Errorf("deep branches: %v", err)
	}
}
