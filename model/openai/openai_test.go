package openai_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/modeltest"
	"github.com/agentplane/agentplane/model/openai"
)

// wireReq is a Chat Completions request body as a server sees it.
type wireReq struct {
	Model               string           `json:"model"`
	Messages            []map[string]any `json:"messages"`
	Tools               []map[string]any `json:"tools"`
	MaxCompletionTokens *int             `json:"max_completion_tokens"`
	MaxTokens           *int             `json:"max_tokens"`
	Temperature         *float64         `json:"temperature"`
	Stream              bool             `json:"stream"`
	StreamOptions       map[string]any   `json:"stream_options"`
}

type seen struct {
	header http.Header
	raw    []byte
	req    wireReq
}

// reply says how the fake answers: a status with an error body, a raw body,
// or a message (content, tool calls, finish reason) with usage; streamed
// when the request asks. cut > 0 ends a stream after that many chunks
// (abort: by dropping the connection).
type reply struct {
	status    int
	header    map[string]string
	errType   string
	errCode   string
	body      string
	content   string
	refusal   string
	calls     []map[string]any // {"id","name","arguments"}
	finish    string
	cached    int
	noUsage   bool
	cut       int
	abort     bool
	streamErr string
}

type fake struct {
	srv   *httptest.Server
	reply func(n int, r wireReq) reply
	mu    sync.Mutex
	calls []seen
}

func newFake(t *testing.T, fn func(n int, r wireReq) reply) *fake {
	t.Helper()
	if fn == nil {
		fn = defaultReply
	}
	f := &fake{reply: fn}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fake) url() string { return f.srv.URL + "/v1" }

func (f *fake) seen() []seen {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]seen(nil), f.calls...)
}

// defaultReply calls the first tool when tools are offered and no tool
// result is in, else answers in text.
func defaultReply(n int, r wireReq) reply {
	last := r.Messages[len(r.Messages)-1]
	switch {
	case len(r.Tools) > 0 && last["role"] != "tool":
		name := r.Tools[0]["function"].(map[string]any)["name"].(string)
		return reply{finish: "tool_calls", calls: []map[string]any{{"id": fmt.Sprintf("call_%d", n), "name": name, "arguments": `{"order_id":"A-1001"}`}}}
	case last["role"] == "tool":
		return reply{finish: "stop", content: "Order A-1001 has shipped."}
	}
	return reply{finish: "stop", content: "pong"}
}

func (f *fake) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	var req wireReq
	if r.URL.Path != "/v1/chat/completions" || json.Unmarshal(raw, &req) != nil {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	f.mu.Lock()
	f.calls = append(f.calls, seen{header: r.Header.Clone(), raw: raw, req: req})
	n := len(f.calls)
	f.mu.Unlock()
	rep := f.reply(n, req)
	for k, v := range rep.header {
		w.Header().Set(k, v)
	}
	if rep.body != "" {
		w.WriteHeader(rep.status)
		io.WriteString(w, rep.body)
		return
	}
	if rep.status != 0 && rep.status != 200 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(rep.status)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": "simulated " + rep.errType, "type": rep.errType, "param": nil, "code": rep.errCode}})
		return
	}
	prompt := len(raw) / 4
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": 7, "total_tokens": prompt + 7,
		"prompt_tokens_details": map[string]any{"cached_tokens": rep.cached}}
	var toolCalls []any
	for _, c := range rep.calls {
		toolCalls = append(toolCalls, map[string]any{"id": c["id"], "type": "function", "function": map[string]any{"name": c["name"], "arguments": c["arguments"]}})
	}
	if !req.Stream {
		msg := map[string]any{"role": "assistant", "content": nilIfEmpty(rep.content), "refusal": nilIfEmpty(rep.refusal)}
		if toolCalls != nil {
			msg["tool_calls"] = toolCalls
		}
		body := map[string]any{"id": "chatcmpl-sim", "object": "chat.completion", "created": 1793000000, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "logprobs": nil, "finish_reason": rep.finish}}}
		if !rep.noUsage {
			body["usage"] = usage
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(body)
		return
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "chatcmpl-sim", "object": "chat.completion.chunk", "created": 1793000000, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	chunks := []map[string]any{chunk(map[string]any{"role": "assistant", "content": ""}, nil)}
	for _, piece := range pieces(rep.content) {
		chunks = append(chunks, chunk(map[string]any{"content": piece}, nil))
	}
	if rep.refusal != "" {
		chunks = append(chunks, chunk(map[string]any{"refusal": rep.refusal}, nil))
	}
	for i, c := range rep.calls {
		args := c["arguments"].(string)
		half := len(args) / 2
		chunks = append(chunks,
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "id": c["id"], "type": "function", "function": map[string]any{"name": c["name"], "arguments": args[:half]}}}}, nil),
			chunk(map[string]any{"tool_calls": []any{map[string]any{"index": i, "function": map[string]any{"arguments": args[half:]}}}}, nil))
	}
	chunks = append(chunks, chunk(map[string]any{}, rep.finish))
	if opts := req.StreamOptions; opts != nil && opts["include_usage"] == true && !rep.noUsage {
		chunks = append(chunks, map[string]any{"id": "chatcmpl-sim", "object": "chat.completion.chunk", "created": 1793000000, "model": req.Model, "choices": []any{}, "usage": usage})
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	for i, c := range chunks {
		if rep.cut > 0 && i == rep.cut {
			if rep.abort {
				panic(http.ErrAbortHandler)
			}
			return
		}
		if rep.streamErr != "" && i == len(chunks)-1 {
			fmt.Fprintf(w, "data: {\"error\":{\"message\":\"simulated\",\"type\":%q,\"code\":null}}\n\n", rep.streamErr)
			return
		}
		b, _ := json.Marshal(c)
		fmt.Fprintf(w, "data: %s\n\n", b)
		fl.Flush()
	}
	io.WriteString(w, "data: [DONE]\n\n")
}

