package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// Bounds ValidateResponse enforces on a model's answer.
const (
	// MaxResponseTextBytes bounds the total size of a response's text parts.
	MaxResponseTextBytes = 1 << 20
	// MaxToolInputBytes bounds the JSON input of one tool call.
	MaxToolInputBytes = 1 << 20
	// MaxToolCalls bounds the tool calls in one response.
	MaxToolCalls = 128
	// MaxResponseParts bounds the parts of one response.
	MaxResponseParts = 1024
	// MaxToolUseIDBytes bounds the length of a tool_use id.
	MaxToolUseIDBytes = 256
	// MaxToolInputDepth bounds how deeply a tool input's JSON may nest.
	MaxToolInputDepth = 64
	// maxModelBytes bounds the model name a provider echoes back.
	maxModelBytes = 256
)

// ValidToolName reports whether name matches ^[a-zA-Z0-9_-]{1,64}$, the
// tool-name rule every supported provider accepts.
func ValidToolName(name string) bool {
	if len(name) == 0 || len(name) > 64 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ValidateResponse checks a provider's answer before anything acts on it.
// Model output is hostile input: it may have been steered by injected text,
// and a provider adapter may pass through whatever the vendor sent. It
// requires that
//
//   - every part is text or tool_use (a tool_result or unknown type is refused);
//   - a text part carries only text, valid UTF-8, and all text together is
//     at most MaxResponseTextBytes;
//   - a tool_use part has a name matching ^[a-zA-Z0-9_-]{1,64}$, an id that is
//     non-empty, printable ASCII, at most MaxToolUseIDBytes and unique in the
//     response, and an Input that is one JSON object in valid UTF-8, at most
//     MaxToolInputBytes, nested at most MaxToolInputDepth deep and free of
//     duplicate keys (which different parsers resolve differently, so a
//     policy check and a tool could otherwise see different arguments);
//   - there are at most MaxToolCalls tool calls and MaxResponseParts parts;
//   - no usage count is negative.
//
// When r is valid, ValidateResponse normalises r.StopReason in place:
// tool_use if and only if there are tool calls; otherwise max_tokens and
// refusal are kept and anything else becomes end_turn. An invalid r is left
// unchanged. Errors wrap ErrInvalidResponse.
func ValidateResponse(r *Response) error {
	if r == nil {
		return fmt.Errorf("%w: no response", ErrInvalidResponse)
	}
	if len(r.Content) > MaxResponseParts {
		return fmt.Errorf("%w: %d parts, more than %d", ErrInvalidResponse, len(r.Content), MaxResponseParts)
	}
	if len(r.Model) > maxModelBytes || !utf8.ValidString(r.Model) {
		return fmt.Errorf("%w: model name is not a short UTF-8 string", ErrInvalidResponse)
	}
	var textBytes, calls int
	ids := make(map[string]int)
	for i, p := range r.Content {
		switch p.Type {
		case PartText:
			if p.Name != "" || p.ToolUseID != "" || len(p.Input) != 0 || p.IsError {
				return fmt.Errorf("%w: content[%d]: text part carries tool fields", ErrInvalidResponse, i)
			}
			textBytes += len(p.Text)
			if textBytes > MaxResponseTextBytes {
				return fmt.Errorf("%w: text exceeds %d bytes", ErrInvalidResponse, MaxResponseTextBytes)
			}
			if !utf8.ValidString(p.Text) {
				return fmt.Errorf("%w: content[%d]: text is not valid UTF-8", ErrInvalidResponse, i)
			}
		case PartToolUse:
			calls++
			if calls > MaxToolCalls {
				return fmt.Errorf("%w: more than %d tool calls", ErrInvalidResponse, MaxToolCalls)
			}
			if p.Text != "" || p.IsError {
				return fmt.Errorf("%w: content[%d]: tool_use part carries text or is_error", ErrInvalidResponse, i)
			}
			if !ValidToolName(p.Name) {
				return fmt.Errorf("%w: content[%d]: tool name %q does not match ^[a-zA-Z0-9_-]{1,64}$", ErrInvalidResponse, i, clip(p.Name))
			}
			if err := checkToolUseID(p.ToolUseID); err != nil {
				return fmt.Errorf("%w: content[%d] (%s): %v", ErrInvalidResponse, i, p.Name, err)
			}
			if j, dup := ids[p.ToolUseID]; dup {
				return fmt.Errorf("%w: content[%d] (%s): id %q already used by content[%d]", ErrInvalidResponse, i, p.Name, p.ToolUseID, j)
			}
			ids[p.ToolUseID] = i
			if err := checkToolInput(p.Input); err != nil {
				return fmt.Errorf("%w: content[%d] (%s): input %v", ErrInvalidResponse, i, p.Name, err)
			}
		case PartToolResult:
			return fmt.Errorf("%w: content[%d]: a model response cannot contain a tool_result", ErrInvalidResponse, i)
		default:
			return fmt.Errorf("%w: content[%d]: unknown part type %q", ErrInvalidResponse, i, clip(p.Type))
		}
	}
	u := r.Usage
	if u.InputTokens < 0 || u.OutputTokens < 0 || u.CacheCreationTokens < 0 || u.CacheReadTokens < 0 {
		return fmt.Errorf("%w: negative token count in usage %+v", ErrInvalidResponse, u)
	}
	r.StopReason = normalStopReason(r.StopReason, calls > 0)
	return nil
}

func normalStopReason(reason string, hasCalls bool) string {
	switch {
	case hasCalls:
		return StopToolUse
	case reason == StopMaxTokens || reason == StopRefusal:
		return reason
	default:
		return StopEndTurn
	}
}

func checkToolUseID(id string) error {
	if id == "" {
		return errors.New("empty id")
	}
	if len(id) > MaxToolUseIDBytes {
		return fmt.Errorf("id longer than %d bytes", MaxToolUseIDBytes)
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return fmt.Errorf("id %q is not printable ASCII", clip(id))
		}
	}
	return nil
}

