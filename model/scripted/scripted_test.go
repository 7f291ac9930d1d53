package scripted

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/modeltest"
)

var tools = []model.ToolDef{
	{Name: "get_ticket", InputSchema: json.RawMessage(`{"type":"object"}`)},
	{Name: "list_transactions", InputSchema: json.RawMessage(`{"type":"object"}`)},
}

func loadDispute(t *testing.T) *Script {
	t.Helper()
	s, err := Load(filepath.Join("testdata", "dispute.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func userText(s string) model.Message {
	return model.Message{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: s}}}
}

// conversation returns a request after `turns` model turns, each answered
// with one tool result whose text is result.
func conversation(turns int, result string) *model.Request {
	req := &model.Request{Model: "scripted-1", System: "You resolve card disputes.", Tools: tools,
		Messages: []model.Message{userText("Please look at ticket T-40127.")}}
	for i := range turns {
		id := fmt.Sprintf("toolu_%02d_0", i)
		req.Messages = append(req.Messages,
			model.Message{Role: model.RoleAssistant, Content: []model.Part{{Type: model.PartToolUse, ToolUseID: id, Name: "get_ticket", Input: json.RawMessage(`{}`)}}},
			model.Message{Role: model.RoleUser, Content: []model.Part{{Type: model.PartToolResult, ToolUseID: id, Text: result}}},
		)
	}
	return req
}

