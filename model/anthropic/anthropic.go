// Package anthropic is a model.Provider for the Anthropic Messages API, built
// on the official Go SDK (github.com/anthropics/anthropic-sdk-go/v2). It
// translates a provider-neutral model.Request into one Messages call and the
// answer back, including tool use, stop reasons, usage with prompt-cache
// writes and reads, and streamed text. It makes exactly one HTTP request per
// call: the SDK's own retries are switched off, because retrying, backing off
// and failing over are the gateway's job.
//
// Prompt caching: the request is laid out as the API caches it (tool
// definitions, then the system prompt, then the conversation), and the
// provider places two cache breakpoints: one on the last block of that fixed
// prefix (the system prompt, or the last tool when there is none), so that
// every run of the same agent version reads the prefix from the cache even
// on its first call, and one on the last block of the conversation, so that
// each call reads everything the previous call wrote and pays only for what
// the step added.
//
// No SDK type appears in this package's API.
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	sdk "github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"
	"github.com/anthropics/anthropic-sdk-go/v2/packages/param"

	"github.com/agentplane/agentplane/model"
)

// DefaultBaseURL is the Anthropic API.
const DefaultBaseURL = "https://api.anthropic.com"

// DefaultMaxTokens is the output limit sent when a request sets none: the
// Messages API requires one.
const DefaultMaxTokens = 4096

// Cache lifetimes a breakpoint may ask for.
const (
	CacheTTL5m = "5m"
	CacheTTL1h = "1h"
)

// Options configures New.
type Options struct {
	// APIKey authenticates every request. Empty sends no credential (the
	// API will answer 401); the environment is never consulted.
	APIKey string
	// BaseURL is the API's base URL (default DefaultBaseURL); a proxy or a
	// test server may stand in.
	BaseURL string
	// HTTPClient sends the requests; nil means a client of the default
	// transport. Timeouts belong to the caller's context (the gateway
	// bounds each attempt), not to the client.
	HTTPClient *http.Client
	// DisableCache sends no cache breakpoints.
	DisableCache bool
	// CacheTTL is the breakpoints' lifetime: CacheTTL5m (the default) or
	// CacheTTL1h, which costs more to write and survives a longer pause,
	// such as a wait for an approval.
	CacheTTL string
	// DefaultMaxTokens replaces DefaultMaxTokens.
	DefaultMaxTokens int
	// Now reads the clock for Retry-After dates; nil means time.Now.
	Now func() time.Time
}

// Provider calls the Messages API. It is safe for concurrent use.
type Provider struct {
	msgs      sdk.MessageService
	cache     bool
	ttl       sdk.CacheControlEphemeralTTL
	maxTokens int64
	now       func() time.Time
}

var _ model.StreamingProvider = (*Provider)(nil)

// New checks o and builds a Provider.
func New(o Options) (*Provider, error) {
	if o.BaseURL == "" {
		o.BaseURL = DefaultBaseURL
	}
	if !strings.HasPrefix(o.BaseURL, "http://") && !strings.HasPrefix(o.BaseURL, "https://") {
		return nil, fmt.Errorf("anthropic: base URL %q must start with http:// or https://", o.BaseURL)
	}
	if o.DefaultMaxTokens < 0 {
		return nil, fmt.Errorf("anthropic: default max tokens %d is negative", o.DefaultMaxTokens)
	}
	if o.DefaultMaxTokens == 0 {
		o.DefaultMaxTokens = DefaultMaxTokens
	}
	p := &Provider{cache: !o.DisableCache, maxTokens: int64(o.DefaultMaxTokens), now: o.Now}
	switch o.CacheTTL {
	case "", CacheTTL5m:
		p.ttl = sdk.CacheControlEphemeralTTLTTL5m
	case CacheTTL1h:
		p.ttl = sdk.CacheControlEphemeralTTLTTL1h
	default:
		return nil, fmt.Errorf("anthropic: cache TTL %q: want %q or %q", o.CacheTTL, CacheTTL5m, CacheTTL1h)
	}
	if p.now == nil {
		p.now = time.Now
	}
	hc := o.HTTPClient
	if hc == nil {
		hc = &http.Client{Transport: http.DefaultTransport}
	}
	opts := []option.RequestOption{
		// The platform resolves credentials and endpoints itself: nothing
		// comes from ANTHROPIC_* variables or profile files.
		option.WithoutEnvironmentDefaults(),
		option.WithBaseURL(o.BaseURL),
		option.WithHTTPClient(hc),
		option.WithMaxRetries(0),
		// The gateway's context bounds each attempt; this only keeps the
		// SDK from refusing long non-streaming calls on its own estimate.
		option.WithRequestTimeout(time.Hour),
	}
	if o.APIKey != "" {
		opts = append(opts, option.WithAPIKey(o.APIKey))
	}
	p.msgs = sdk.NewMessageService(opts...)
	return p, nil
}

