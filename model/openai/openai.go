// Package openai is a model.Provider for the OpenAI Chat Completions API,
// built on the official Go SDK (github.com/openai/openai-go/v3). Chat
// Completions is also what OpenAI-compatible servers speak (vLLM, Ollama,
// llama.cpp's server, most gateways), so the same provider serves them
// through Options.BaseURL. It makes exactly one HTTP request per call: the
// SDK's own retries are switched off, because retrying, backing off and
// failing over are the gateway's job.
//
// Mapping: the system prompt becomes the first ("system") message; an
// assistant turn's text and tool calls become one assistant message; a user
// turn's tool results become "tool" messages (which must directly follow
// the assistant message that made the calls) and its text a user message
// after them. A failed tool result is prefixed "[tool error] ", since the
// API has no error flag. Usage maps prompt tokens served from OpenAI's
// automatic prompt cache (prompt_tokens_details.cached_tokens) to cache
// reads and the rest to input; there are no separately billed cache writes.
//
// No SDK type appears in this package's API.
package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentplane/agentplane/model"
)

// DefaultBaseURL is the OpenAI API.
const DefaultBaseURL = "https://api.openai.com/v1"

// ToolErrorPrefix starts the content of a tool message whose result failed.
const ToolErrorPrefix = "[tool error] "

// Options configures New.
type Options struct {
	// APIKey is sent as a bearer token; empty sends none (local servers
	// such as Ollama need none). The environment is never consulted.
	APIKey string
	// BaseURL is the API's base URL including its version path (default
	// DefaultBaseURL; for vLLM say http://localhost:8000/v1).
	BaseURL string
	// HTTPClient sends the requests; nil means a client of the default
	// transport. Timeouts belong to the caller's context.
	HTTPClient *http.Client
	// LegacyMaxTokens sends the output limit as max_tokens, for servers
	// that do not know max_completion_tokens.
	LegacyMaxTokens bool
	// Now reads the clock for Retry-After dates; nil means time.Now.
	Now func() time.Time
}

// Provider calls Chat Completions. It is safe for concurrent use.
type Provider struct {
	chat   sdk.ChatCompletionService
	legacy bool
	now    func() time.Time
}

var _ model.StreamingProvider = (*Provider)(nil)

// New checks o and builds a Provider.
func New(o Options) (*Provider, error) {
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	if !strings.HasPrefix(o.BaseURL, "http://") && !strings.HasPrefix(o.BaseURL, "https://") {
		return nil, fmt.Errorf("openai: base URL %q must start with http:// or https://", o.BaseURL)
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport}
	}
	p := &Provider{legacy: o.LegacyMaxTokens, now: o.Now}
	if p.now == nil {
		p.now = time.Now
	}
	// The service is built without the SDK client's defaults, so no
	// OPENAI_* variable (key, base URL, organization, custom headers)
	// reaches a request: the platform configures every provider itself.
	p.chat = sdk.NewChatCompletionService(
		option.WithBaseURL(o.BaseURL),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		option.WithAPIKey(o.APIKey),
	)
	return p, nil
}

// Complete makes one Chat Completions call.
func (p *Provider) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return nil, err
	}
	cc, err := p.chat.New(ctx, params)
	if err != nil {
		return nil, p.classify(ctx, err)
	}
	if len(cc.Choices) == 0 {
		return nil, &model.Error{Err: errors.New("openai: response has no choices")}
	}
	ch := cc.Choices[0]
	acc := &accumulator{text: ch.Message.Content, refusal: ch.Message.Refusal, finish: ch.FinishReason, model: cc.Model}
	for _, tc := range ch.Message.ToolCalls {
		acc.calls = append(acc.calls, &toolCall{id: tc.ID, kind: tc.Type, name: tc.Function.Name, args: tc.Function.Arguments})
	}
	if cc.JSON.Usage.Valid() && cc.Usage.JSON.PromptTokens.Valid() {
		acc.usage(cc.Usage)
	}
	return acc.response(req)
}

