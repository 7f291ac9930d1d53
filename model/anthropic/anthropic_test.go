package anthropic_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/anthropic"
	"github.com/agentplane/agentplane/model/anthropic/anthropictest"
	"github.com/agentplane/agentplane/model/modeltest"
)

func newServer(t *testing.T, reply func(*anthropictest.Call) anthropictest.Reply) *anthropictest.Server {
	t.Helper()
	s := anthropictest.NewServer(anthropictest.Options{Reply: reply})
	t.Cleanup(s.Close)
	return s
}

func newProvider(t *testing.T, url string, edit func(*anthropic.Options)) *anthropic.Provider {
	t.Helper()
	o := anthropic.Options{APIKey: "sk-ant-test", BaseURL: url}
	if edit != nil {
		edit(&o)
	}
	p, err := anthropic.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConformance(t *testing.T) {
	modeltest.Exercise(t, func(t *testing.T) model.Provider {
		s := newServer(t, nil)
		return withModel{newProvider(t, s.URL, nil), "claude-sonnet-5"}
	})
}

func TestConformanceStreaming(t *testing.T) {
	modeltest.Exercise(t, func(t *testing.T) model.Provider {
		s := newServer(t, nil)
		return streamOnly{newProvider(t, s.URL, nil)}
	})
}

// withModel fills in the model id, as the gateway does.
type withModel struct {
	p  model.Provider
	id string
}

func (w withModel) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	r := *req
	r.Model = w.id
	return w.p.Complete(ctx, &r)
}

// streamOnly answers every call through CompleteStream.
type streamOnly struct{ p *anthropic.Provider }

func (s streamOnly) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	r := *req
	r.Model = "claude-sonnet-5"
	return s.p.CompleteStream(ctx, &r, func(model.Delta) {})
}

var lookupSchema = json.RawMessage(`{"type":"object","properties":{"order_id":{"type":"string"}},"required":["order_id"]}`)

// dispute is a request with every kind of part: the system prompt, two
// tools, a tool call and its (failed) result, and a platform note.
func dispute() *model.Request {
	temp := 0.2
	return &model.Request{
		Model:  "claude-sonnet-5",
		System: "You are the card-dispute assistant of the bank.",
		Tools: []model.ToolDef{
			{Name: "get_ticket", Description: "Read a support ticket.", InputSchema: json.RawMessage(`{"type":"object","properties":{"ticket_id":{"type":"string"}},"required":["ticket_id"]}`)},
			{Name: "lookup_order", Description: "Look up an order.", InputSchema: lookupSchema},
		},
		Messages: []model.Message{
			{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "Ticket T-40127: two charges of 12,499 INR."}}},
			{Role: model.RoleAssistant, Content: []model.Part{
				{Type: model.PartText, Text: "Reading the ticket."},
				{Type: model.PartToolUse, ToolUseID: "toolu_01", Name: "get_ticket", Input: json.RawMessage(`{"ticket_id":"T-40127"}`)},
			}},
			{Role: model.RoleUser, Content: []model.Part{
				{Type: model.PartToolResult, ToolUseID: "toolu_01", Text: `{"error":"ticket system down"}`, IsError: true},
				{Type: model.PartText, Text: "Note from the platform: retry later."},
			}},
		},
		MaxTokens:   512,
		Temperature: &temp,
	}
}