// Complete makes one Messages call.
func (p *Provider) Complete(ctx context.Context, req *model.Request) (*model.Response, error) {
	params, opts, err := p.params(req)
	if err != nil {
		return nil, err
	}
	msg, err := p.msgs.New(ctx, params, opts...)
	if err != nil {
		return nil, p.classify(ctx, err)
	}
	return convertResponse(msg), nil
}

// CompleteStream makes one streaming Messages call, delivering text deltas
// as they arrive. A stream that ends without message_stop, or that carries
// an error event, fails; an overloaded or rate-limit error event is
// retryable, as is a dropped connection.
func (p *Provider) CompleteStream(ctx context.Context, req *model.Request, onDelta func(model.Delta)) (*model.Response, error) {
	params, opts, err := p.params(req)
	if err != nil {
		return nil, err
	}
	stream := p.msgs.NewStreaming(ctx, params, opts...)
	defer stream.Close()
	var msg sdk.Message
	stopped := false
	for stream.Next() {
		ev := stream.Current()
		if err := msg.Accumulate(ev); err != nil {
			return nil, &model.Error{Err: fmt.Errorf("anthropic: malformed stream: %v", err)}
		}
		switch ev.Type {
		case "content_block_delta":
			if ev.Delta.Type == "text_delta" && ev.Delta.Text != "" {
				onDelta(model.Delta{Text: ev.Delta.Text})
			}
		case "message_stop":
			stopped = true
		}
	}
	if err := stream.Err(); err != nil {
		return nil, p.classify(ctx, err)
	}
	if !stopped {
		if ctx.Err() != nil {
			return nil, fmt.Errorf("anthropic: %w", ctx.Err())
		}
		return nil, &model.Error{Retryable: true, Err: errors.New("anthropic: stream ended before message_stop (connection dropped?)")}
	}
	return convertResponse(&msg), nil
}