// CompleteStream makes one streaming call, asking for usage in the final
// chunk and delivering text as it arrives. A stream that ends before a
// finish_reason arrives fails with a retryable error.
func (p *Provider) CompleteStream(ctx context.Context, req *model.Request, onDelta func(model.Delta)) (*model.Response, error) {
	params, err := p.params(req)
	if err != nil {
		return nil, err
	}
	params.StreamOptions.IncludeUsage = sdk.Bool(true)
	stream := p.chat.NewStreaming(ctx, params)
	defer stream.Close()
	acc := &accumulator{}
	for stream.Next() {
		chunk := stream.Current()
		if chunk.Model != "" {
			acc.model = chunk.Model
		}
		if chunk.JSON.Usage.Valid() && chunk.Usage.JSON.PromptTokens.Valid() {
			acc.usage(chunk.Usage)
		}
		for _, ch := range chunk.Choices {
			if ch.Index != 0 {
				continue
			}
			d := ch.Delta
			if d.Content != "" {
				acc.text += d.Content
				onDelta(model.Delta{Text: d.Content})
			}
			acc.refusal += d.Refusal
			for _, tc := range d.ToolCalls {
				acc.toolDelta(tc.Index, tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments)
			}
			if ch.FinishReason != "" {
				acc.finish = ch.FinishReason
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	if acc.finish == "" {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("openai: %w", ctx.Err())
		}
		return nil, &model.Error{Retryable: true, Err: errors.New("openai: stream ended before a finish_reason (connection dropped?)")}
	}
	return acc.response(req)
}

// params translates req into the SDK's request.
func (p *Provider) params(req *model.Request) (sdk.ChatCompletionNewParams, error) {
	fail := func(format string, args ...any) (sdk.ChatCompletionNewParams, error) {
		return sdk.ChatCompletionNewParams{}, &model.Error{Err: fmt.Errorf("openai: "+format, args...)}
	}
	if req == nil {
		return fail("nil request")
	}
	if req.Model == "" {
		return fail("request names no model")
	}
	params := sdk.ChatCompletionNewParams{Model: shared.ChatModel(req.Model)}
	if req.MaxTokens > 0 {
		if p.legacy {
			params.MaxTokens = sdk.Int(int64(req.MaxTokens))
		} else {
			params.MaxCompletionTokens = sdk.Int(int64(req.MaxTokens))
		}
	}
	if req.Temperature != nil {
		params.Temperature = sdk.Float(*req.Temperature)
	}
	for _, t := range req.Tools {
		schema, err := decodeObject(t.InputSchema)
		if err != nil {
			return fail("tool %s: input schema: %v", t.Name, err)
		}
		fn := shared.FunctionDefinitionParam{Name: t.Name, Parameters: shared.FunctionParameters(schema)}
		if t.Description != "" {
			fn.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ChatCompletionFunctionTool(fn))
	}
	if req.ForbidToolCalls && len(params.Tools) > 0 {
		params.ToolChoice.OfAuto = sdk.String("none")
	}
	if req.System != "" {
		params.Messages = append(params.Messages, sdk.SystemMessage(req.System))
	}
	for i, m := range req.Messages {
		switch m.Role {
		case model.RoleAssistant:
			var text []string
			var calls []sdk.ChatCompletionMessageToolCallUnionParam
			for j, part := range m.Content {
				switch part.Type {
				case model.PartText:
					if part.Text != "" {
						text = append(text, part.Text)
					}
				case model.PartToolUse:
					args := string(part.Input)
					if args == "" {
						args = "{}"
					}
					calls = append(calls, sdk.ChatCompletionMessageToolCallUnionParam{OfFunction: &sdk.ChatCompletionMessageFunctionToolCallParam{
						ID: part.ToolUseID, Function: sdk.ChatCompletionMessageFunctionToolCallFunctionParam{Name: part.Name, Arguments: args},
					}})
				default:
					return fail("messages[%d].content[%d]: %q part in an assistant message", i, j, part.Type)
				}
			}
			am := sdk.ChatCompletionAssistantMessageParam{ToolCalls: calls}
			if len(text) > 0 {
				am.Content.OfString = sdk.String(strings.Join(text, "\n\n"))
			}
			params.Messages = append(params.Messages, sdk.ChatCompletionMessageParamUnion{OfAssistant: &am})
		case model.RoleUser:
			var text []string
			for j, part := range m.Content {
				switch part.Type {
				case model.PartToolResult:
					content := part.Text
					if part.IsError {
						content = ToolErrorPrefix + content
					}
					params.Messages = append(params.Messages, sdk.ToolMessage(content, part.ToolUseID))
				case model.PartText:
					if part.Text != "" {
						text = append(text, part.Text)
					}
				default:
					return fail("messages[%d].content[%d]: %q part in a user message", i, j, part.Type)
				}
			}
			if len(text) > 0 {
				params.Messages = append(params.Messages, sdk.UserMessage(strings.Join(text, "\n\n")))
			}
		default:
			return fail("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	return params, nil
}

// decodeObject splits a JSON schema into its top-level members, each kept
// as raw JSON so that nothing inside (numbers, key order) is re-modelled.
func decodeObject(raw json.RawMessage) (map[string]any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return map[string]any{"type": "object"}, nil
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, err
	}
	if members == nil {
		return nil, errors.New("is not a JSON object")
	}
	m := make(map[string]any, len(members))
	for k, v := range members {
		m[k] = v
	}
	return m, nil
}

type toolCall struct {
	id, kind, name, args string
}

// accumulator gathers an answer, whole or streamed.
type accumulator struct {
	model         string
	text, refusal string
	finish        string
	calls         []*toolCall
	byIndex       map[int64]*toolCall
	u             model.Usage
	hasUsage      bool
}

func (a *accumulator) toolDelta(index int64, id, kind, name, args string) {
	if a.byIndex == nil {
		a.byIndex = map[int64]*toolCall{}
	}
	tc, ok := a.byIndex[index]
	if !ok {
		tc = &toolCall{}
		a.byIndex[index] = tc
		a.calls = append(a.calls, tc)
	}
	if id != "" {
		tc.id = id
	}
	if kind != "" {
		tc.kind = kind
	}
	if name != "" {
		tc.name = name
	}
	tc.args += args
}

func (a *accumulator) usage(u sdk.CompletionUsage) {
	cached := min(max(u.PromptTokensDetails.CachedTokens, 0), u.PromptTokens)
	a.u = model.Usage{InputTokens: u.PromptTokens - cached, CacheReadTokens: cached, OutputTokens: u.CompletionTokens}
	a.hasUsage = true
}

// response builds the neutral answer. A server that reports no usage is
// charged the gateway's estimate rather than nothing: an unknown count is
// not zero.
func (a *accumulator) response(req *model.Request) (*model.Response, error) {
	r := &model.Response{Model: a.model, StopReason: finishReason(a.finish), Usage: a.u}
	if a.text != "" {
		r.Content = append(r.Content, model.Part{Type: model.PartText, Text: a.text})
	}
	if a.refusal != "" {
		r.Content = append(r.Content, model.Part{Type: model.PartText, Text: a.refusal})
		if len(a.calls) == 0 {
			r.StopReason = model.StopRefusal
		}
	}
	for _, tc := range a.calls {
		if tc.kind != "" && tc.kind != "function" {
			r.Content = append(r.Content, model.Part{Type: "openai:" + tc.kind})
			continue
		}
		args := strings.TrimSpace(tc.args)
		if args == "" {
			args = "{}"
		}
		r.Content = append(r.Content, model.Part{Type: model.PartToolUse, ToolUseID: tc.id, Name: tc.name, Input: json.RawMessage(args)})
	}
	if !a.hasUsage {
		r.Usage = model.Usage{InputTokens: model.EstimateTokens(req), OutputTokens: model.EstimateContentTokens(r.Content)}
	}
	return r, nil
}

// finishReason normalises finish reasons: length is max_tokens,
// content_filter a refusal, tool_calls (and the legacy function_call) tool
// use, and stop (or anything else) the end of the turn.
func finishReason(s string) string {
	switch s {
	case "tool_calls", "function_call":
		return model.StopToolUse
	case "length":
		return model.StopMaxTokens
	case "content_filter":
		return model.StopRefusal
	}
	return model.StopEndTurn
}

// classify turns an SDK or transport error into a classified *model.Error,
// or the caller's context error. The SDK's error is not wrapped: it holds
// the HTTP request, headers included.
func (p *Provider) classify(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("openai: %w", cerr)
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		kind := apiErr.Type
		if apiErr.Code != "" {
			kind += "/" + apiErr.Code
		}
		if kind == "" {
			kind = "error"
		}
		e := &model.Error{
			StatusCode: apiErr.StatusCode,
			Retryable:  model.RetryableStatus(apiErr.StatusCode),
			Err:        fmt.Errorf("openai: %s: %s", kind, clip(apiErr.Message)),
		}
		if apiErr.Response != nil {
			e.RetryAfter = model.RetryAfter(apiErr.Response.Header, p.now())
		}
		return e
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		// An error event inside a 200 stream: retryable unless the server
		// says the request itself is at fault.
		var body struct {
			Error struct {
				Type    string `json:"type"`
				Code    any    `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		_ = json.Unmarshal(se.Event.Data, &body)
		return &model.Error{
			Retryable: body.Error.Type != "invalid_request_error",
			Err:       fmt.Errorf("openai: error event in stream: %s: %s", body.Error.Type, clip(body.Error.Message)),
		}
	}
	return &model.Error{Retryable: true, Err: fmt.Errorf("openai: %v", err)}
}

func clip(s string) string {
	const max = 512
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