// wire is the request body as the SDK sent it, decoded generically.
func wire(t *testing.T, c *anthropictest.Call) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(c.Raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRequestWireFormat(t *testing.T) {
	s := newServer(t, nil)
	p := newProvider(t, s.URL, nil)
	if _, err := p.Complete(t.Context(), dispute()); err != nil {
		t.Fatal(err)
	}
	c := s.Calls()[0]
	if got := c.Header.Get("Authorization"); got != "Bearer sk-ant-test" && c.Header.Get("X-Api-Key") != "sk-ant-test" {
		t.Errorf("credential not sent: Authorization %q", got)
	}
	if c.Header.Get("Anthropic-Version") == "" {
		t.Error("no anthropic-version header")
	}
	if n := c.Header.Get("X-Stainless-Retry-Count"); n != "" && n != "0" {
		t.Errorf("SDK retry count header %q", n)
	}
	w := wire(t, c)
	if w["model"] != "claude-sonnet-5" || w["max_tokens"] != 512.0 || w["temperature"] != 0.2 {
		t.Errorf("model %v max_tokens %v temperature %v", w["model"], w["max_tokens"], w["temperature"])
	}
	if _, ok := w["stream"]; ok {
		t.Error("non-streaming call sent a stream field")
	}
	// System prompt: one text block carrying the first breakpoint (it ends
	// the tools+system prefix).
	want := `[{"text":"You are the card-dispute assistant of the bank.","cache_control":{"type":"ephemeral","ttl":"5m"},"type":"text"}]`
	if got := jsonOf(t, w["system"]); got != canon(t, want) {
		t.Errorf("system = %s\nwant     %s", got, canon(t, want))
	}
	// Tools in the given order, schemas byte for byte, no breakpoint of
	// their own (the system block's covers them).
	tools := w["tools"].([]any)
	if len(tools) != 2 || tools[0].(map[string]any)["name"] != "get_ticket" || tools[1].(map[string]any)["name"] != "lookup_order" {
		t.Fatalf("tools = %s", jsonOf(t, tools))
	}
	for i, tl := range c.Req.Tools {
		if string(tl.InputSchema) != string(dispute().Tools[i].InputSchema) {
			t.Errorf("tool %s schema on the wire %s, want it as given", tl.Name, tl.InputSchema)
		}
		if tl.CacheControl != nil {
			t.Errorf("tool %s carries a breakpoint although the system prompt ends the prefix", tl.Name)
		}
	}
	if c.Breakpoints != 2 {
		t.Errorf("%d breakpoints, want 2 (prefix and end of conversation)", c.Breakpoints)
	}
	msgs := c.Req.Messages
	if len(msgs) != 3 || msgs[0].Role != "user" || msgs[1].Role != "assistant" || msgs[2].Role != "user" {
		t.Fatalf("messages = %s", c.Raw)
	}
	call := msgs[1].Content[1]
	if call.Type != "tool_use" || call.ID != "toolu_01" || call.Name != "get_ticket" || string(call.Input) != `{"ticket_id":"T-40127"}` {
		t.Errorf("tool_use block = %+v", call)
	}
	res := msgs[2].Content[0]
	if res.Type != "tool_result" || res.ToolUseID != "toolu_01" || !res.IsError || !strings.Contains(string(res.Content), "ticket system down") {
		t.Errorf("tool_result block = %+v", res)
	}
	last := msgs[2].Content[1]
	if last.CacheControl == nil || last.CacheControl.Type != "ephemeral" {
		t.Errorf("the conversation's last block has no breakpoint: %+v", last)
	}
	for _, b := range append(msgs[0].Content, msgs[1].Content...) {
		if b.CacheControl != nil {
			t.Errorf("unexpected breakpoint on %+v", b)
		}
	}
}

func TestBreakpointOnLastToolWithoutSystem(t *testing.T) {
	s := newServer(t, nil)
	p := newProvider(t, s.URL, nil)
	req := dispute()
	req.System = ""
	if _, err := p.Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	c := s.Calls()[0]
	if _, ok := wire(t, c)["system"]; ok {
		t.Error("empty system prompt sent")
	}
	if c.Req.Tools[0].CacheControl != nil || c.Req.Tools[1].CacheControl == nil {
		t.Errorf("want the breakpoint on the last tool: %s", c.Raw)
	}
}

func TestCacheOptions(t *testing.T) {
	s := newServer(t, nil)
	if _, err := newProvider(t, s.URL, func(o *anthropic.Options) { o.DisableCache = true }).Complete(t.Context(), dispute()); err != nil {
		t.Fatal(err)
	}
	if _, err := newProvider(t, s.URL, func(o *anthropic.Options) { o.CacheTTL = anthropic.CacheTTL1h }).Complete(t.Context(), dispute()); err != nil {
		t.Fatal(err)
	}
	calls := s.Calls()
	if calls[0].Breakpoints != 0 || strings.Contains(string(calls[0].Raw), "cache_control") {
		t.Errorf("caching disabled but the request carries breakpoints: %s", calls[0].Raw)
	}
	if calls[1].Breakpoints != 2 || strings.Count(string(calls[1].Raw), `"ttl":"1h"`) != 2 {
		t.Errorf("1h TTL not sent on both breakpoints: %s", calls[1].Raw)
	}
	if _, err := anthropic.New(anthropic.Options{CacheTTL: "1d"}); err == nil {
		t.Error("unknown TTL accepted")
	}
	if _, err := anthropic.New(anthropic.Options{BaseURL: "api.anthropic.com"}); err == nil {
		t.Error("base URL without a scheme accepted")
	}
}

func TestMaxTokensDefault(t *testing.T) {
	s := newServer(t, nil)
	req := dispute()
	req.MaxTokens = 0
	if _, err := newProvider(t, s.URL, nil).Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	if got := s.Calls()[0].Req.MaxTokens; got != anthropic.DefaultMaxTokens {
		t.Errorf("max_tokens %d, want the default %d (the API requires one)", got, anthropic.DefaultMaxTokens)
	}
}

func TestEnvironmentNotConsulted(t *testing.T) {
	t.Setenv("ANTHROPIC_API_KEY", "sk-from-env")
	t.Setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:1")
	s := newServer(t, nil)
	p := newProvider(t, s.URL, func(o *anthropic.Options) { o.APIKey = "" })
	if _, err := p.Complete(t.Context(), dispute()); err != nil {
		t.Fatalf("call went elsewhere than the configured base URL: %v", err)
	}
	h := s.Calls()[0].Header
	if strings.Contains(h.Get("Authorization")+h.Get("X-Api-Key"), "sk-from-env") {
		t.Error("key taken from the environment")
	}
}

func TestResponses(t *testing.T) {
	toolCall := anthropictest.Block{Type: "tool_use", ID: "toolu_7", Name: "lookup_order", Input: json.RawMessage(`{"order_id":"A-1001"}`)}
	for _, tc := range []struct {
		reason  string
		content []anthropictest.Block
		want    string
	}{
		{"end_turn", nil, model.StopEndTurn},
		{"stop_sequence", nil, model.StopEndTurn},
		{"tool_use", []anthropictest.Block{{Type: "text", Text: "Checking."}, toolCall}, model.StopToolUse},
		{"max_tokens", nil, model.StopMaxTokens},
		{"pause_turn", nil, model.StopMaxTokens},
		{"model_context_window_exceeded", nil, model.StopMaxTokens},
		{"refusal", nil, model.StopRefusal},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", tc.reason, stream), func(t *testing.T) {
				s := newServer(t, func(*anthropictest.Call) anthropictest.Reply {
					content := tc.content
					if content == nil {
						content = []anthropictest.Block{{Type: "text", Text: "An answer of several words."}}
					}
					return anthropictest.Reply{StopReason: tc.reason, Content: content}
				})
				p := newProvider(t, s.URL, nil)
				var resp *model.Response
				var err error
				var streamed strings.Builder
				if stream {
					resp, err = p.CompleteStream(t.Context(), dispute(), func(d model.Delta) { streamed.WriteString(d.Text) })
				} else {
					resp, err = p.Complete(t.Context(), dispute())
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := model.ValidateResponse(resp); err != nil {
					t.Fatal(err)
				}
				if resp.StopReason != tc.want {
					t.Errorf("stop reason %q -> %q, want %q", tc.reason, resp.StopReason, tc.want)
				}
				if stream && streamed.String() != resp.Text() {
					t.Errorf("streamed %q, final text %q", streamed.String(), resp.Text())
				}
				if tc.reason == "tool_use" {
					calls := resp.ToolCalls()
					if len(calls) != 1 || calls[0].ToolUseID != "toolu_7" || calls[0].Name != "lookup_order" || string(calls[0].Input) != `{"order_id":"A-1001"}` {
						t.Errorf("tool calls %+v", calls)
					}
				}
				u := resp.Usage
				if want := s.Calls()[0].Usage; u.InputTokens != want.InputTokens || u.CacheCreationTokens != want.CacheCreationInputTokens || u.CacheReadTokens != want.CacheReadInputTokens || u.OutputTokens <= 1 {
					t.Errorf("usage %+v, server computed %+v", u, want)
				}
			})
		}
	}
}