// params translates req into the SDK's request.
func (p *Provider) params(req *model.Request) (sdk.MessageNewParams, []option.RequestOption, error) {
	fail := func(format string, args ...any) (sdk.MessageNewParams, []option.RequestOption, error) {
		return sdk.MessageNewParams{}, nil, &model.Error{Err: fmt.Errorf("anthropic: "+format, args...)}
	}
	if req == nil {
		return fail("nil request")
	}
	if req.Model == "" {
		return fail("request names no model")
	}
	params := sdk.MessageNewParams{
		Model:     sdk.Model(req.Model),
		MaxTokens: p.maxTokens,
	}
	if req.MaxTokens > 0 {
		params.MaxTokens = int64(req.MaxTokens)
	}
	for _, t := range req.Tools {
		tp := sdk.ToolParam{
			Name: t.Name,
			// The schema goes on the wire as given, not re-modelled, so its
			// bytes stay those the agent version pinned.
			InputSchema: param.Override[sdk.ToolInputSchemaParam](schemaOrEmpty(t.InputSchema)),
		}
		if t.Description != "" {
			tp.Description = sdk.String(t.Description)
		}
		params.Tools = append(params.Tools, sdk.ToolUnionParam{OfTool: &tp})
	}
	if req.ForbidToolCalls && len(params.Tools) > 0 {
		params.ToolChoice = sdk.ToolChoiceUnionParam{OfNone: &sdk.ToolChoiceNoneParam{}}
	}
	if req.System != "" {
		params.System = []sdk.TextBlockParam{{Text: req.System}}
	}
	var last sdk.ContentBlockParamUnion // the conversation's last block
	for i, m := range req.Messages {
		var blocks []sdk.ContentBlockParamUnion
		for j, part := range m.Content {
			b, ok, err := block(m.Role, part)
			if err != nil {
				return fail("messages[%d].content[%d]: %v", i, j, err)
			}
			if ok {
				blocks = append(blocks, b)
			}
		}
		if len(blocks) == 0 {
			return fail("messages[%d] (%s) has no content the API accepts (empty text is refused)", i, m.Role)
		}
		last = blocks[len(blocks)-1]
		switch m.Role {
		case model.RoleUser:
			params.Messages = append(params.Messages, sdk.NewUserMessage(blocks...))
		case model.RoleAssistant:
			params.Messages = append(params.Messages, sdk.NewAssistantMessage(blocks...))
		default:
			return fail("messages[%d]: unknown role %q", i, m.Role)
		}
	}
	if p.cache {
		p.breakpoints(&params, last, req.CachedTools)
	}
	var opts []option.RequestOption
	if req.Temperature != nil {
		opts = append(opts, option.WithJSONSet("temperature", *req.Temperature))
	}
	return params, opts, nil
}

// breakpoints marks the end of the fixed prefix and the end of the
// conversation (last, whose variant is shared with params) for caching.
// With cachedTools (a run with tool search), the end of the tools the run
// started with is marked too: tools a search adds come after them and
// before the system prompt on the wire, so that part of the prefix is
// read from the cache whatever was loaded.
func (p *Provider) breakpoints(params *sdk.MessageNewParams, last sdk.ContentBlockParamUnion, cachedTools int) {
	cc := sdk.CacheControlEphemeralParam{TTL: p.ttl}
	if cachedTools > 0 && cachedTools <= len(params.Tools) && len(params.System) > 0 {
		if c := params.Tools[cachedTools-1].GetCacheControl(); c != nil {
			*c = cc
		}
	}
	switch {
	case len(params.System) > 0:
		params.System[len(params.System)-1].CacheControl = cc
	case len(params.Tools) > 0:
		if c := params.Tools[len(params.Tools)-1].GetCacheControl(); c != nil {
			*c = cc
		}
	}
	if c := last.GetCacheControl(); c != nil {
		*c = cc
	}
}

// block translates one part; ok is false for a part that is left out (an
// empty text, which the API refuses).
func block(role string, part model.Part) (sdk.ContentBlockParamUnion, bool, error) {
	switch part.Type {
	case model.PartText:
		if part.Text == "" {
			return sdk.ContentBlockParamUnion{}, false, nil
		}
		return sdk.NewTextBlock(part.Text), true, nil
	case model.PartToolUse:
		if role != model.RoleAssistant {
			return sdk.ContentBlockParamUnion{}, false, errors.New("a tool_use part belongs to an assistant message")
		}
		return sdk.NewToolUseBlock(part.ToolUseID, schemaOrEmpty(part.Input), part.Name), true, nil
	case model.PartToolResult:
		if role != model.RoleUser {
			return sdk.ContentBlockParamUnion{}, false, errors.New("a tool_result part belongs to a user message")
		}
		tr := sdk.ToolResultBlockParam{ToolUseID: part.ToolUseID}
		if part.Text != "" {
			tr.Content = []sdk.ToolResultBlockParamContentUnion{{OfText: &sdk.TextBlockParam{Text: part.Text}}}
		}
		if part.IsError {
			tr.IsError = sdk.Bool(true)
		}
		return sdk.ContentBlockParamUnion{OfToolResult: &tr}, true, nil
	}
	return sdk.ContentBlockParamUnion{}, false, fmt.Errorf("unknown part type %q", part.Type)
}

