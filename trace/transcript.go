package trace

import (
	"crypto/sha256"
	"encoding"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/toolsearch"
)

// Transcript builds the messages a model sees from a run's events. It is the
// only place that decides how events become prompt text: the loop feeds it as
// the run goes, and `agentplane trace` feeds it the recorded log.
type Transcript struct {
	load   func(Content) ([]byte, error)
	System string
	// Tools are the tools offered: those of run_started (the cached
	// prefix), then those tool searches loaded.
	Tools []model.ToolDef
	// prefix is how many of Tools run_started offered, in a run with tool
	// search (-1 otherwise).
	prefix   int
	messages []model.Message
	pending  []int64 // seqs added since the last model call
	// held are user messages (signals) waiting for the next step boundary:
	// one that arrives mid-step (say, while a call waits for approval) must
	// not land between a step's tool results.
	held []heldMessage
	// hashed is the running hash of the start of the prompt's encoding
	// that can no longer change (PromptHash).
	hashed *promptPrefix
}

type heldMessage struct {
	seq  int64
	text string
}

// NewTranscript starts a transcript from a run_started payload whose system
// prompt and tool definitions have been loaded.
// load fetches blob content (tool results the model sees in full).
func NewTranscript(system string, tools []model.ToolDef, load func(Content) ([]byte, error)) *Transcript {
	t := &Transcript{System: system, Tools: tools, load: load, prefix: -1}
	if n := len(tools); n > 0 && tools[n-1].Name == toolsearch.Name {
		// A run with tool search: its tools may grow after these.
		t.prefix = n
	}
	return t
}

// Messages returns the current messages. The slice must not be modified.
func (t *Transcript) Messages() []model.Message { return t.messages }

// TakeDelta returns the seqs added since the last call and resets it.
func (t *Transcript) TakeDelta() []int64 {
	d := t.pending
	t.pending = nil
	if d == nil {
		d = []int64{}
	}
	return d
}

func (t *Transcript) userPart(p model.Part) {
	if n := len(t.messages); n > 0 && t.messages[n-1].Role == model.RoleUser {
		t.messages[n-1].Content = append(t.messages[n-1].Content, p)
		return
	}
	t.messages = append(t.messages, model.Message{Role: model.RoleUser, Content: []model.Part{p}})
}

// AddModelCall is Add of a model_call event already decoded (the loop
// decodes it for itself; decoding it twice was a step's largest JSON cost).
func (t *Transcript) AddModelCall(seq int64, p *ModelCall) {
	if p.Response == nil {
		return
	}
	t.messages = append(t.messages, model.Message{Role: model.RoleAssistant, Content: p.Response.Content})
	t.pending = append(t.pending, seq)
}

// AddToolResult is Add of the tool_result event at seq, already decoded.
// Like Add, both note seq in the delta the next model call records.
func (t *Transcript) AddToolResult(seq int64, p *ToolResult) error {
	text, err := t.modelView(p.Output, p.Truncated)
	if err != nil {
		return fmt.Errorf("tool result at seq %d: %w", seq, err)
	}
	t.userPart(model.Part{Type: model.PartToolResult, ToolUseID: p.CallID, Text: text, IsError: p.Status != StatusOK})
	t.pending = append(t.pending, seq)
	return nil
}

// Add incorporates one event. Events that do not reach the model are ignored.
func (t *Transcript) Add(ev *store.Event) error {
	switch ev.Type {
	case EvRunStarted:
		var p RunStarted
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		t.userPart(model.Part{Type: model.PartText, Text: p.Task})
	case EvModelCall:
		var p ModelCall
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		t.AddModelCall(ev.Seq, &p)
		return nil
	case EvToolResult:
		var p ToolResult
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		return t.AddToolResult(ev.Seq, &p)
	case EvLoopNote:
		var p LoopNote
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if p.Reason == NoteApproval {
			// Written after one call's result while the step may have more:
			// held, like a message, so no text lands between the results.
			t.held = append(t.held, heldMessage{ev.Seq, p.Text})
			return nil
		}
		t.userPart(model.Part{Type: model.PartText, Text: p.Text})
	case EvSignal:
		var p Signal
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if p.Kind != "message" {
			return nil
		}
		var m struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(p.Payload, &m); err != nil {
			return err
		}
		t.held = append(t.held, heldMessage{ev.Seq, "Message from the user: " + m.Text})
		return nil
	case EvToolsLoaded:
		var p ToolsLoaded
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if len(p.Loaded) == 0 {
			return nil
		}
		data, err := t.load(p.Defs)
		if err != nil {
			return fmt.Errorf("loaded tools at seq %d: %w", ev.Seq, err)
		}
		var defs []model.ToolDef
		if err := json.Unmarshal(data, &defs); err != nil {
			return fmt.Errorf("loaded tools at seq %d: %w", ev.Seq, err)
		}
		// A new slice: requests already built keep the tools they had.
		t.Tools = append(t.Tools[:len(t.Tools):len(t.Tools)], defs...)
	case EvCompaction:
		var p Compaction
		if err := json.Unmarshal(ev.Payload, &p); err != nil {
			return err
		}
		if p.Error != "" || len(t.messages) == 0 || p.KeptMessages >= len(t.messages) {
			return nil
		}
		note, err := t.load(p.Note)
		if err != nil {
			return fmt.Errorf("compaction note at seq %d: %w", ev.Seq, err)
		}
		recent := append([]model.Message(nil), t.messages[len(t.messages)-p.KeptMessages:]...)
		t.messages = model.ApplyCompaction(t.messages[0], string(note), recent)
		t.hashed = nil
	case EvStepStarted:
		for _, h := range t.held {
			t.userPart(model.Part{Type: model.PartText, Text: h.text})
			t.pending = append(t.pending, h.seq)
		}
		t.held = nil
		return nil
	default:
		return nil
	}
	t.pending = append(t.pending, ev.Seq)
	return nil
}

