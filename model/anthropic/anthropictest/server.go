// Package anthropictest is a simulated Anthropic Messages API on a loopback
// httptest server, for tests and benchmarks that exercise the real wire
// format without a network or a key. It answers with the documented response
// bodies (JSON and server-sent events), reports usage the way the API does,
// including a prompt cache that honours the cache_control breakpoints a
// request carries, and can be told to fail: error bodies, 429 with
// Retry-After, 529 overloaded, error events and dropped connections.
//
// Token counts follow one deterministic rule, the same as
// model.EstimateTokens: a block costs ceil(bytes/4) tokens of its text (for
// a tool definition: name, description and schema; for a tool call: name and
// input). The cache follows the API's documented behaviour: a cache entry is
// written for the prefix ending at each breakpoint; a request reads the
// longest cached prefix ending at a block boundary at most LookbackBlocks
// before one of its breakpoints; what lies between that and its last
// breakpoint is written; what follows the last breakpoint is plain input.
// Entries do not expire unless ExpireCache is called.
package anthropictest

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
)

// LookbackBlocks is how many block boundaries before a breakpoint the
// simulated cache checks for an earlier entry.
const LookbackBlocks = 20

// Block is a content block as it appears on the wire.
type Block struct {
	Type         string          `json:"type"`
	Text         string          `json:"text,omitempty"`
	ID           string          `json:"id,omitempty"`
	Name         string          `json:"name,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	ToolUseID    string          `json:"tool_use_id,omitempty"`
	Content      json.RawMessage `json:"content,omitempty"`
	IsError      bool            `json:"is_error,omitempty"`
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
}

// CacheControl is a breakpoint.
type CacheControl struct {
	Type string `json:"type"`
	TTL  string `json:"ttl,omitempty"`
}

// Message is a request message; Content is always a list here (a plain
// string on the wire becomes one text block).
type Message struct {
	Role    string  `json:"role"`
	Content []Block `json:"content"`
}

// Tool is a tool definition on the wire.
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	CacheControl *CacheControl   `json:"cache_control,omitempty"`
}

// Request is a parsed request body.
type Request struct {
	Model       string    `json:"model"`
	MaxTokens   int       `json:"max_tokens"`
	System      []Block   `json:"-"`
	Messages    []Message `json:"-"`
	Tools       []Tool    `json:"tools"`
	Stream      bool      `json:"stream"`
	Temperature *float64  `json:"temperature"`
}

// Usage is the usage object of a response.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
}

// Call is one request the server received.
type Call struct {
	N      int // 1-based
	Header http.Header
	Raw    []byte
	Req    Request
	// Usage is the input side of the usage the simulator computed for the
	// request (OutputTokens is filled by the reply).
	Usage Usage
	// Breakpoints counts the request's cache_control markers.
	Breakpoints int
}

// LastUserText is the text of the last message's text blocks.
func (c *Call) LastUserText() string {
	if len(c.Req.Messages) == 0 {
		return ""
	}
	var s []string
	for _, b := range c.Req.Messages[len(c.Req.Messages)-1].Content {
		if b.Type == "text" {
			s = append(s, b.Text)
		}
	}
	return strings.Join(s, "\n")
}

// HasToolResult says whether the last message carries a tool_result.
func (c *Call) HasToolResult() bool {
	if len(c.Req.Messages) == 0 {
		return false
	}
	for _, b := range c.Req.Messages[len(c.Req.Messages)-1].Content {
		if b.Type == "tool_result" {
			return true
		}
	}
	return false
}

// Reply says how to answer one call. The zero Reply answers with a text
// block "ok" and stop reason end_turn.
type Reply struct {
	// Status, when not 200, answers with an error body of ErrorType and
	// ErrorMessage; Header adds response headers (Retry-After, say).
	Status       int
	Header       map[string]string
	ErrorType    string
	ErrorMessage string
	// Body, when set, is sent verbatim with Status (default 200).
	Body string
	// Content and StopReason make a successful answer.
	Content    []Block
	StopReason string
	// OutputTokens overrides the output count computed from Content.
	OutputTokens int64
	// For a streamed answer: CutAfterEvents > 0 sends that many events and
	// then ends the response; Abort makes that end an abrupt disconnect
	// (no terminating chunk) instead of a clean end of body.
	CutAfterEvents int
	Abort          bool
	// StreamError, for a streamed answer, replaces the message_delta and
	// message_stop events with an error event of this type.
	StreamError string
}

// Options configure NewServer.
type Options struct {
	// Reply decides each answer; nil uses DefaultReply.
	Reply func(*Call) Reply
}

// Server is the simulated API. Its methods are safe for concurrent use.
type Server struct {
	URL string
	srv *httptest.Server
	o   Options

	mu    sync.Mutex
	calls []*Call
	cache map[[32]byte]bool
}

// NewServer starts a server; Close stops it.
func NewServer(o Options) *Server {
	if o.Reply == nil {
		o.Reply = DefaultReply
	}
	s := &Server{o: o, cache: map[[32]byte]bool{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	s.URL = s.srv.URL
	return s
}

// Close shuts the server down.
func (s *Server) Close() { s.srv.Close() }

// Calls returns the calls so far, in order.
func (s *Server) Calls() []*Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Call(nil), s.calls...)
}

// ExpireCache drops every cache entry, as the API does when a breakpoint's
// lifetime passes without a read.
func (s *Server) ExpireCache() {
	s.mu.Lock()
	s.cache = map[[32]byte]bool{}
	s.mu.Unlock()
}

// DefaultReply answers like a cooperative model: when tools are offered and
// the last message carries no tool result, it calls the first tool with
// {"order_id":"A-1001"}; otherwise it answers "pong" (or, after a tool
// result, a sentence).
func DefaultReply(c *Call) Reply {
	switch {
	case len(c.Req.Tools) > 0 && !c.HasToolResult():
		return Reply{StopReason: "tool_use", Content: []Block{
			{Type: "text", Text: "Let me look that up."},
			{Type: "tool_use", ID: fmt.Sprintf("toolu_%04d", c.N), Name: c.Req.Tools[0].Name, Input: json.RawMessage(`{"order_id":"A-1001"}`)},
		}}
	case c.HasToolResult():
		return Reply{StopReason: "end_turn", Content: []Block{{Type: "text", Text: "Order A-1001 has shipped."}}}
	}
	return Reply{StopReason: "end_turn", Content: []Block{{Type: "text", Text: "pong"}}}
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		writeError(w, http.StatusNotFound, "not_found_error", "no route "+r.Method+" "+r.URL.Path, nil)
		return
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	req, err := parse(raw)
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", err.Error(), nil)
		return
	}
	s.mu.Lock()
	c := &Call{N: len(s.calls) + 1, Header: r.Header.Clone(), Raw: raw, Req: *req}
	s.calls = append(s.calls, c)
	s.mu.Unlock()

	rep := s.o.Reply(c)
	if rep.Body != "" {
		status := rep.Status
		if status == 0 {
			status = http.StatusOK
		}
		for k, v := range rep.Header {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, rep.Body)
		return
	}
	if rep.Status != 0 && rep.Status != http.StatusOK {
		writeError(w, rep.Status, rep.ErrorType, rep.ErrorMessage, rep.Header)
		return
	}
	// Only an answered call touches the cache, as with the real API.
	s.mu.Lock()
	c.Usage, c.Breakpoints = s.account(req)
	s.mu.Unlock()
	if len(rep.Content) == 0 {
		rep.Content = []Block{{Type: "text", Text: "ok"}}
	}
	if rep.StopReason == "" {
		rep.StopReason = "end_turn"
	}
	u := c.Usage
	u.OutputTokens = rep.OutputTokens
	if u.OutputTokens == 0 {
		for _, b := range rep.Content {
			u.OutputTokens += blockTokens(b)
		}
	}
	for k, v := range rep.Header {
		w.Header().Set(k, v)
	}
	w.Header().Set("request-id", fmt.Sprintf("req_sim_%04d", c.N))
	if req.Stream {
		s.stream(w, c, rep, u)
		return
	}
	msg := map[string]any{
		"id": fmt.Sprintf("msg_sim_%04d", c.N), "type": "message", "role": "assistant", "model": req.Model,
		"content": rep.Content, "stop_reason": rep.StopReason, "stop_sequence": nil, "usage": u,
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(msg)
}

func writeError(w http.ResponseWriter, status int, typ, msg string, header map[string]string) {
	for k, v := range header {
		w.Header().Set(k, v)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("request-id", "req_sim_error")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
}

// stream writes the answer as the API's event sequence: message_start,
// per block content_block_start / deltas / content_block_stop (with pings
// between), message_delta and message_stop.
func (s *Server) stream(w http.ResponseWriter, c *Call, rep Reply, u Usage) {
	type ev struct {
		name string
		data any
	}
	start := u
	start.OutputTokens = 1
	events := []ev{{"message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_sim_%04d", c.N), "type": "message", "role": "assistant", "model": c.Req.Model,
		"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": start}}}}
	for i, b := range rep.Content {
		switch b.Type {
		case "text":
			events = append(events, ev{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "text", "text": ""}}})
			events = append(events, ev{"ping", map[string]any{"type": "ping"}})
			for _, chunk := range split(b.Text, 3) {
				events = append(events, ev{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "text_delta", "text": chunk}}})
			}
		case "tool_use":
			events = append(events, ev{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": map[string]any{"type": "tool_use", "id": b.ID, "name": b.Name, "input": map[string]any{}}}})
			for _, chunk := range split(string(b.Input), 2) {
				events = append(events, ev{"content_block_delta", map[string]any{"type": "content_block_delta", "index": i, "delta": map[string]any{"type": "input_json_delta", "partial_json": chunk}}})
			}
		default:
			events = append(events, ev{"content_block_start", map[string]any{"type": "content_block_start", "index": i, "content_block": b}})
		}
		events = append(events, ev{"content_block_stop", map[string]any{"type": "content_block_stop", "index": i}})
	}
	if rep.StreamError != "" {
		events = append(events, ev{"error", map[string]any{"type": "error", "error": map[string]string{"type": rep.StreamError, "message": "simulated " + rep.StreamError}}})
	} else {
		events = append(events,
			ev{"message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": rep.StopReason, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": u.OutputTokens}}},
			ev{"message_stop", map[string]any{"type": "message_stop"}})
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	for i, e := range events {
		if rep.CutAfterEvents > 0 && i == rep.CutAfterEvents {
			if rep.Abort {
				panic(http.ErrAbortHandler) // close the connection mid-body
			}
			return
		}
		data, _ := json.Marshal(e.data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.name, data)
		if fl != nil {
			fl.Flush()
		}
	}
}

// split cuts s into n nearly equal pieces (fewer when s is short).
func split(s string, n int) []string {
	if len(s) <= n {
		return []string{s}
	}
	var out []string
	size := (len(s) + n - 1) / n
	for len(s) > 0 {
		k := min(size, len(s))
		out = append(out, s[:k])
		s = s[k:]
	}
	return out
}

// parse reads a request body, accepting the API's shorthand forms (system
// and message content as plain strings).
func parse(raw []byte) (*Request, error) {
	var req Request
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, err
	}
	var shape struct {
		System   json.RawMessage `json:"system"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(raw, &shape); err != nil {
		return nil, err
	}
	if req.Model == "" {
		return nil, fmt.Errorf("model: Field required")
	}
	if req.MaxTokens <= 0 {
		return nil, fmt.Errorf("max_tokens: Field required")
	}
	var err error
	if req.System, err = blocks(shape.System); err != nil {
		return nil, fmt.Errorf("system: %v", err)
	}
	if len(shape.Messages) == 0 {
		return nil, fmt.Errorf("messages: at least one message is required")
	}
	for i, m := range shape.Messages {
		bs, err := blocks(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages.%d.content: %v", i, err)
		}
		for j, b := range bs {
			if b.Type == "text" && strings.TrimSpace(b.Text) == "" {
				return nil, fmt.Errorf("messages.%d.content.%d.text: text content blocks must contain non-whitespace text", i, j)
			}
		}
		if m.Role != "user" && m.Role != "assistant" {
			return nil, fmt.Errorf("messages.%d.role: unexpected role %q", i, m.Role)
		}
		req.Messages = append(req.Messages, Message{Role: m.Role, Content: bs})
	}
	return &req, nil
}