func TestUsageReportsCacheWritesAndReads(t *testing.T) {
	s := newServer(t, nil)
	p := newProvider(t, s.URL, nil)
	first, err := p.Complete(t.Context(), dispute())
	if err != nil {
		t.Fatal(err)
	}
	second, err := p.Complete(t.Context(), dispute())
	if err != nil {
		t.Fatal(err)
	}
	if first.Usage.CacheCreationTokens == 0 || first.Usage.CacheReadTokens != 0 {
		t.Errorf("first call usage %+v: want a cache write and no read", first.Usage)
	}
	if second.Usage.CacheReadTokens != first.Usage.CacheCreationTokens || second.Usage.CacheCreationTokens != 0 {
		t.Errorf("second call usage %+v: want it to read all the first wrote (%d)", second.Usage, first.Usage.CacheCreationTokens)
	}
	// The simulator rounds each block up, the estimate the whole prompt once:
	// they differ by less than one token per block.
	est, blocks := model.EstimateTokens(dispute()), int64(2+1+5)
	if tot := first.Usage.TotalInput(); tot != second.Usage.TotalInput() || tot < est || tot > est+blocks {
		t.Errorf("total input %d / %d, want both within %d of the estimate %d", tot, second.Usage.TotalInput(), blocks, est)
	}
}

