// Package model defines the provider-neutral shapes of a model call (messages,
// tool definitions, responses, token usage), the Provider interface that makes
// exactly one call, prices in integer micro-units, and the Gateway that applies
// policy (pricing, attribution, budgets) on top of providers.
package model

import (
	"context"
	"encoding/json"
)

// Roles of a message.
const (
	RoleUser      = "user"
	RoleAssistant = "assistant"
)

// Part types.
const (
	PartText       = "text"
	PartToolUse    = "tool_use"
	PartToolResult = "tool_result"
)

// Stop reasons, normalised across providers.
const (
	StopEndTurn   = "end_turn"
	StopToolUse   = "tool_use"
	StopMaxTokens = "max_tokens"
	StopRefusal   = "refusal"
)

// Part is one piece of a message's content.
type Part struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
	// ToolUseID links a tool_use part to its tool_result part.
	ToolUseID string `json:"id,omitempty"`
	// Name is the tool name of a tool_use part.
	Name string `json:"name,omitempty"`
	// Input is the JSON arguments of a tool_use part.
	Input json.RawMessage `json:"input,omitempty"`
	// IsError marks a tool_result the model should treat as a failure.
	IsError bool `json:"is_error,omitempty"`
}

// Message is one turn of a conversation.
type Message struct {
	Role    string `json:"role"`
	Content []Part `json:"content"`
}

// ToolDef describes a tool to the model.
type ToolDef struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// Request is one model call. Providers must not modify it.
type Request struct {
	// Model is the provider's model id (resolved from an alias by the gateway).
	Model    string    `json:"model"`
	System   string    `json:"system,omitempty"`
	Messages []Message `json:"messages"`
	// Tools may be empty: the final call at a budget limit offers none.
	Tools []ToolDef `json:"tools,omitempty"`
	// ForbidToolCalls keeps Tools in the request but tells the model it may
	// not call any (tool_choice "none"). A final call made this way keeps
	// the cached prefix, which starts with the tool definitions; dropping
	// Tools instead makes that call a cache miss on the whole prompt.
	ForbidToolCalls bool `json:"forbid_tool_calls,omitempty"`
	// CachedTools, when above zero, says that only the first CachedTools
	// of Tools are fixed for the run (a run with tool search): the rest
	// were added during it, after them, in a fixed order. A provider that
	// marks cache breakpoints marks the end of those too. Zero: every tool
	// is part of the fixed prefix.
	CachedTools int      `json:"cached_tools,omitempty"`
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
}

// Usage counts the tokens of one call as the provider reported them.
type Usage struct {
	InputTokens         int64 `json:"input_tokens"`
	OutputTokens        int64 `json:"output_tokens"`
	CacheCreationTokens int64 `json:"cache_creation_tokens,omitempty"`
	CacheReadTokens     int64 `json:"cache_read_tokens,omitempty"`
}

// TotalInput is every input token of the call, cached or not.
func (u Usage) TotalInput() int64 {
	return u.InputTokens + u.CacheCreationTokens + u.CacheReadTokens
}

// Response is what a provider answered.
type Response struct {
	Model      string `json:"model,omitempty"`
	Content    []Part `json:"content"`
	StopReason string `json:"stop_reason"`
	Usage      Usage  `json:"usage"`
}

// Text concatenates the response's text parts.
func (r *Response) Text() string {
	var s string
	for _, p := range r.Content {
		if p.Type == PartText {
			s += p.Text
		}
	}
	return s
}

// ToolCalls returns the response's tool_use parts in order.
func (r *Response) ToolCalls() []Part {
	var out []Part
	for _, p := range r.Content {
		if p.Type == PartToolUse {
			out = append(out, p)
		}
	}
	return out
}

// Provider makes exactly one model call and does not interpret it: no retries,
// no budgets, no pricing. Implementations must be safe for concurrent use.
type Provider interface {
	Complete(ctx context.Context, req *Request) (*Response, error)
}

// ProviderFunc adapts a function to a Provider, as http.HandlerFunc does for
// handlers: handy for fakes that inject errors or inspect requests.
type ProviderFunc func(ctx context.Context, req *Request) (*Response, error)

// Complete calls f(ctx, req).
func (f ProviderFunc) Complete(ctx context.Context, req *Request) (*Response, error) {
	return f(ctx, req)
}

// Delta is a piece of a response delivered while the call is in progress.
type Delta struct {
	// Text is model text to append to what this call has streamed so far.
	Text string `json:"text,omitempty"`
	// Reset says that the text streamed so far for this call is void: the
	// attempt that produced it failed and the gateway is trying again (or
	// failing over), so a viewer should discard it. Providers never send a
	// Reset; only the gateway does.
	Reset bool `json:"reset,omitempty"`
}

// StreamingProvider is implemented by providers that can deliver text as it
// is generated. The gateway finds it by type assertion; a provider without it
// is called through Complete and its whole text is delivered as one Delta.
type StreamingProvider interface {
	Provider
	// CompleteStream makes exactly one call, like Complete, and calls onDelta
	// with each piece of model text as it arrives, in order, on the calling
	// goroutine. It returns the whole answer, as Complete would. A stream
	// that ends before the provider's end-of-message marker is an error
	// (retryable, like a dropped connection), never a short answer. onDelta
	// must not block for long and must not retain the Delta's memory beyond
	// the call.
	CompleteStream(ctx context.Context, req *Request, onDelta func(Delta)) (*Response, error)
}
