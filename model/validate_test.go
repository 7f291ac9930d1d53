package model

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func text(s string) Part { return Part{Type: PartText, Text: s} }

func toolUse(id, name, input string) Part {
	return Part{Type: PartToolUse, ToolUseID: id, Name: name, Input: json.RawMessage(input)}
}

func TestValidToolName(t *testing.T) {
	for name, want := range map[string]bool{
		"get_ticket":            true,
		"issue-refund":          true,
		"A9":                    true,
		strings.Repeat("a", 64): true,
		strings.Repeat("a", 65): false,
		"":                      false,
		"get ticket":            false,
		"get.ticket":            false,
		"tool/evil":             false,
		"résumé":                false,
		"x\n":                   false,
	} {
		if got := ValidToolName(name); got != want {
			t.Errorf("ValidToolName(%q) = %v, want %v", name, got, want)
		}
	}
}

func TestValidateResponseAccepts(t *testing.T) {
	for _, tc := range []struct {
		name     string
		resp     Response
		wantStop string
	}{
		{"text end_turn", Response{Content: []Part{text("hi")}, StopReason: StopEndTurn}, StopEndTurn},
		{"empty stop becomes end_turn", Response{Content: []Part{text("hi")}}, StopEndTurn},
		{"vendor stop becomes end_turn", Response{Content: []Part{text("hi")}, StopReason: "stop_sequence"}, StopEndTurn},
		{"tool_use without calls becomes end_turn", Response{Content: []Part{text("hi")}, StopReason: StopToolUse}, StopEndTurn},
		{"max_tokens kept", Response{Content: []Part{text("hi")}, StopReason: StopMaxTokens}, StopMaxTokens},
		{"refusal kept", Response{Content: []Part{text("no")}, StopReason: StopRefusal}, StopRefusal},
		{"no content", Response{}, StopEndTurn},
		{"empty text part", Response{Content: []Part{text("")}}, StopEndTurn},
		{"tool call forces tool_use", Response{Content: []Part{text("let me look"), toolUse("toolu_1", "get_ticket", `{"ticket_id":"T-40127"}`)}, StopReason: StopEndTurn}, StopToolUse},
		{"two calls", Response{Content: []Part{toolUse("a", "x", `{}`), toolUse("b", "x", ` { "n" : [1, {"m": null}] } `)}, StopReason: StopMaxTokens}, StopToolUse},
		{"same key in sibling objects", Response{Content: []Part{toolUse("a", "x", `{"a":{"k":1},"b":{"k":2}}`)}}, StopToolUse},
		{"text at the limit", Response{Content: []Part{text(strings.Repeat("a", MaxResponseTextBytes/2)), text(strings.Repeat("b", MaxResponseTextBytes/2))}}, StopEndTurn},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.resp
			if err := ValidateResponse(&r); err != nil {
				t.Fatalf("ValidateResponse: %v", err)
			}
			if r.StopReason != tc.wantStop {
				t.Errorf("StopReason = %q, want %q", r.StopReason, tc.wantStop)
			}
		})
	}
}