func TestUnknownBlockIsRefusedNotHidden(t *testing.T) {
	s := newServer(t, func(*anthropictest.Call) anthropictest.Reply {
		return anthropictest.Reply{Content: []anthropictest.Block{{Type: "thinking", Text: ""}, {Type: "server_tool_use", ID: "srvtoolu_1", Name: "web_search", Input: json.RawMessage(`{}`)}}}
	})
	resp, err := newProvider(t, s.URL, nil).Complete(t.Context(), dispute())
	if err != nil {
		t.Fatal(err)
	}
	if err := model.ValidateResponse(resp); !errors.Is(err, model.ErrInvalidResponse) || !strings.Contains(err.Error(), "server_tool_use") {
		t.Errorf("ValidateResponse = %v, want it to refuse the server_tool_use block by name", err)
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		reply      anthropictest.Reply
		stream     bool
		retryable  bool
		status     int
		retryAfter time.Duration
		contains   string
	}{
		{"400 invalid request", anthropictest.Reply{Status: 400, ErrorType: "invalid_request_error", ErrorMessage: "messages.0: bad"}, false, false, 400, 0, "invalid_request_error: messages.0: bad"},
		{"401 authentication", anthropictest.Reply{Status: 401, ErrorType: "authentication_error", ErrorMessage: "invalid x-api-key"}, false, false, 401, 0, "authentication_error"},
		{"403 permission", anthropictest.Reply{Status: 403, ErrorType: "permission_error", ErrorMessage: "no"}, false, false, 403, 0, "permission_error"},
		{"404 model", anthropictest.Reply{Status: 404, ErrorType: "not_found_error", ErrorMessage: "model: claude-x"}, false, false, 404, 0, "not_found_error"},
		{"413 too large", anthropictest.Reply{Status: 413, ErrorType: "request_too_large", ErrorMessage: "too big"}, false, false, 413, 0, "request_too_large"},
		{"429 with Retry-After", anthropictest.Reply{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down", Header: map[string]string{"Retry-After": "7"}}, false, true, 429, 7 * time.Second, "rate_limit_error"},
		{"429 streaming", anthropictest.Reply{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down", Header: map[string]string{"Retry-After": "3"}}, true, true, 429, 3 * time.Second, "rate_limit_error"},
		{"500 api error", anthropictest.Reply{Status: 500, ErrorType: "api_error", ErrorMessage: "internal"}, false, true, 500, 0, "api_error"},
		{"529 overloaded", anthropictest.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}, false, true, 529, 0, "overloaded_error"},
		{"529 overloaded streaming", anthropictest.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}, true, true, 529, 0, "overloaded_error"},
		{"error event mid-stream", anthropictest.Reply{StreamError: "overloaded_error"}, true, true, 0, 0, "overloaded_error"},
		{"stream cut cleanly", anthropictest.Reply{CutAfterEvents: 4}, true, true, 0, 0, "message_stop"},
		{"stream aborted", anthropictest.Reply{CutAfterEvents: 4, Abort: true}, true, true, 0, 0, ""},
		{"non-JSON 502 from a proxy", anthropictest.Reply{Status: 502, Body: "<html>bad gateway</html>"}, false, true, 502, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, func(*anthropictest.Call) anthropictest.Reply { return tc.reply })
			p := newProvider(t, s.URL, nil)
			var err error
			var deltas int
			if tc.stream {
				_, err = p.CompleteStream(t.Context(), dispute(), func(model.Delta) { deltas++ })
			} else {
				_, err = p.Complete(t.Context(), dispute())
			}
			var me *model.Error
			if !errors.As(err, &me) {
				t.Fatalf("error %v (%T), want a *model.Error", err, err)
			}
			if model.IsRetryable(err) != tc.retryable || me.StatusCode != tc.status || me.RetryAfter != tc.retryAfter {
				t.Errorf("retryable %v status %d retry-after %v; want %v %d %v (%v)", model.IsRetryable(err), me.StatusCode, me.RetryAfter, tc.retryable, tc.status, tc.retryAfter, err)
			}
			if !strings.Contains(err.Error(), tc.contains) {
				t.Errorf("error %q should contain %q", err, tc.contains)
			}
			if strings.Contains(err.Error(), "sk-ant-test") {
				t.Error("error leaks the API key")
			}
			if n := len(s.Calls()); n != 1 {
				t.Errorf("%d requests; the provider must make exactly one (retries are the gateway's)", n)
			}
		})
	}
}