func blocks(raw json.RawMessage) ([]Block, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		return []Block{{Type: "text", Text: s}}, nil
	}
	var bs []Block
	err := json.Unmarshal(raw, &bs)
	return bs, err
}

// unit is one cacheable block of a request, in the order the API caches:
// tools, system, messages.
type unit struct {
	tokens int64
	mark   bool
	key    []byte // the block without its cache_control
}

func units(req *Request) []unit {
	var us []unit
	for _, t := range req.Tools {
		k := t
		k.CacheControl = nil
		key, _ := json.Marshal(k)
		us = append(us, unit{tokens: ceil4(len(t.Name) + len(t.Description) + len(t.InputSchema)), mark: t.CacheControl != nil, key: key})
	}
	for _, b := range req.System {
		us = append(us, blockUnit("system", b))
	}
	for _, m := range req.Messages {
		for _, b := range m.Content {
			us = append(us, blockUnit(m.Role, b))
		}
	}
	return us
}

func blockUnit(role string, b Block) unit {
	k := b
	k.CacheControl = nil
	key, _ := json.Marshal(struct {
		Role  string `json:"role"`
		Block Block  `json:"block"`
	}{role, k})
	return unit{tokens: blockTokens(b), mark: b.CacheControl != nil, key: key}
}

// blockTokens is the simulator's token count of one block.
func blockTokens(b Block) int64 {
	switch b.Type {
	case "tool_use":
		return ceil4(len(b.Name) + len(b.Input))
	case "tool_result":
		inner, _ := blocks(b.Content)
		n := 0
		for _, x := range inner {
			n += len(x.Text)
		}
		return ceil4(n)
	}
	return ceil4(len(b.Text))
}