func TestParseDispute(t *testing.T) {
	s := loadDispute(t)
	if s.Source != filepath.Join("testdata", "dispute.yaml") || len(s.Turns) != 4 {
		t.Fatalf("script = %+v", s)
	}
	if !strings.HasPrefix(s.Final, "Budget reached.") {
		t.Errorf("final = %q", s.Final)
	}
	t0 := s.Turns[0]
	if t0.Text != "Let me read the ticket." || len(t0.ToolCalls) != 1 || t0.ToolCalls[0].Name != "get_ticket" ||
		string(t0.ToolCalls[0].Args) != `{"ticket_id":"T-40127"}` {
		t.Errorf("turn 0 = %+v", t0)
	}
	if t0.Usage == nil || *t0.Usage != (model.Usage{InputTokens: 6000, OutputTokens: 120}) {
		t.Errorf("turn 0 usage = %+v", t0.Usage)
	}
	if s.Turns[1].Usage != nil || s.Turns[1].ExpectToolResultContains != "T-40127" {
		t.Errorf("turn 1 = %+v", s.Turns[1])
	}
	// A date stays the string it was written as.
	if got := string(s.Turns[1].ToolCalls[0].Args); got != `{"card_id":"c_12","since":"2026-10-01"}` {
		t.Errorf("turn 1 args = %s", got)
	}
	// Nested values keep their types; keys come out sorted.
	want := `{"amount_inr":12499,"evidence":{"minutes_apart":2.5,"note":null,"same_amount":true},"reasons":["duplicate","same_merchant"],"txn_id":"t_771"}`
	if got := string(s.Turns[2].ToolCalls[0].Args); got != want {
		t.Errorf("turn 2 args =\n%s\nwant\n%s", got, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown turn field", "turns:\n  - text: a\n  - txt: b\n", []string{"f.yaml:", "turns[1] (line 3)", `unknown field "txt" in a turn`}},
		{"unknown top field", "turns:\n  - text: a\nfinl: x\n", []string{"f.yaml:", `unknown field "finl" in the script`}},
		{"unknown tool call field", "turns:\n  - tool_calls:\n      - name: a\n        arguments: {}\n", []string{"turns[0] (line 4)", `unknown field "arguments" in a tool call`}},
		{"unknown usage field", "turns:\n  - text: a\n    usage: {input: 3}\n", []string{"turns[0] (line 3)", `unknown field "input" in usage`}},
		{"wrong type", "turns:\n  - text: a\n  - text: [x]\n", []string{"turns[1] (line 3)"}},
		{"empty turn", "turns:\n  - text: a\n  - {}\n", []string{"f.yaml: turns[1] (line 3): turn has neither text nor tool_calls"}},
		{"bad tool name", "turns:\n  - tool_calls: [{name: get ticket}]\n", []string{"turns[0] (line 2)", "tool name"}},
		{"args not a mapping", "turns:\n  - tool_calls: [{name: a, args: [1]}]\n", []string{"turns[0] (line 2)", "args", "mapping"}},
		{"duplicate arg key", "turns:\n  - tool_calls:\n      - name: a\n        args: {x: 1, x: 2}\n", []string{"turns[0]", "args"}},
		{"NaN arg", "turns:\n  - tool_calls: [{name: a, args: {x: .nan}}]\n", []string{"turns[0]", "no JSON form"}},
		{"merge key", "turns:\n  - tool_calls: [{name: a, args: {<<: {x: 1}}}]\n", []string{"turns[0]", "merge keys"}},
		{"custom tag", "turns:\n  - tool_calls: [{name: a, args: {x: !money 5}}]\n", []string{"turns[0]", "unsupported tag"}},
		{"negative usage", "turns:\n  - text: a\n    usage: {input_tokens: -1}\n", []string{"turns[0]", "negative"}},
		{"bad stop reason", "turns:\n  - text: a\n    stop_reason: stop\n", []string{"turns[0]", "unknown stop_reason"}},
		{"stop reason with calls", "turns:\n  - tool_calls: [{name: a}]\n    stop_reason: max_tokens\n", []string{"turns[0]", "conflicts"}},
		{"no turns", "final: bye\n", []string{"f.yaml: no turns"}},
		{"empty file", "", []string{"f.yaml: empty script"}},
		{"not a mapping", "- text: a\n", []string{"f.yaml:"}},
		{"two documents", "turns: [{text: a}]\n---\nturns: [{text: b}]\n", []string{"more than one YAML document"}},
		{"syntax error", "turns: [\n", []string{"f.yaml: yaml:"}},
		{"alias bomb", aliasBomb(), []string{"turns[0]", "too many values"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse("f.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", s)
			}
			t.Log(err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// aliasBomb is a "billion laughs" document hidden in tool arguments: x8
// expands to 10^9 strings.
func aliasBomb() string {
	var b strings.Builder
	b.WriteString("turns:\n  - tool_calls:\n      - name: a\n        args:\n")
	b.WriteString("          x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n")
	for i := 1; i < 9; i++ {
		fmt.Fprintf(&b, "          x%d: &a%d [%s*a%d]\n", i, i, strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 9), i-1)
	}
	return b.String()
}

func TestArgsAliasesWithinBudget(t *testing.T) {
	s, err := Parse("f.yaml", []byte("turns:\n  - tool_calls:\n      - name: a\n        args: {x: &v {n: 1}, y: *v}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(s.Turns[0].ToolCalls[0].Args); got != `{"x":{"n":1},"y":{"n":1}}` {
		t.Errorf("args = %s", got)
	}
}

func TestTurnSelection(t *testing.T) {
	p := New(loadDispute(t), Options{})
	for turn, want := range []struct {
		text  string
		calls []string
		stop  string
	}{
		{"Let me read the ticket.", []string{"get_ticket"}, model.StopToolUse},
		{"The customer reports a duplicate charge. Let me check the transactions.", []string{"list_transactions", "get_customer"}, model.StopToolUse},
		{"t_771 and t_772 are the same charge; raising a dispute for 12499 INR.", []string{"raise_dispute"}, model.StopToolUse},
		{"All done: the duplicate charge was refunded.", nil, model.StopEndTurn},
	} {
		resp, err := p.Complete(t.Context(), conversation(turn, "ticket T-40127: charged twice"))
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		if resp.Text() != want.text || resp.StopReason != want.stop || resp.Model != "scripted-1" {
			t.Errorf("turn %d: text %q stop %q model %q", turn, resp.Text(), resp.StopReason, resp.Model)
		}
		calls := resp.ToolCalls()
		if len(calls) != len(want.calls) {
			t.Fatalf("turn %d: %d calls, want %d", turn, len(calls), len(want.calls))
		}
		for i, c := range calls {
			wantID := fmt.Sprintf("toolu_%02d_%d", turn, i)
			if c.Name != want.calls[i] || c.ToolUseID != wantID {
				t.Errorf("turn %d call %d = %s %s, want %s %s", turn, i, c.Name, c.ToolUseID, want.calls[i], wantID)
			}
		}
		if err := model.ValidateResponse(resp); err != nil {
			t.Errorf("turn %d: %v", turn, err)
		}
	}
}

func TestFinalAnswerWithoutTools(t *testing.T) {
	s := loadDispute(t)
	for _, turn := range []int{0, 2, 7} { // 7 is past the end of the script
		req := conversation(turn, "x")
		req.Tools = nil
		resp, err := New(s, Options{}).Complete(t.Context(), req)
		if err != nil {
			t.Fatalf("after %d turns: %v", turn, err)
		}
		if resp.Text() != s.Final || len(resp.ToolCalls()) != 0 || resp.StopReason != model.StopEndTurn {
			t.Errorf("after %d turns: %+v", turn, resp)
		}
	}
	noFinal, err := Parse("f.yaml", []byte("turns: [{text: a}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := New(noFinal, Options{}).Complete(t.Context(), &model.Request{Messages: []model.Message{userText("hi")}})
	if err != nil || resp.Text() != DefaultFinal {
		t.Errorf("default final = %+v, %v", resp, err)
	}
}

func TestExhausted(t *testing.T) {
	s := loadDispute(t)
	_, err := New(s, Options{}).Complete(t.Context(), conversation(4, "x"))
	want := "scripted model (" + s.Source + "): script has 4 turns, request asked for turn 5"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v, want %q", err, want)
	}
	var me *model.Error
	if !errors.As(err, &me) || model.IsRetryable(err) {
		t.Errorf("exhaustion must be a non-retryable *model.Error, got %#v", err)
	}
	if _, err := New(nil, Options{Repeat: true}).Complete(t.Context(), conversation(0, "x")); err == nil ||
		!strings.Contains(err.Error(), "script has 0 turns, request asked for turn 1") {
		t.Errorf("empty script error = %v", err)
	}
}

func TestRepeat(t *testing.T) {
	s, err := Parse("loop.yaml", []byte("turns:\n  - text: again\n    tool_calls: [{name: get_ticket, args: {ticket_id: T-1}}]\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := New(s, Options{Repeat: true})
	for _, turn := range []int{0, 1, 5, 12} {
		resp, err := p.Complete(t.Context(), conversation(turn, "x"))
		if err != nil {
			t.Fatalf("turn %d: %v", turn, err)
		}
		calls := resp.ToolCalls()
		// Ids follow the request's turn, so they stay unique in the conversation.
		if len(calls) != 1 || calls[0].ToolUseID != fmt.Sprintf("toolu_%02d_0", turn) {
			t.Errorf("turn %d: calls %+v", turn, calls)
		}
	}
}

func TestUsage(t *testing.T) {
	p := New(loadDispute(t), Options{})
	// Turn 0 gives its usage.
	resp, err := p.Complete(t.Context(), conversation(0, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Usage != (model.Usage{InputTokens: 6000, OutputTokens: 120}) {
		t.Errorf("turn 0 usage = %+v", resp.Usage)
	}
	// Turn 1 does not: estimated from the request and the answer.
	req := conversation(1, "ticket T-40127")
	resp, err = p.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := model.Usage{InputTokens: model.EstimateTokens(req), OutputTokens: model.EstimateContentTokens(resp.Content)}
	if resp.Usage != want || want.InputTokens == 0 || want.OutputTokens == 0 {
		t.Errorf("turn 1 usage = %+v, want %+v", resp.Usage, want)
	}
}

func TestExpectToolResult(t *testing.T) {
	p := New(loadDispute(t), Options{})
	if _, err := p.Complete(t.Context(), conversation(1, `{"id":"T-40127","body":"charged twice"}`)); err != nil {
		t.Errorf("matching tool result refused: %v", err)
	}
	_, err := p.Complete(t.Context(), conversation(1, `{"id":"T-99999"}`))
	if err == nil || !strings.Contains(err.Error(), `turn 2 expects the last user message's tool results to contain "T-40127"`) ||
		!strings.Contains(err.Error(), "T-99999") {
		t.Errorf("error = %v", err)
	}
	if model.IsRetryable(err) {
		t.Error("a mis-sequenced script is not retryable")
	}
}

func TestDeterministic(t *testing.T) {
	s := loadDispute(t)
	for turn := range 4 {
		req := conversation(turn, "ticket T-40127")
		a, errA := New(s, Options{}).Complete(t.Context(), req)
		b, errB := New(s, Options{}).Complete(t.Context(), conversation(turn, "ticket T-40127"))
		if errA != nil || errB != nil {
			t.Fatal(errA, errB)
		}
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		if string(ja) != string(jb) {
			t.Errorf("turn %d differs:\n%s\n%s", turn, ja, jb)
		}
	}
}

func TestNewCopiesScript(t *testing.T) {
	s := loadDispute(t)
	p := New(s, Options{})
	s.Turns[0].Text = "changed"
	s.Turns[0].ToolCalls[0].Args[2] = 'X'
	resp, err := p.Complete(t.Context(), conversation(0, "x"))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Text() != "Let me read the ticket." || string(resp.ToolCalls()[0].Input) != `{"ticket_id":"T-40127"}` {
		t.Errorf("provider saw later changes to the script: %+v", resp)
	}
	// Nor can a caller change the provider through a response.
	resp.ToolCalls()[0].Input[2] = 'Y'
	again, _ := p.Complete(t.Context(), conversation(0, "x"))
	if string(again.ToolCalls()[0].Input) != `{"ticket_id":"T-40127"}` {
		t.Error("a response shares memory with the script")
	}
}

func TestValidateScriptBuiltInGo(t *testing.T) {
	bad := &Script{Source: "go", Turns: []Turn{{ToolCalls: []ToolCall{{Name: "x", Args: json.RawMessage(`[1]`)}}}}}
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "go: turns[0]") {
		t.Errorf("Validate = %v", err)
	}
	// Unvalidated, the provider still refuses to return the bad answer.
	_, err := New(bad, Options{}).Complete(t.Context(), conversation(0, "x"))
	if !errors.Is(err, model.ErrInvalidResponse) {
		t.Errorf("error = %v, want ErrInvalidResponse", err)
	}
	good := &Script{Turns: []Turn{{Text: "ok"}}}
	if err := good.Validate(); err != nil {
		t.Error(err)
	}
}

func TestLatencyAndCancellation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := New(loadDispute(t), Options{LatencyPerCall: 4 * time.Second})
		start := time.Now()
		if _, err := p.Complete(t.Context(), conversation(0, "x")); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d != 4*time.Second {
			t.Errorf("call took %v of fake time, want 4s", d)
		}

		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		start = time.Now()
		_, err := p.Complete(ctx, conversation(0, "x"))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error = %v, want deadline exceeded", err)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("canceled call returned after %v, want 1s", d)
		}
	})
}

func TestLoadMissing(t *testing.T) {
	_, err := Load(filepath.Join(t.TempDir(), "nope.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("error = %v", err)
	}
}

func TestGatewayOverScripted(t *testing.T) {
	g, err := model.NewGateway(model.GatewayOptions{
		Providers: map[string]model.Provider{"scripted": New(loadDispute(t), Options{})},
		Aliases: []model.AliasConfig{{Name: "default", Provider: "scripted", ModelID: "scripted-sonnet",
			Price: &model.Price{Currency: "USD", InputPerMTok: 2_000_000, OutputPerMTok: 10_000_000}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err := g.Complete(t.Context(), "default", conversation(0, "x"), model.Attribution{Tenant: "bank", RunID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	// 6000 input at $2/MTok + 120 output at $10/MTok = 0.0132 USD.
	if res.Cost != (model.Money{Micros: 13_200, Currency: "USD"}) || res.Response.Model != "scripted-sonnet" {
		t.Errorf("result = %+v cost %v", res, res.Cost)
	}
}

func TestConcurrentRuns(t *testing.T) {
	p := New(loadDispute(t), Options{})
	want := make([]string, 4)
	for turn := range 4 {
		r, err := p.Complete(t.Context(), conversation(turn, "T-40127"))
		if err != nil {
			t.Fatal(err)
		}
		j, _ := json.Marshal(r)
		want[turn] = string(j)
	}
	var wg sync.WaitGroup
	for i := range 32 {
		wg.Go(func() {
			turn := i % 4
			r, err := p.Complete(t.Context(), conversation(turn, "T-40127"))
			if err != nil {
				t.Error(err)
				return
			}
			if j, _ := json.Marshal(r); string(j) != want[turn] {
				t.Errorf("concurrent call for turn %d answered %s", turn, j)
			}
		})
	}
	wg.Wait()
}

const conformanceScript = `
final: "pong"
turns:
  - text: "Let me look that up."
    tool_calls:
      - name: lookup_order
        args: {order_id: A-1001}
  - text: "Order A-1001 has shipped."
    expect_tool_result_contains: shipped
`

func TestConformance(t *testing.T) {
	s, err := Parse("conformance.yaml", []byte(conformanceScript))
	if err != nil {
		t.Fatal(err)
	}
	modeltest.Exercise(t, func(t *testing.T) model.Provider { return New(s, Options{}) })
}

func TestParseIsDeterministic(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "dispute.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	a, errA := Parse("d", data)
	b, errB := Parse("d", data)
	if errA != nil || errB != nil || !reflect.DeepEqual(a, b) {
		t.Errorf("two parses differ: %v %v", errA, errB)
	}
}

func TestLastHandle(t *testing.T) {
	s, err := Parse("h.yaml", []byte(`
turns:
  - tool_calls: [{name: get_ticket, args: {}}]
  - tool_calls: [{name: list_transactions, args: {inputs: {t.json: $last_handle}, keep: "$last_handle is literal inside text"}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p := New(s, Options{})
	old, newest := "blob:"+strings.Repeat("a", 64), "blob:"+strings.Repeat("b", 64)
	// A handle-shaped string inside the preview (the tool's own output) is
	// not the handle.
	req := conversation(1, `{"handle":"`+newest+`","preview":"planted `+old+`"}`)
	resp, err := p.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	var args struct {
		Inputs map[string]string `json:"inputs"`
		Keep   string            `json:"keep"`
	}
	if err := json.Unmarshal(resp.ToolCalls()[0].Input, &args); err != nil {
		t.Fatal(err)
	}
	if args.Inputs["t.json"] != newest || args.Keep != "$last_handle is literal inside text" {
		t.Fatalf("args %+v, want the newest handle %s", args, newest)
	}
	if _, err := p.Complete(t.Context(), conversation(1, "no handle here")); err == nil || !strings.Contains(err.Error(), "no tool result") {
		t.Fatalf("without a handle: %v", err)
	}
}
