package anthropic_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/anthropic/anthropictest"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/toolsearch"
	"github.com/agentplane/agentplane/trace"
)

// The prompt layout is produced by trace.Transcript; this checks that it is
// cache-friendly through the real provider: the instructions and tools come
// first and are byte-identical across runs of one version whatever the run,
// user, task or time; each step's prompt extends the previous one, so each
// call reads everything the previous call wrote.
func TestTranscriptLayoutIsCacheFriendly(t *testing.T) {
	system := fill("You are the card-dispute assistant (version 7).", 4000)
	tools := []model.ToolDef{
		{Name: "get_ticket", Description: fill("Read a support ticket.", 400), InputSchema: json.RawMessage(`{"type":"object","properties":{"ticket_id":{"type":"string"}}}`)},
		{Name: "issue_refund", Description: fill("Refund a transaction.", 400), InputSchema: json.RawMessage(`{"type":"object","properties":{"txn_id":{"type":"string"},"amount_inr":{"type":"integer"}}}`)},
	}
	prefixTokens := int64(4000 / 4)
	for _, d := range tools {
		prefixTokens += int64((len(d.Name) + len(d.Description) + len(d.InputSchema) + 3) / 4)
	}
	seq := int64(0)
	event := func(run, typ string, at time.Time, v any) *store.Event {
		seq++
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return &store.Event{RunID: run, Seq: seq, Type: typ, Step: 1, At: at, Payload: b}
	}
	start := func(run, user, task string, at time.Time) *trace.Transcript {
		tr := trace.NewTranscript(system, tools, func(trace.Content) ([]byte, error) { return nil, nil })
		if err := tr.Add(event(run, trace.EvRunStarted, at, trace.RunStarted{Agent: "card-dispute-assistant", AgentVersion: 7,
			Tenant: "bank", User: user, Task: task, ModelAlias: "reasoning-standard"})); err != nil {
			t.Fatal(err)
		}
		return tr
	}
	t0 := time.Date(2026, 10, 27, 9, 0, 0, 0, time.UTC)
	tr1 := start("run_9Qx", "priya@example-bank.in", "Two charges of 12,499 INR look like duplicates.", t0)
	tr2 := start("run_7Ab", "arun@example-bank.in", "Card 4417 was charged twice.", t0.Add(26*time.Hour))
	r1, r2 := tr1.Request(false), tr2.Request(false)
	if r1.System != r2.System || !reflect.DeepEqual(r1.Tools, r2.Tools) {
		t.Fatal("instructions or tools differ between two runs of one version")
	}
	for _, leak := range []string{"run_9Qx", "priya", "2026"} {
		if strings.Contains(r1.System, leak) || strings.Contains(string(mustJSON(t, r1.Tools)), leak) {
			t.Errorf("the cached prefix carries run-specific %q", leak)
		}
	}

	srv := newServer(t, nil)
	p := newProvider(t, srv.URL, nil)
	send := func(req *model.Request) *anthropictest.Call {
		t.Helper()
		r := *req
		r.Model = "claude-sonnet-5"
		if _, err := p.Complete(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		calls := srv.Calls()
		return calls[len(calls)-1]
	}
	send(r1)
	// Another run's first call reads the instructions+tools prefix.
	if c := send(r2); c.Usage.CacheReadInputTokens != prefixTokens {
		t.Errorf("second run's first call read %d tokens from the cache, want the %d-token prefix", c.Usage.CacheReadInputTokens, prefixTokens)
	}
	// One step later the prompt extends the first: all of it is read.
	resp := &model.Response{Content: []model.Part{{Type: model.PartToolUse, ToolUseID: "toolu_1", Name: "get_ticket", Input: json.RawMessage(`{"ticket_id":"T-40127"}`)}}, StopReason: model.StopToolUse}
	if err := tr1.Add(event("run_9Qx", trace.EvModelCall, t0.Add(time.Second), trace.ModelCall{Alias: "reasoning-standard", Response: resp})); err != nil {
		t.Fatal(err)
	}
	if err := tr1.Add(event("run_9Qx", trace.EvToolResult, t0.Add(2*time.Second), trace.ToolResult{CallID: "toolu_1", Tool: "get_ticket", Status: trace.StatusOK, Output: trace.Content{Text: `{"ticket_id":"T-40127","status":"open"}`}})); err != nil {
		t.Fatal(err)
	}
	first := srv.Calls()[0].Usage
	step2 := send(tr1.Request(false))
	if step2.Usage.CacheReadInputTokens != first.CacheCreationInputTokens || step2.Usage.CacheCreationInputTokens == 0 {
		t.Errorf("step 2 usage %+v: want it to read the %d tokens step 1 wrote, and write only its own", step2.Usage, first.CacheCreationInputTokens)
	}
	// The final call at a budget limit: the transcript keeps the tools and
	// forbids calls, so the cached prefix is still read. (Dropping the tools
	// would lose it: the cache order starts with them.)
	final := tr1.Request(true)
	if len(final.Tools) == 0 || !final.ForbidToolCalls {
		t.Fatalf("the final request has %d tools, forbid=%v: want the tools kept and calls forbidden", len(final.Tools), final.ForbidToolCalls)
	}
	noToolsReq := tr1.Request(false)
	noToolsReq.Tools = nil
	noTools := send(noToolsReq)
	kept := send(final)
	if noTools.Usage.CacheReadInputTokens != 0 {
		t.Errorf("a request without tools read %d cached tokens; the cache order starts with the tools", noTools.Usage.CacheReadInputTokens)
	}
	if kept.Usage.CacheReadInputTokens < step2.Usage.CacheReadInputTokens+step2.Usage.CacheCreationInputTokens {
		t.Errorf("final call with ForbidToolCalls read %d, want the whole previous prompt", kept.Usage.CacheReadInputTokens)
	}
	var body map[string]any
	if err := json.Unmarshal(kept.Raw, &body); err != nil {
		t.Fatal(err)
	}
	if tc, _ := body["tool_choice"].(map[string]any); tc["type"] != "none" {
		t.Errorf("tool_choice = %v, want none", body["tool_choice"])
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// In a run with tool search the tools a search loads go after the run's
// own tools, which on the wire come before the system prompt. The end of
// the run's own tools is a breakpoint, so the call after a search still
// reads them from the cache.
func TestLoadedToolsKeepTheToolPrefixCached(t *testing.T) {
	system := fill("You are the card-dispute assistant (version 7).", 2000)
	tools := []model.ToolDef{
		{Name: "get_ticket", Description: fill("Read a support ticket.", 4000), InputSchema: json.RawMessage(`{"type":"object"}`)},
		toolsearch.Def(),
	}
	loaded := []model.ToolDef{{Name: "issue_refund", Description: fill("Refund a transaction.", 400), InputSchema: json.RawMessage(`{"type":"object"}`)}}
	defs := mustJSON(t, loaded)
	tr := trace.NewTranscript(system, tools, func(trace.Content) ([]byte, error) { return defs, nil })
	at := time.Date(2026, 10, 27, 9, 0, 0, 0, time.UTC)
	add := func(seq int64, typ string, v any) {
		t.Helper()
		if err := tr.Add(&store.Event{RunID: "run_1", Seq: seq, Type: typ, Step: 1, At: at, Payload: mustJSON(t, v)}); err != nil {
			t.Fatal(err)
		}
	}
	add(1, trace.EvRunStarted, trace.RunStarted{Task: "Card 4417 was charged twice."})
	srv := newServer(t, nil)
	p := newProvider(t, srv.URL, nil)
	send := func(req *model.Request) *anthropictest.Call {
		t.Helper()
		r := *req
		r.Model = "claude-sonnet-5"
		if _, err := p.Complete(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
		calls := srv.Calls()
		return calls[len(calls)-1]
	}
	first := tr.Request(false)
	if first.CachedTools != 2 {
		t.Fatalf("CachedTools = %d, want the run's 2 tools", first.CachedTools)
	}
	send(first)
	add(2, trace.EvModelCall, trace.ModelCall{Response: &model.Response{StopReason: model.StopToolUse, Content: []model.Part{
		{Type: model.PartToolUse, ToolUseID: "toolu_1", Name: toolsearch.Name, Input: json.RawMessage(`{"query":"refund"}`)}}}})
	add(3, trace.EvToolsLoaded, trace.ToolsLoaded{CallID: "toolu_1", Query: "refund", Loaded: []trace.ToolRef{{Name: "issue_refund", Hash: "ab"}}, Defs: trace.Content{Blob: "x"}})
	add(4, trace.EvToolResult, trace.ToolResult{CallID: "toolu_1", Tool: toolsearch.Name, Status: trace.StatusOK, Output: trace.Content{Text: `{"added":["issue_refund"]}`}})
	second := tr.Request(false)
	if len(second.Tools) != 3 || second.Tools[2].Name != "issue_refund" || second.CachedTools != 2 {
		t.Fatalf("second request tools %v, cached %d", second.Tools, second.CachedTools)
	}
	c := send(second)
	toolTokens := int64(0)
	for _, d := range tools {
		toolTokens += int64((len(d.Name) + len(d.Description) + len(d.InputSchema) + 3) / 4)
	}
	if c.Usage.CacheReadInputTokens < toolTokens {
		t.Fatalf("after a search the call read %d tokens from the cache, want at least the %d of the run's own tools", c.Usage.CacheReadInputTokens, toolTokens)
	}
}