func TestConnectionRefusedIsRetryable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = newProvider(t, "http://"+addr, nil).Complete(t.Context(), dispute())
	if !model.IsRetryable(err) {
		t.Errorf("connection refused: %v, want retryable", err)
	}
}

func TestCanceledContextIsNotRetryable(t *testing.T) {
	release := make(chan struct{})
	s := newServer(t, func(*anthropictest.Call) anthropictest.Reply {
		<-release
		return anthropictest.Reply{}
	})
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := newProvider(t, s.URL, nil).CompleteStream(ctx, dispute(), func(model.Delta) {})
	if !errors.Is(err, context.DeadlineExceeded) || model.IsRetryable(err) {
		t.Errorf("error %v: want the caller's deadline, not retryable", err)
	}
}

func TestStreamingToolUseAndDeltaOrder(t *testing.T) {
	s := newServer(t, func(*anthropictest.Call) anthropictest.Reply {
		return anthropictest.Reply{StopReason: "tool_use", Content: []anthropictest.Block{
			{Type: "text", Text: "I will raise the dispute now."},
			{Type: "tool_use", ID: "toolu_9", Name: "raise_dispute", Input: json.RawMessage(`{"txn_id":"t_771","amount_inr":12499}`)},
		}}
	})
	var deltas []string
	resp, err := newProvider(t, s.URL, nil).CompleteStream(t.Context(), dispute(), func(d model.Delta) { deltas = append(deltas, d.Text) })
	if err != nil {
		t.Fatal(err)
	}
	if len(deltas) < 2 || strings.Join(deltas, "") != "I will raise the dispute now." {
		t.Errorf("deltas %q", deltas)
	}
	calls := resp.ToolCalls()
	if len(calls) != 1 || string(calls[0].Input) != `{"txn_id":"t_771","amount_inr":12499}` || resp.StopReason != model.StopToolUse {
		t.Errorf("response %+v", resp)
	}
	if !strings.Contains(string(s.Calls()[0].Raw), `"stream":true`) {
		t.Error("streaming call did not ask for a stream")
	}
}