func TestValidateResponseRefuses(t *testing.T) {
	deep := strings.Repeat(`{"a":`, MaxToolInputDepth+1) + "1" + strings.Repeat("}", MaxToolInputDepth+1)
	manyCalls := make([]Part, MaxToolCalls+1)
	for i := range manyCalls {
		manyCalls[i] = toolUse(strings.Repeat("i", i+1), "x", `{}`)
	}
	for _, tc := range []struct {
		name    string
		resp    *Response
		wantErr string
	}{
		{"nil", nil, "no response"},
		{"unknown type", &Response{Content: []Part{{Type: "image"}}}, "unknown part type"},
		{"empty type", &Response{Content: []Part{{Text: "x"}}}, "unknown part type"},
		{"tool_result from model", &Response{Content: []Part{{Type: PartToolResult, ToolUseID: "a", Text: "x"}}}, "tool_result"},
		{"text with tool fields", &Response{Content: []Part{{Type: PartText, Text: "x", Name: "get_ticket"}}}, "carries tool fields"},
		{"text too long", &Response{Content: []Part{text(strings.Repeat("a", MaxResponseTextBytes)), text("b")}}, "exceeds"},
		{"text not UTF-8", &Response{Content: []Part{text("\xff\xfe")}}, "UTF-8"},
		{"empty name", &Response{Content: []Part{toolUse("a", "", `{}`)}}, "tool name"},
		{"bad name", &Response{Content: []Part{toolUse("a", "rm -rf /", `{}`)}}, "tool name"},
		{"long name", &Response{Content: []Part{toolUse("a", strings.Repeat("n", 65), `{}`)}}, "tool name"},
		{"empty id", &Response{Content: []Part{toolUse("", "x", `{}`)}}, "empty id"},
		{"id with space", &Response{Content: []Part{toolUse("a b", "x", `{}`)}}, "printable"},
		{"id too long", &Response{Content: []Part{toolUse(strings.Repeat("i", MaxToolUseIDBytes+1), "x", `{}`)}}, "longer"},
		{"duplicate id", &Response{Content: []Part{toolUse("a", "x", `{}`), toolUse("a", "y", `{}`)}}, "already used"},
		{"tool_use with text", &Response{Content: []Part{{Type: PartToolUse, ToolUseID: "a", Name: "x", Input: json.RawMessage(`{}`), Text: "t"}}}, "carries text"},
		{"empty input", &Response{Content: []Part{toolUse("a", "x", ``)}}, "empty"},
		{"null input", &Response{Content: []Part{toolUse("a", "x", `null`)}}, "not a JSON object"},
		{"array input", &Response{Content: []Part{toolUse("a", "x", `[1]`)}}, "not a JSON object"},
		{"string input", &Response{Content: []Part{toolUse("a", "x", `"{}"`)}}, "not a JSON object"},
		{"invalid JSON", &Response{Content: []Part{toolUse("a", "x", `{"a":}`)}}, "not valid JSON"},
		{"two objects", &Response{Content: []Part{toolUse("a", "x", `{}{}`)}}, "not valid JSON"},
		{"duplicate key", &Response{Content: []Part{toolUse("a", "x", `{"amount_inr":1,"amount_inr":99999}`)}}, "duplicate key"},
		{"duplicate key by escape", &Response{Content: []Part{toolUse("a", "x", `{"amount":1,"\u0061mount":2}`)}}, "duplicate key"},
		{"nested duplicate key", &Response{Content: []Part{toolUse("a", "x", `{"a":[{"k":1,"k":2}]}`)}}, "duplicate key"},
		{"too deep", &Response{Content: []Part{toolUse("a", "x", deep)}}, "deeper"},
		{"input not UTF-8", &Response{Content: []Part{toolUse("a", "x", "{\"a\":\"\xff\"}")}}, "UTF-8"},
		{"input too large", &Response{Content: []Part{toolUse("a", "x", `{"a":"`+strings.Repeat("x", MaxToolInputBytes)+`"}`)}}, "more than"},
		{"too many calls", &Response{Content: manyCalls}, "tool calls"},
		{"too many parts", &Response{Content: make([]Part, MaxResponseParts+1)}, "parts"},
		{"negative usage", &Response{Content: []Part{text("x")}, Usage: Usage{OutputTokens: -1}}, "negative"},
		{"long model", &Response{Model: strings.Repeat("m", 300)}, "model name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.resp != nil {
				tc.resp.StopReason = "weird"
			}
			err := ValidateResponse(tc.resp)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ValidateResponse error = %v, want one containing %q", err, tc.wantErr)
			}
			if !errors.Is(err, ErrInvalidResponse) {
				t.Errorf("error %q does not wrap ErrInvalidResponse", err)
			}
			if tc.resp != nil && tc.resp.StopReason != "weird" {
				t.Errorf("an invalid response was modified: StopReason %q", tc.resp.StopReason)
			}
		})
	}
}

func FuzzValidateResponse(f *testing.F) {
	for _, s := range []string{
		`{"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn"}`,
		`{"content":[{"type":"tool_use","id":"toolu_1","name":"get_ticket","input":{"ticket_id":"T-40127"}}],"stop_reason":"tool_use","usage":{"input_tokens":10,"output_tokens":3}}`,
		`{"content":[{"type":"tool_use","id":"a","name":"x","input":{"a":1,"a":2}}]}`,
		`{"content":[{"type":"tool_use","id":"a","name":"x","input":[]}],"stop_reason":"max_tokens"}`,
		`{"content":[{"type":"tool_result","id":"a","text":"x"}]}`,
		`{"content":[{"type":"text","text":"no"}],"stop_reason":"refusal"}`,
		`{"content":[{"type":"tool_use","id":"a","name":"x","input":{"n":{"m":[{"o":null}]}}},{"type":"tool_use","id":"a","name":"y","input":{}}]}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var r Response
		if err := json.Unmarshal(data, &r); err != nil {
			return
		}
		if err := ValidateResponse(&r); err != nil {
			if !errors.Is(err, ErrInvalidResponse) {
				t.Fatalf("error %q does not wrap ErrInvalidResponse", err)
			}
			return
		}
		// What is accepted keeps the promises the loop relies on.
		calls := r.ToolCalls()
		if (len(calls) > 0) != (r.StopReason == StopToolUse) {
			t.Fatalf("stop reason %q with %d tool calls", r.StopReason, len(calls))
		}
		switch r.StopReason {
		case StopEndTurn, StopToolUse, StopMaxTokens, StopRefusal:
		default:
			t.Fatalf("stop reason %q not normalised", r.StopReason)
		}
		ids := map[string]bool{}
		for _, c := range calls {
			if !ValidToolName(c.Name) || c.ToolUseID == "" || ids[c.ToolUseID] {
				t.Fatalf("accepted bad tool call %+v", c)
			}
			ids[c.ToolUseID] = true
			var obj map[string]any
			if err := json.Unmarshal(c.Input, &obj); err != nil || obj == nil {
				t.Fatalf("accepted input %q that is not a JSON object: %v", c.Input, err)
			}
		}
		// Validation is idempotent.
		again := r
		if err := ValidateResponse(&again); err != nil || again.StopReason != r.StopReason {
			t.Fatalf("second validation: %v, stop %q -> %q", err, r.StopReason, again.StopReason)
		}
	})
}