// modelView is the text the model sees for a stored tool output: the whole
// text, or for a truncated output a handle and a preview.
func (t *Transcript) modelView(c Content, truncated bool) (string, error) {
	if !truncated {
		if !c.IsBlob() {
			return c.Text, nil
		}
		b, err := t.load(c)
		return string(b), err
	}
	b, _ := json.Marshal(map[string]any{
		"note":    "result too large for the context; showing a preview",
		"handle":  "blob:" + c.Blob,
		"bytes":   c.Size,
		"preview": c.Preview,
	})
	return string(b), nil
}

// Request builds the request for the next model call. With noTools (the
// last call at a budget limit) the tools stay in the request, so the cached
// prefix still matches, and ForbidToolCalls tells the model it may not use
// them.
func (t *Transcript) Request(noTools bool) *model.Request {
	req := &model.Request{System: t.System, Messages: append([]model.Message(nil), t.messages...),
		Tools: t.Tools, ForbidToolCalls: noTools}
	if t.prefix >= 0 {
		req.CachedTools = t.prefix
	}
	return req
}

// PromptHash returns PromptHash(t.Request(noTools)) without encoding the
// whole conversation again at every step: of the messages, only the last
// can still change (a step's tool results are appended to it) until a
// compaction replaces them all, so the hash state after every earlier
// message is kept and only the rest is encoded. The bytes hashed are
// exactly PromptHash's (a test checks it on every event of long runs).
func (t *Transcript) PromptHash(noTools bool) (string, int64) {
	n := len(t.messages)
	if n == 0 {
		return PromptHash(t.Request(noTools))
	}
	p := t.hashed
	if p == nil || p.system != t.System || !sameTools(p.tools, t.Tools) || p.folded > n-1 {
		p = &promptPrefix{system: t.System, tools: t.Tools, h: sha256.New()}
		p.write([]byte(`{"system":`))
		p.write(mustJSON(t.System))
		p.write([]byte(`,"messages":[`))
		p.toolsJSON = mustJSON(t.Tools)
		t.hashed = p
	}
	for ; p.folded < n-1; p.folded++ {
		p.write(p.encode(t.messages, p.folded))
		p.write([]byte(","))
	}
	// The tail goes into a copy of the state.
	state, err := p.h.(encoding.BinaryMarshaler).MarshalBinary()
	if err != nil {
		panic(fmt.Sprintf("trace: sha256 state: %v", err))
	}
	h := sha256.New()
	if err := h.(encoding.BinaryUnmarshaler).UnmarshalBinary(state); err != nil {
		panic(fmt.Sprintf("trace: sha256 state: %v", err))
	}
	size := p.bytes
	write := func(b []byte) { h.Write(b); size += int64(len(b)) }
	write(p.encode(t.messages, n-1))
	write([]byte(`],"tools":`))
	write(p.toolsJSON)
	if noTools {
		write([]byte(`,"forbid_tool_calls":true`))
	}
	write([]byte("}"))
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), size
}

// promptPrefix is the hash of the encoding of a prompt up to and including
// the comma after its message folded-1, and what it was computed over.
type promptPrefix struct {
	system    string
	tools     []model.ToolDef
	toolsJSON []byte
	h         hash.Hash
	bytes     int64
	folded    int
	// tail is the encoding of the message last encoded as the prompt's
	// tail: it is folded into the prefix at a later step, unchanged unless
	// parts were appended to it since (messages only ever grow at the end).
	tail struct {
		i     int
		role  string
		parts int
		first *model.Part
		json  []byte
	}
}

// encode returns the JSON of ms[i], reusing the tail's when ms[i] is the
// message the tail was encoded from and has not grown since.
func (p *promptPrefix) encode(ms []model.Message, i int) []byte {
	m := &ms[i]
	var first *model.Part
	if len(m.Content) > 0 {
		first = &m.Content[0]
	}
	tl := &p.tail
	if tl.json != nil && tl.i == i && tl.role == m.Role && tl.parts == len(m.Content) && tl.first == first {
		return tl.json
	}
	b := mustJSON(*m)
	tl.i, tl.role, tl.parts, tl.first, tl.json = i, m.Role, len(m.Content), first, b
	return b
}

func (p *promptPrefix) write(b []byte) {
	p.h.Write(b)
	p.bytes += int64(len(b))
}

// sameTools reports whether a and b are the same slice (the transcript's
// tool definitions are set once and never edited in place).
func sameTools(a, b []model.ToolDef) bool {
	return (a == nil) == (b == nil) && len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("trace: marshal prompt: %v", err))
	}
	return b
}

// PromptHash identifies a request's content (system, messages, tools).
func PromptHash(req *model.Request) (string, int64) {
	b, err := json.Marshal(struct {
		System   string          `json:"system"`
		Messages []model.Message `json:"messages"`
		Tools    []model.ToolDef `json:"tools"`
		Forbid   bool            `json:"forbid_tool_calls,omitempty"`
	}{req.System, req.Messages, req.Tools, req.ForbidToolCalls})
	if err != nil {
		panic(fmt.Sprintf("trace: marshal prompt: %v", err))
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:]), int64(len(b))
}