// Through the gateway: a 529 then a 429 are retried on the wire, the answer
// is counted once, and a dead primary fails over to a secondary provider.
func TestGatewayOverTheWire(t *testing.T) {
	primary := newServer(t, func(c *anthropictest.Call) anthropictest.Reply {
		switch c.N {
		case 1:
			return anthropictest.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}
		case 2:
			return anthropictest.Reply{Status: 429, ErrorType: "rate_limit_error", ErrorMessage: "slow down", Header: map[string]string{"Retry-After": "2"}}
		case 3:
			return anthropictest.Reply{CutAfterEvents: 3, Abort: true}
		}
		return anthropictest.DefaultReply(c)
	})
	secondary := newServer(t, nil)
	price := model.Price{Currency: "USD", InputPerMTok: 2_000_000, OutputPerMTok: 10_000_000, CacheWritePerMTok: 2_500_000, CacheReadPerMTok: 200_000}
	ledger := &model.Ledger{}
	var waits []time.Duration
	g, err := model.NewGateway(model.GatewayOptions{
		Providers: map[string]model.Provider{
			"anthropic":        newProvider(t, primary.URL, nil),
			"anthropic-backup": newProvider(t, secondary.URL, nil),
		},
		Aliases: []model.AliasConfig{
			{Name: "standard", Provider: "anthropic", ModelID: "claude-sonnet-5", Price: &price, MaxTokens: 256, Fallback: "backup"},
			{Name: "backup", Provider: "anthropic-backup", ModelID: "claude-sonnet-5", Price: &price, MaxTokens: 256},
		},
		Retry: model.RetryPolicy{MaxAttempts: 4},
		Meter: ledger,
		Sleep: func(_ context.Context, d time.Duration) error { waits = append(waits, d); return nil },
		Rand:  func() float64 { return 0 },
	})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	res, err := g.CompleteStream(t.Context(), "standard", modeltest.TextRequest(), model.Attribution{RunID: "run-w"}, func(d model.Delta) {
		if d.Reset {
			text.Reset()
			return
		}
		text.WriteString(d.Text)
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Alias != "standard" || res.Attempts != 4 || len(primary.Calls()) != 4 || len(secondary.Calls()) != 0 {
		t.Errorf("alias %s attempts %d, primary saw %d, secondary %d", res.Alias, res.Attempts, len(primary.Calls()), len(secondary.Calls()))
	}
	if text.String() != "pong" || res.Response.Text() != "pong" {
		t.Errorf("streamed %q, answer %q", text.String(), res.Response.Text())
	}
	if len(waits) != 3 || waits[1] != 2*time.Second {
		t.Errorf("waits %v, want three with the second honouring Retry-After: 2", waits)
	}
	recs := ledger.Records()
	answering := primary.Calls()[3].Usage
	if len(recs) != 1 || recs[0].Usage != res.Usage || recs[0].Usage.TotalInput() != answering.InputTokens+answering.CacheCreationInputTokens+answering.CacheReadInputTokens {
		t.Errorf("ledger %+v; want the answering attempt only", recs)
	}

	// Now the primary is down for good: four 529s, then the backup answers.
	primary2 := newServer(t, func(*anthropictest.Call) anthropictest.Reply {
		return anthropictest.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}
	})
	g2, err := model.NewGateway(model.GatewayOptions{
		Providers: map[string]model.Provider{
			"anthropic":        newProvider(t, primary2.URL, nil),
			"anthropic-backup": newProvider(t, secondary.URL, nil),
		},
		Aliases: []model.AliasConfig{
			{Name: "standard", Provider: "anthropic", ModelID: "claude-sonnet-5", Price: &price, MaxTokens: 256, Fallback: "backup"},
			{Name: "backup", Provider: "anthropic-backup", ModelID: "claude-haiku-5-5", Price: &price, MaxTokens: 256},
		},
		Sleep: func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	res, err = g2.Complete(t.Context(), "standard", modeltest.TextRequest(), model.Attribution{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Alias != "backup" || res.ModelID != "claude-haiku-5-5" || len(primary2.Calls()) != 3 || len(secondary.Calls()) != 1 {
		t.Errorf("answered by %s/%s; primary saw %d calls, secondary %d", res.Alias, res.ModelID, len(primary2.Calls()), len(secondary.Calls()))
	}
	if got := secondary.Calls()[0].Req.Model; got != "claude-haiku-5-5" {
		t.Errorf("secondary asked for model %q", got)
	}
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func canon(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return jsonOf(t, v)
}

var _ = http.StatusOK