func ceil4(n int) int64 { return int64((n + 3) / 4) }

// account computes a request's input usage against the cache and records
// the entries its breakpoints write. The caller holds s.mu.
func (s *Server) account(req *Request) (Usage, int) {
	us := units(req)
	cum := make([]int64, len(us)+1) // cum[i]: tokens of the first i blocks
	hashes := make([][32]byte, len(us)+1)
	h := sha256.New()
	var marks []int // prefix lengths (in blocks) that end at a breakpoint
	for i, u := range us {
		cum[i+1] = cum[i] + u.tokens
		h.Write(u.key)
		h.Write([]byte{0})
		copy(hashes[i+1][:], h.Sum(nil))
		if u.mark {
			marks = append(marks, i+1)
		}
	}
	total := cum[len(us)]
	if len(marks) == 0 {
		return Usage{InputTokens: total}, 0
	}
	hit := 0
	for _, m := range marks {
		for k := m; k > 0 && k > m-LookbackBlocks; k-- {
			if s.cache[hashes[k]] {
				hit = max(hit, k)
				break
			}
		}
	}
	last := marks[len(marks)-1]
	u := Usage{CacheReadInputTokens: cum[hit], InputTokens: total - cum[max(last, hit)]}
	if last > hit {
		u.CacheCreationInputTokens = cum[last] - cum[hit]
	}
	for _, m := range marks {
		s.cache[hashes[m]] = true
	}
	return u, len(marks)
}