// checkToolInput requires exactly one JSON object, within the size and depth
// bounds, in valid UTF-8 and without duplicate keys at any level.
func checkToolInput(raw json.RawMessage) error {
	if len(raw) == 0 {
		return errors.New("is empty; want a JSON object such as {}")
	}
	if len(raw) > MaxToolInputBytes {
		return fmt.Errorf("is %d bytes, more than %d", len(raw), MaxToolInputBytes)
	}
	if !utf8.Valid(raw) {
		return errors.New("is not valid UTF-8")
	}
	if !json.Valid(raw) {
		return errors.New("is not valid JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("is not valid JSON: %v", err)
	}
	if tok != json.Delim('{') {
		return errors.New("is not a JSON object")
	}
	if err := walkJSON(dec, tok.(json.Delim), 1); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("has data after the JSON object")
	}
	return nil
}

// walkJSON consumes the rest of the container opened by open, refusing
// duplicate object keys and nesting deeper than MaxToolInputDepth.
func walkJSON(dec *json.Decoder, open json.Delim, depth int) error {
	if depth > MaxToolInputDepth {
		return fmt.Errorf("nests deeper than %d levels", MaxToolInputDepth)
	}
	var seen map[string]struct{}
	if open == '{' {
		seen = make(map[string]struct{})
	}
	for dec.More() {
		if open == '{' {
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("is not valid JSON: %v", err)
			}
			key, _ := tok.(string)
			if _, dup := seen[key]; dup {
				return fmt.Errorf("has duplicate key %q", clip(key))
			}
			seen[key] = struct{}{}
		}
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("is not valid JSON: %v", err)
		}
		if d, ok := tok.(json.Delim); ok {
			if err := walkJSON(dec, d, depth+1); err != nil {
				return err
			}
		}
	}
	if _, err := dec.Token(); err != nil { // the closing delimiter
		return fmt.Errorf("is not valid JSON: %v", err)
	}
	return nil
}

// clip shortens a hostile string before it goes into an error message.
func clip(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}