func schemaOrEmpty(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`{}`)
	}
	return raw
}

// convertResponse translates the API's answer. Thinking blocks are dropped
// (the provider never asks for them); any other block type is passed on
// under its own type, so that model.ValidateResponse refuses it loudly
// rather than the provider hiding it.
func convertResponse(msg *sdk.Message) *model.Response {
	r := &model.Response{
		Model:      string(msg.Model),
		StopReason: stopReason(msg.StopReason),
		Usage: model.Usage{
			InputTokens:         msg.Usage.InputTokens,
			OutputTokens:        msg.Usage.OutputTokens,
			CacheCreationTokens: msg.Usage.CacheCreationInputTokens,
			CacheReadTokens:     msg.Usage.CacheReadInputTokens,
		},
	}
	for _, b := range msg.Content {
		switch b.Type {
		case "text":
			r.Content = append(r.Content, model.Part{Type: model.PartText, Text: b.Text})
		case "tool_use":
			input := b.Input
			if len(input) == 0 {
				input = json.RawMessage(`{}`)
			}
			r.Content = append(r.Content, model.Part{Type: model.PartToolUse, ToolUseID: b.ID, Name: b.Name, Input: append(json.RawMessage(nil), input...)})
		case "thinking", "redacted_thinking":
		default:
			r.Content = append(r.Content, model.Part{Type: "anthropic:" + b.Type})
		}
	}
	return r
}

// stopReason normalises the API's stop reasons: stop_sequence is a normal
// end of turn; pause_turn and model_context_window_exceeded are answers cut
// short, like max_tokens.
func stopReason(s sdk.StopReason) string {
	switch s {
	case sdk.StopReasonToolUse:
		return model.StopToolUse
	case sdk.StopReasonMaxTokens, sdk.StopReasonPauseTurn, sdk.StopReasonModelContextWindowExceeded:
		return model.StopMaxTokens
	case sdk.StopReasonRefusal:
		return model.StopRefusal
	}
	return model.StopEndTurn
}

// Error types the API names in error bodies that mean "try again later",
// whatever the HTTP status (an error event inside a 200 stream has none).
var retryableTypes = map[string]bool{
	"overloaded_error": true,
	"rate_limit_error": true,
	"api_error":        true,
	"timeout_error":    true,
}

// classify turns an SDK or transport error into a classified *model.Error,
// or into the caller's context error when the context ended. The SDK's error
// is not wrapped: it holds the HTTP request, headers included.
func (p *Provider) classify(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("anthropic: %w", cerr)
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		typ := string(apiErr.Type())
		if typ == "" {
			typ = "error"
		}
		e := &model.Error{
			StatusCode: apiErr.StatusCode,
			Retryable:  model.RetryableStatus(apiErr.StatusCode) || retryableTypes[typ],
			Err:        fmt.Errorf("anthropic: %s: %s", typ, clip(apiErr.Message)),
		}
		if apiErr.StatusCode == http.StatusOK {
			e.StatusCode = 0 // an error event inside a stream
		}
		if apiErr.Response != nil {
			e.RetryAfter = model.RetryAfter(apiErr.Response.Header, p.now())
		}
		return e
	}
	// No HTTP answer, or a body cut short: refused or reset connections,
	// TLS failures, unexpected EOF. The same request may well succeed.
	return &model.Error{Retryable: true, Err: fmt.Errorf("anthropic: %v", err)}
}

func clip(s string) string {
	const max = 512
	if len(s) > max {
		return s[:max] + "..."
	}
	return s
}