func nilIfEmpty(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func pieces(s string) []string {
	var out []string
	for len(s) > 4 {
		out = append(out, s[:4])
		s = s[4:]
	}
	if s != "" {
		out = append(out, s)
	}
	return out
}

func newProvider(t *testing.T, url string, edit func(*openai.Options)) *openai.Provider {
	t.Helper()
	o := openai.Options{APIKey: "sk-test", BaseURL: url}
	if edit != nil {
		edit(&o)
	}
	p, err := openai.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type withModel struct {
	p      *openai.Provider
	stream bool
}

func (w withModel) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	r := *req
	r.Model = "gpt-6-mini"
	if w.stream {
		return w.p.CompleteStream(ctx, &r, func(model.Delta) {})
	}
	return w.p.Complete(ctx, &r)
}

func TestConformance(t *testing.T) {
	modeltest.Exercise(t, func(t *testing.T) model.Provider { return withModel{p: newProvider(t, newFake(t, nil).url(), nil)} })
}

func TestConformanceStreaming(t *testing.T) {
	modeltest.Exercise(t, func(t *testing.T) model.Provider {
		return withModel{p: newProvider(t, newFake(t, nil).url(), nil), stream: true}
	})
}

func dispute() *model.Request {
	temp := 0.0
	return &model.Request{
		Model:  "gpt-6-mini",
		System: "You are the card-dispute assistant of the bank.",
		Tools: []model.ToolDef{{Name: "get_ticket", Description: "Read a support ticket.",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"ticket_id":{"type":"string","maxLength":32}},"required":["ticket_id"]}`)}},
		Messages: []model.Message{
			{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "Ticket T-40127."}}},
			{Role: model.RoleAssistant, Content: []model.Part{
				{Type: model.PartText, Text: "Reading it."},
				{Type: model.PartToolUse, ToolUseID: "call_1", Name: "get_ticket", Input: json.RawMessage(`{"ticket_id":"T-40127"}`)},
				{Type: model.PartToolUse, ToolUseID: "call_2", Name: "get_ticket", Input: json.RawMessage(`{"ticket_id":"T-1"}`)},
			}},
			{Role: model.RoleUser, Content: []model.Part{
				{Type: model.PartToolResult, ToolUseID: "call_1", Text: `{"status":"open"}`},
				{Type: model.PartToolResult, ToolUseID: "call_2", Text: `not found`, IsError: true},
				{Type: model.PartText, Text: "Note from the platform: be brief."},
			}},
		},
		MaxTokens:   300,
		Temperature: &temp,
	}
}

func TestRequestWireFormat(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-from-env")
	t.Setenv("OPENAI_ORG_ID", "org-env")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	f := newFake(t, nil)
	if _, err := newProvider(t, f.url(), nil).Complete(t.Context(), dispute()); err != nil {
		t.Fatal(err)
	}
	s := f.seen()[0]
	if got := s.header.Get("Authorization"); got != "Bearer sk-test" {
		t.Errorf("Authorization %q, want the configured key", got)
	}
	if s.header.Get("OpenAI-Organization") != "" {
		t.Error("organization header taken from the environment")
	}
	r := s.req
	if r.Model != "gpt-6-mini" || r.MaxCompletionTokens == nil || *r.MaxCompletionTokens != 300 || r.MaxTokens != nil || r.Temperature == nil || *r.Temperature != 0 {
		t.Errorf("model %q max_completion_tokens %v max_tokens %v temperature %v", r.Model, r.MaxCompletionTokens, r.MaxTokens, r.Temperature)
	}
	if r.Stream {
		t.Error("non-streaming call asked for a stream")
	}
	got, _ := json.Marshal(r.Messages)
	want := `[{"content":"You are the card-dispute assistant of the bank.","role":"system"},` +
		`{"content":"Ticket T-40127.","role":"user"},` +
		`{"content":"Reading it.","role":"assistant","tool_calls":[` +
		`{"function":{"arguments":"{\"ticket_id\":\"T-40127\"}","name":"get_ticket"},"id":"call_1","type":"function"},` +
		`{"function":{"arguments":"{\"ticket_id\":\"T-1\"}","name":"get_ticket"},"id":"call_2","type":"function"}]},` +
		`{"content":"{\"status\":\"open\"}","role":"tool","tool_call_id":"call_1"},` +
		`{"content":"[tool error] not found","role":"tool","tool_call_id":"call_2"},` +
		`{"content":"Note from the platform: be brief.","role":"user"}]`
	if string(got) != want {
		t.Errorf("messages on the wire:\n%s\nwant\n%s", got, want)
	}
	tools, _ := json.Marshal(r.Tools)
	wantTools := `[{"function":{"description":"Read a support ticket.","name":"get_ticket","parameters":{"properties":{"ticket_id":{"maxLength":32,"type":"string"}},"required":["ticket_id"],"type":"object"}},"type":"function"}]`
	if string(tools) != wantTools {
		t.Errorf("tools on the wire:\n%s\nwant\n%s", tools, wantTools)
	}
}

func TestLegacyMaxTokensAndNoKey(t *testing.T) {
	f := newFake(t, nil)
	p := newProvider(t, f.url(), func(o *openai.Options) { o.LegacyMaxTokens = true; o.APIKey = "" })
	if _, err := p.Complete(t.Context(), dispute()); err != nil {
		t.Fatalf("server without a key refused: %v", err)
	}
	s := f.seen()[0]
	if s.req.MaxTokens == nil || *s.req.MaxTokens != 300 || s.req.MaxCompletionTokens != nil {
		t.Errorf("max_tokens %v max_completion_tokens %v", s.req.MaxTokens, s.req.MaxCompletionTokens)
	}
	if got := s.header.Get("Authorization"); strings.TrimSpace(strings.TrimPrefix(got, "Bearer")) != "" {
		t.Errorf("Authorization %q sent without a configured key", got)
	}
}

func TestResponses(t *testing.T) {
	call := map[string]any{"id": "call_9", "name": "get_ticket", "arguments": `{"ticket_id":"T-9"}`}
	for _, tc := range []struct {
		finish  string
		rep     reply
		want    string
		wantTxt string
	}{
		{"stop", reply{content: "Done."}, model.StopEndTurn, "Done."},
		{"length", reply{content: "Cut sh"}, model.StopMaxTokens, "Cut sh"},
		{"tool_calls", reply{content: "Checking.", calls: []map[string]any{call}}, model.StopToolUse, "Checking."},
		{"function_call", reply{calls: []map[string]any{call}}, model.StopToolUse, ""},
		{"content_filter", reply{content: "I can"}, model.StopRefusal, "I can"},
		{"stop", reply{refusal: "I can't help with that."}, model.StopRefusal, "I can't help with that."},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/%s/stream=%v", tc.finish, tc.rep.content+tc.rep.refusal, stream), func(t *testing.T) {
				rep := tc.rep
				rep.finish = tc.finish
				rep.cached = 40
				f := newFake(t, func(int, wireReq) reply { return rep })
				p := newProvider(t, f.url(), nil)
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
				if resp.StopReason != tc.want || resp.Text() != tc.wantTxt {
					t.Errorf("stop %q text %q, want %q %q", resp.StopReason, resp.Text(), tc.want, tc.wantTxt)
				}
				if stream && streamed.String() != tc.rep.content {
					t.Errorf("streamed %q", streamed.String())
				}
				if tc.rep.calls != nil {
					calls := resp.ToolCalls()
					if len(calls) != 1 || calls[0].ToolUseID != "call_9" || string(calls[0].Input) != `{"ticket_id":"T-9"}` {
						t.Errorf("tool calls %+v", calls)
					}
				}
				prompt := int64(len(f.seen()[0].raw) / 4)
				if resp.Usage != (model.Usage{InputTokens: prompt - 40, CacheReadTokens: 40, OutputTokens: 7}) {
					t.Errorf("usage %+v, want %d input of which 40 cached, 7 output", resp.Usage, prompt)
				}
			})
		}
	}
}

func TestMissingUsageIsEstimatedNotZero(t *testing.T) {
	for _, stream := range []bool{false, true} {
		f := newFake(t, func(int, wireReq) reply { return reply{finish: "stop", content: "ok", noUsage: true} })
		p := newProvider(t, f.url(), nil)
		var resp *model.Response
		var err error
		if stream {
			resp, err = p.CompleteStream(t.Context(), dispute(), func(model.Delta) {})
		} else {
			resp, err = p.Complete(t.Context(), dispute())
		}
		if err != nil {
			t.Fatal(err)
		}
		if resp.Usage.InputTokens != model.EstimateTokens(dispute()) || resp.Usage.OutputTokens != 1 {
			t.Errorf("stream=%v: usage %+v, want the estimate", stream, resp.Usage)
		}
	}
}

func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rep        reply
		stream     bool
		retryable  bool
		status     int
		retryAfter time.Duration
		contains   string
	}{
		{"400", reply{status: 400, errType: "invalid_request_error", errCode: "context_length_exceeded"}, false, false, 400, 0, "invalid_request_error/context_length_exceeded"},
		{"401", reply{status: 401, errType: "invalid_request_error", errCode: "invalid_api_key"}, false, false, 401, 0, "invalid_api_key"},
		{"404", reply{status: 404, errType: "invalid_request_error", errCode: "model_not_found"}, false, false, 404, 0, "model_not_found"},
		{"429 Retry-After", reply{status: 429, errType: "requests", errCode: "rate_limit_exceeded", header: map[string]string{"Retry-After": "4"}}, false, true, 429, 4 * time.Second, "rate_limit_exceeded"},
		{"429 retry-after-ms streaming", reply{status: 429, errType: "tokens", errCode: "rate_limit_exceeded", header: map[string]string{"Retry-After-Ms": "1500"}}, true, true, 429, 1500 * time.Millisecond, "rate_limit_exceeded"},
		{"500", reply{status: 500, errType: "server_error"}, false, true, 500, 0, "server_error"},
		{"503 overloaded", reply{status: 503, errType: "server_error", errCode: "overloaded"}, true, true, 503, 0, "overloaded"},
		{"error event", reply{finish: "stop", content: "partial", streamErr: "server_error"}, true, true, 0, 0, "error event"},
		{"stream cut cleanly", reply{finish: "stop", content: "a long answer here", cut: 2}, true, true, 0, 0, "finish_reason"},
		{"stream aborted", reply{finish: "stop", content: "a long answer here", cut: 2, abort: true}, true, true, 0, 0, ""},
		{"HTML 502", reply{status: 502, body: "<html>bad gateway</html>"}, false, true, 502, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, func(int, wireReq) reply { return tc.rep })
			p := newProvider(t, f.url(), nil)
			var err error
			if tc.stream {
				_, err = p.CompleteStream(t.Context(), dispute(), func(model.Delta) {})
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
			if !strings.Contains(err.Error(), tc.contains) || strings.Contains(err.Error(), "sk-test") {
				t.Errorf("error %q should contain %q and no key", err, tc.contains)
			}
			if n := len(f.seen()); n != 1 {
				t.Errorf("%d requests; want exactly one", n)
			}
		})
	}
}

func TestStreamingToolCallFragments(t *testing.T) {
	f := newFake(t, func(int, wireReq) reply {
		return reply{finish: "tool_calls", content: "Raising it.", calls: []map[string]any{
			{"id": "call_a", "name": "raise_dispute", "arguments": `{"txn_id":"t_771","amount_inr":12499}`},
			{"id": "call_b", "name": "draft_email", "arguments": `{"to":"c_88213"}`},
		}}
	})
	var deltas []string
	resp, err := newProvider(t, f.url(), nil).CompleteStream(t.Context(), dispute(), func(d model.Delta) { deltas = append(deltas, d.Text) })
	if err != nil {
		t.Fatal(err)
	}
	calls := resp.ToolCalls()
	if len(calls) != 2 || string(calls[0].Input) != `{"txn_id":"t_771","amount_inr":12499}` || calls[1].ToolUseID != "call_b" || string(calls[1].Input) != `{"to":"c_88213"}` {
		t.Errorf("calls %+v", calls)
	}
	if strings.Join(deltas, "") != "Raising it." || len(deltas) < 2 {
		t.Errorf("deltas %q", deltas)
	}
	s := f.seen()[0]
	if !s.req.Stream || s.req.StreamOptions["include_usage"] != true {
		t.Errorf("stream %v stream_options %v", s.req.Stream, s.req.StreamOptions)
	}
}

func TestForbidToolCallsKeepsTools(t *testing.T) {
	f := newFake(t, func(int, wireReq) reply {
		return reply{finish: "stop", content: "Budget reached; here is what I found."}
	})
	req := dispute()
	req.ForbidToolCalls = true
	if _, err := newProvider(t, f.url(), nil).Complete(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	s := f.seen()[0]
	var body map[string]any
	if err := json.Unmarshal(s.raw, &body); err != nil {
		t.Fatal(err)
	}
	if body["tool_choice"] != "none" || len(s.req.Tools) != 1 {
		t.Errorf("tool_choice %v with %d tools; want the tools kept and choice none", body["tool_choice"], len(s.req.Tools))
	}
}
