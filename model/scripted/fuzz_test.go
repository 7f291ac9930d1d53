package scripted

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/agentplane/agentplane/model"
)

func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile(filepath.Join("testdata", "dispute.yaml")); err == nil {
		f.Add(data)
	}
	for _, s := range []string{
		conformanceScript,
		"turns: [{text: a}]\n",
		"final: x\nturns:\n  - tool_calls: [{name: a, args: {x: &v [1, 2.5, true, null, 0x1F, 2026-01-01], y: *v}}]\n    usage: {input_tokens: 1}\n",
		"turns:\n  - text: a\n    stop_reason: refusal\n  - text: b\n    expect_tool_result_contains: ok\n",
		"turns:\n  - tool_calls: [{name: a, args: {<<: {x: 1}}}]\n",
		"turns: [{text: a}]\n---\nturns: []\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		if len(s.Turns) == 0 {
			t.Fatal("accepted a script without turns")
		}
		// Every accepted turn answers with something the gateway accepts.
		for i, turn := range s.Turns {
			for _, c := range turn.ToolCalls {
				var obj map[string]any
				if err := json.Unmarshal(c.Args, &obj); err != nil || obj == nil {
					t.Fatalf("turn %d: args %q are not a JSON object", i, c.Args)
				}
			}
			if err := model.ValidateResponse(turn.response(i, nil)); err != nil {
				t.Fatalf("turn %d: accepted turn gives an invalid answer: %v", i, err)
			}
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Parse accepted what Validate refuses: %v", err)
		}
		again, err := Parse("fuzz.yaml", data)
		if err != nil || !reflect.DeepEqual(s, again) {
			t.Fatalf("Parse is not deterministic: %v", err)
		}
	})
}
