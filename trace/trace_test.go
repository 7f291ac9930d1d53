package trace_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// memSource is an in-memory trace.Source: one run's events and a blob map.
type memSource struct {
	events  []store.Event
	blobs   map[[32]byte][]byte
	putFail error
}

func newMem() *memSource { return &memSource{blobs: map[[32]byte][]byte{}} }

func (m *memSource) Append(_ context.Context, req store.AppendRequest) error {
	m.events = append(m.events, req.Events...)
	return nil
}
func (m *memSource) Flush(context.Context, string) error { return nil }
func (m *memSource) Events(_ context.Context, runID string, after int64, limit int) ([]store.Event, error) {
	var out []store.Event
	for _, ev := range m.events {
		if ev.RunID == runID && ev.Seq > after {
			out = append(out, ev)
		}
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}
func (m *memSource) PutBlob(_ context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	if m.putFail != nil {
		return sum, m.putFail
	}
	m.blobs[sum] = append([]byte(nil), data...)
	return sum, nil
}
func (m *memSource) GetBlob(_ context.Context, sum [32]byte) ([]byte, error) {
	b, ok := m.blobs[sum]
	if !ok {
		return nil, fmt.Errorf("blob %x: %w", sum[:4], store.ErrNotFound)
	}
	return append([]byte(nil), b...), nil
}
func (m *memSource) BlobSize(_ context.Context, sum [32]byte) (int64, error) {
	b, ok := m.blobs[sum]
	if !ok {
		return 0, store.ErrNotFound
	}
	return int64(len(b)), nil
}

func TestMakeContentInlineOrBlob(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name        string
		data        string
		threshold   int
		previewLen  int
		wantBlob    bool
		wantPreview string
	}{
		{"empty", "", 4, 2, false, ""},
		{"below threshold", "abc", 4, 2, false, ""},
		{"at threshold", "abcd", 4, 2, false, ""},
		{"above threshold", "abcde", 4, 2, true, "ab"},
		{"preview longer than data", "abcdef", 4, 100, true, "abcdef"},
		{"preview cut at a rune boundary", "aé€xyz", 4, 4, true, "aé"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src := newMem()
			c, err := trace.MakeContent(ctx, src, []byte(tc.data), tc.threshold, tc.previewLen)
			if err != nil {
				t.Fatal(err)
			}
			if c.IsBlob() != tc.wantBlob || c.Size != int64(len(tc.data)) {
				t.Fatalf("content %+v: blob=%v size=%d, want blob=%v size=%d", c, c.IsBlob(), c.Size, tc.wantBlob, len(tc.data))
			}
			if tc.wantBlob {
				sum := sha256.Sum256([]byte(tc.data))
				if c.Blob != hex.EncodeToString(sum[:]) || c.Text != "" || c.Preview != tc.wantPreview {
					t.Fatalf("blob content %+v, want hash %x and preview %q", c, sum, tc.wantPreview)
				}
				if len(src.blobs) != 1 {
					t.Fatalf("%d blobs stored, want 1", len(src.blobs))
				}
			} else if c.Text != tc.data || len(src.blobs) != 0 {
				t.Fatalf("inline content %+v stored %d blobs", c, len(src.blobs))
			}
			got, err := trace.Load(ctx, src, c)
			if err != nil || string(got) != tc.data {
				t.Fatalf("Load = %q, %v; want %q", got, err, tc.data)
			}
		})
	}
	t.Run("blob store failure", func(t *testing.T) {
		src := newMem()
		src.putFail = errors.New("disk full")
		if _, err := trace.MakeContent(ctx, src, []byte("abcdef"), 2, 2); err == nil || !strings.Contains(err.Error(), "disk full") {
			t.Fatalf("MakeContent with a failing store: %v", err)
		}
	})
	t.Run("missing blob", func(t *testing.T) {
		sum := sha256.Sum256([]byte("gone"))
		_, err := trace.Load(ctx, newMem(), trace.Content{Blob: hex.EncodeToString(sum[:]), Size: 4})
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Load of a missing blob: %v", err)
		}
	})
}

func TestContentSumRejectsBadReferences(t *testing.T) {
	good := sha256.Sum256([]byte("x"))
	cases := []struct {
		ref string
		ok  bool
	}{
		{hex.EncodeToString(good[:]), true},
		{strings.ToUpper(hex.EncodeToString(good[:])), true},
		{"", false},
		{"zz", false},
		{hex.EncodeToString(good[:31]), false},
		{hex.EncodeToString(good[:]) + "00", false},
		{hex.EncodeToString(good[:])[:63], false},
		{"../../etc/passwd", false},
	}
	for _, tc := range cases {
		sum, err := trace.Content{Blob: tc.ref}.Sum()
		if (err == nil) != tc.ok {
			t.Errorf("Sum(%q) error = %v, want ok=%v", tc.ref, err, tc.ok)
		}
		if tc.ok && sum != good {
			t.Errorf("Sum(%q) = %x", tc.ref, sum)
		}
	}
	if _, err := trace.Load(context.Background(), newMem(), trace.Content{Blob: "nothex"}); err == nil {
		t.Error("Load accepted a bad blob reference")
	}
}

func TestPreview(t *testing.T) {
	cases := []struct {
		in   string
		n    int
		want string
	}{
		{"hello", 10, "hello"},
		{"hello", 5, "hello"},
		{"hello", 3, "hel"},
		{"hello", 0, ""},
		{"€uro", 1, ""}, // € is three bytes: no partial rune
		{"€uro", 3, "€"},
		{"a€", 3, "a"},
		{"a€", 4, "a€"},
	}
	for _, tc := range cases {
		if got := trace.Preview([]byte(tc.in), tc.n); got != tc.want {
			t.Errorf("Preview(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// ev builds an event with a JSON payload.
func ev(t *testing.T, seq int64, typ string, step int, payload any) *store.Event {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return &store.Event{RunID: "r1", Seq: seq, Type: typ, Step: step, Payload: b}
}

func text(s string) model.Part { return model.Part{Type: model.PartText, Text: s} }

func TestTranscript(t *testing.T) {
	src := newMem()
	ctx := context.Background()
	big := strings.Repeat("r", 40)
	bigC, _ := trace.MakeContent(ctx, src, []byte(big), 8, 4)
	noteC, _ := trace.MakeContent(ctx, src, []byte("NOTE: progress so far"), 8, 4)
	load := func(c trace.Content) ([]byte, error) { return trace.Load(ctx, src, c) }
	resp := func(parts ...model.Part) *model.Response {
		return &model.Response{Content: parts, StopReason: model.StopEndTurn}
	}
	use := model.Part{Type: model.PartToolUse, ToolUseID: "tu1", Name: "echo", Input: json.RawMessage(`{"text":"hi"}`)}

	type step struct {
		ev        *store.Event
		wantDelta []int64 // TakeDelta after this event (nil: not taken)
	}
	cases := []struct {
		name  string
		steps []step
		want  []model.Message
	}{
		{
			name: "task, answer, tool results merged into one user message",
			steps: []step{
				{ev: ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "do it"}), wantDelta: []int64{1}},
				{ev: ev(t, 2, trace.EvStepStarted, 1, trace.StepStarted{})},
				{ev: ev(t, 3, trace.EvModelCall, 1, trace.ModelCall{Response: resp(text("calling"), use)})},
				{ev: ev(t, 4, trace.EvToolAttempt, 1, trace.ToolAttempt{CallID: "tu1"})},
				{ev: ev(t, 5, trace.EvToolResult, 1, trace.ToolResult{CallID: "tu1", Status: trace.StatusOK, Output: trace.Content{Text: "ok1"}})},
				{ev: ev(t, 6, trace.EvToolResult, 1, trace.ToolResult{CallID: "tu2", Status: trace.StatusDenied, Output: trace.Content{Text: "no"}}), wantDelta: []int64{3, 5, 6}},
			},
			want: []model.Message{
				{Role: model.RoleUser, Content: []model.Part{text("do it")}},
				{Role: model.RoleAssistant, Content: []model.Part{text("calling"), use}},
				{Role: model.RoleUser, Content: []model.Part{
					{Type: model.PartToolResult, ToolUseID: "tu1", Text: "ok1"},
					{Type: model.PartToolResult, ToolUseID: "tu2", Text: "no", IsError: true}}},
			},
		},
		{
			name: "a failed model call adds nothing",
			steps: []step{
				{ev: ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"})},
				{ev: ev(t, 2, trace.EvModelCall, 1, trace.ModelCall{Error: "boom"}), wantDelta: []int64{1}},
			},
			want: []model.Message{{Role: model.RoleUser, Content: []model.Part{text("t")}}},
		},
		{
			name: "blob results load whole; truncated ones become a handle and a preview",
			steps: []step{
				{ev: ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"})},
				{ev: ev(t, 2, trace.EvModelCall, 1, trace.ModelCall{Response: resp(use)})},
				{ev: ev(t, 3, trace.EvToolResult, 1, trace.ToolResult{CallID: "a", Status: trace.StatusOK, Output: bigC})},
				{ev: ev(t, 4, trace.EvToolResult, 1, trace.ToolResult{CallID: "b", Status: trace.StatusOK, Output: bigC, Truncated: true})},
			},
			want: []model.Message{
				{Role: model.RoleUser, Content: []model.Part{text("t")}},
				{Role: model.RoleAssistant, Content: []model.Part{use}},
				{Role: model.RoleUser, Content: []model.Part{
					{Type: model.PartToolResult, ToolUseID: "a", Text: big},
					{Type: model.PartToolResult, ToolUseID: "b", Text: `{"bytes":40,"handle":"blob:` + bigC.Blob + `","note":"result too large for the context; showing a preview","preview":"rrrr"}`}}},
			},
		},
		{
			name: "a user message waits for the next step boundary; other signals are not prompt text",
			steps: []step{
				{ev: ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"}), wantDelta: []int64{1}},
				{ev: ev(t, 2, trace.EvModelCall, 1, trace.ModelCall{Response: resp(use)})},
				{ev: ev(t, 3, trace.EvSignal, 1, trace.Signal{Kind: trace.SignalMessage, Payload: json.RawMessage(`{"text":"also check X"}`)})},
				{ev: ev(t, 4, trace.EvSignal, 1, trace.Signal{Kind: trace.SignalApproval, Payload: json.RawMessage(`{"approval_id":"a"}`)})},
				{ev: ev(t, 5, trace.EvToolResult, 1, trace.ToolResult{CallID: "tu1", Status: trace.StatusOK, Output: trace.Content{Text: "r"}}), wantDelta: []int64{2, 5}},
				{ev: ev(t, 6, trace.EvStepStarted, 2, trace.StepStarted{}), wantDelta: []int64{3}},
				{ev: ev(t, 7, trace.EvLoopNote, 2, trace.LoopNote{Reason: "repeat", Text: "stop repeating"}), wantDelta: []int64{7}},
			},
			want: []model.Message{
				{Role: model.RoleUser, Content: []model.Part{text("t")}},
				{Role: model.RoleAssistant, Content: []model.Part{use}},
				{Role: model.RoleUser, Content: []model.Part{
					{Type: model.PartToolResult, ToolUseID: "tu1", Text: "r"},
					text("Message from the user: also check X"),
					text("stop repeating")}},
			},
		},
		{
			name: "compaction keeps the first message, the note and the recent messages; a failed one changes nothing",
			steps: []step{
				{ev: ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"})},
				{ev: ev(t, 2, trace.EvModelCall, 1, trace.ModelCall{Response: resp(text("one"))})},
				{ev: ev(t, 3, trace.EvLoopNote, 1, trace.LoopNote{Text: "n1"})},
				{ev: ev(t, 4, trace.EvModelCall, 2, trace.ModelCall{Response: resp(text("two"))})},
				{ev: ev(t, 5, trace.EvCompaction, 3, trace.Compaction{Error: "model down", KeptMessages: 1})},
				{ev: ev(t, 6, trace.EvCompaction, 3, trace.Compaction{Note: noteC, KeptMessages: 1}), wantDelta: []int64{1, 2, 3, 4, 6}},
			},
			want: model.ApplyCompaction(model.Message{Role: model.RoleUser, Content: []model.Part{text("t")}}, "NOTE: progress so far",
				[]model.Message{{Role: model.RoleAssistant, Content: []model.Part{text("two")}}}),
		},
		{
			name: "events that do not reach the model are ignored",
			steps: []step{
				{ev: ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"})},
				{ev: ev(t, 2, trace.EvTaint, 1, trace.Taint{Tool: "x"})},
				{ev: ev(t, 3, trace.EvBudget, 1, trace.Budget{Bound: "steps"})},
				{ev: ev(t, 4, "some_future_type", 1, map[string]int{"x": 1}), wantDelta: []int64{1}},
			},
			want: []model.Message{{Role: model.RoleUser, Content: []model.Part{text("t")}}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := trace.NewTranscript("sys", nil, load)
			for _, s := range tc.steps {
				if err := tr.Add(s.ev); err != nil {
					t.Fatalf("Add seq %d: %v", s.ev.Seq, err)
				}
				if s.wantDelta != nil {
					if got := tr.TakeDelta(); !reflect.DeepEqual(got, s.wantDelta) {
						t.Fatalf("delta after seq %d = %v, want %v", s.ev.Seq, got, s.wantDelta)
					}
				}
			}
			if got := tr.Messages(); !reflect.DeepEqual(got, tc.want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(tc.want)
				t.Fatalf("messages\n got %s\nwant %s", g, w)
			}
			if d := tr.TakeDelta(); d == nil {
				t.Fatal("TakeDelta returned nil, want an empty slice (it is recorded as [])")
			}
		})
	}
}

func TestTranscriptRejectsMalformedPayloads(t *testing.T) {
	missing := sha256.Sum256([]byte("absent"))
	gone := trace.Content{Blob: hex.EncodeToString(missing[:]), Size: 6}
	for _, e := range []*store.Event{
		{Seq: 1, Type: trace.EvRunStarted, Payload: []byte(`{"task":`)},
		{Seq: 1, Type: trace.EvModelCall, Payload: []byte(`[]`)},
		{Seq: 1, Type: trace.EvToolResult, Payload: []byte(`{"output":7}`)},
		{Seq: 1, Type: trace.EvSignal, Payload: []byte(`{"kind":"message","payload":{"text":5}}`)},
		ev(t, 1, trace.EvToolResult, 1, trace.ToolResult{Output: gone}),
	} {
		tr := trace.NewTranscript("", nil, func(c trace.Content) ([]byte, error) { return trace.Load(context.Background(), newMem(), c) })
		_ = tr.Add(ev(t, 0, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"}))
		if err := tr.Add(e); err == nil {
			t.Errorf("Add(%s %s) accepted a malformed payload", e.Type, e.Payload)
		}
	}
}

func TestRequest(t *testing.T) {
	tools := []model.ToolDef{{Name: "echo", Description: "d", InputSchema: json.RawMessage(`{"type":"object"}`)}}
	tr := trace.NewTranscript("sys", tools, nil)
	_ = tr.Add(ev(t, 1, trace.EvRunStarted, 0, trace.RunStarted{Task: "t"}))
	last := tr.Request(true)
	if last.System != "sys" || !reflect.DeepEqual(last.Tools, tools) || !last.ForbidToolCalls {
		t.Fatalf("no-tools request %+v: the tools must stay (cached prefix) and tool calls be forbidden", last)
	}
	req := tr.Request(false)
	if req.ForbidToolCalls {
		t.Fatal("a normal request forbids tool calls")
	}
	req.Messages[0] = model.Message{Role: model.RoleAssistant}
	req.Messages = append(req.Messages, model.Message{Role: model.RoleUser})
	if m := tr.Messages(); len(m) != 1 || m[0].Role != model.RoleUser {
		t.Fatalf("changing a request changed the transcript: %+v", m)
	}
}

// TestPromptHashIsStable pins the hash of a fixed request: every recorded
// log holds prompt hashes computed this way, and trace verify of an old log
// recomputes them, so the encoding may never change.
func TestPromptHashIsStable(t *testing.T) {
	base := func() *model.Request {
		return &model.Request{
			System: "You are careful.",
			Messages: []model.Message{
				{Role: model.RoleUser, Content: []model.Part{text("Refund <txn> & tell me")}},
				{Role: model.RoleAssistant, Content: []model.Part{{Type: model.PartToolUse, ToolUseID: "toolu_00_0", Name: "issue_refund", Input: json.RawMessage(`{"amount_inr":12499}`)}}},
				{Role: model.RoleUser, Content: []model.Part{{Type: model.PartToolResult, ToolUseID: "toolu_00_0", Text: "denied", IsError: true}}},
			},
			Tools: []model.ToolDef{{Name: "issue_refund", Description: "Refunds.", InputSchema: json.RawMessage(`{"type":"object"}`)}},
		}
	}
	got, size := trace.PromptHash(base())
	if !strings.HasPrefix(got, "sha256:") || len(got) != len("sha256:")+64 {
		t.Fatalf("PromptHash = %q, want sha256:<64 hex>", got)
	}
	if got != pinnedPromptHash || size != pinnedPromptBytes {
		t.Fatalf("PromptHash of the pinned request = %s (%d bytes), want %s (%d bytes): the encoding changed, and every recorded prompt hash with it",
			got, size, pinnedPromptHash, pinnedPromptBytes)
	}
	if sum := sha256.Sum256([]byte(pinnedPromptJSON)); "sha256:"+hex.EncodeToString(sum[:]) != pinnedPromptHash || len(pinnedPromptJSON) != pinnedPromptBytes {
		t.Fatal("the pinned hash is not the sha256 of the pinned encoding")
	}
	cases := []struct {
		name    string
		change  func(r *model.Request)
		changes bool
	}{
		{"system", func(r *model.Request) { r.System += " " }, true},
		{"a message's text", func(r *model.Request) { r.Messages[0].Content[0].Text = "Refund" }, true},
		{"a tool input", func(r *model.Request) { r.Messages[1].Content[0].Input = json.RawMessage(`{"amount_inr":12500}`) }, true},
		{"an error flag", func(r *model.Request) { r.Messages[2].Content[0].IsError = false }, true},
		{"message order", func(r *model.Request) { r.Messages[0], r.Messages[2] = r.Messages[2], r.Messages[0] }, true},
		{"tools", func(r *model.Request) { r.Tools = nil }, true},
		{"forbidden tool calls", func(r *model.Request) { r.ForbidToolCalls = true }, true},
		// Sampling settings are recorded beside the hash, not in it.
		{"temperature", func(r *model.Request) { x := 0.5; r.Temperature = &x }, false},
		{"max tokens", func(r *model.Request) { r.MaxTokens = 99 }, false},
		{"model", func(r *model.Request) { r.Model = "other" }, false},
	}
	for _, tc := range cases {
		r := base()
		tc.change(r)
		h, _ := trace.PromptHash(r)
		if (h != got) != tc.changes {
			t.Errorf("changing %s: hash changed = %v, want %v", tc.name, h != got, tc.changes)
		}
	}
}

// pinnedPromptJSON is what PromptHash hashes for the pinned request
// (encoding/json, HTML characters escaped, tool_result's id after its
// text); pinnedPromptHash and pinnedPromptBytes were computed from it once.
const (
	pinnedPromptJSON  = `{"system":"You are careful.","messages":[{"role":"user","content":[{"type":"text","text":"Refund \u003ctxn\u003e \u0026 tell me"}]},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_00_0","name":"issue_refund","input":{"amount_inr":12499}}]},{"role":"user","content":[{"type":"tool_result","text":"denied","id":"toolu_00_0","is_error":true}]}],"tools":[{"name":"issue_refund","description":"Refunds.","input_schema":{"type":"object"}}]}`
	pinnedPromptHash  = "sha256:0a98d7c05982c8f9a2071ff01996259a882137826c6c01ce9c17b4cd75667029"
	pinnedPromptBytes = 448
)

func TestApprovalID(t *testing.T) {
	for _, c := range []struct {
		run         string
		step, index int
	}{{"run_abc", 4, 0}, {"run_with_underscores_x", 12, 3}, {"r", 1, 0}} {
		id := trace.ApprovalID(c.run, c.step, c.index)
		run, step, index, err := trace.ParseApprovalID(id)
		if err != nil || run != c.run || step != c.step || index != c.index {
			t.Errorf("ParseApprovalID(%q) = %q %d %d %v", id, run, step, index, err)
		}
	}
	for _, bad := range []string{"", "apr_", "apr_run", "apr_run_1", "run_x_1_0", "apr__1_0", "apr_r_0_0", "apr_r_1_-1", "apr_r_x_0", "apr_r_1_y"} {
		if _, _, _, err := trace.ParseApprovalID(bad); err == nil {
			t.Errorf("ParseApprovalID(%q) accepted a bad id", bad)
		}
	}
}

// TestPayloadDecoding decodes payloads in the exact JSON today's agentplane
// writes: the field names are the log's wire format, which old logs keep.
func TestPayloadDecoding(t *testing.T) {
	temp := 0.2
	edited := `{"amount_inr":9000}`
	cases := []struct {
		typ  string
		json string
		into any
		want any
	}{
		{trace.EvRunStarted,
			`{"agent":"a","agent_version":2,"agent_hash":"ab","tenant":"t","user":"u","task":"do","model_alias":"m","tools":[{"name":"x","hash":"cd"}],"system":{"text":"s","size":1},"tool_defs":{"blob":"ef","size":9,"preview":"["},"budgets":{"max_steps":3},"replay":{"of":"run_o","from_step":4,"mode":"live"},"compaction":{"alias":"small","every_steps":3,"keep_steps":2},"temperature":0.2,"bindings":{"customer_id":"c1"}}`,
			&trace.RunStarted{},
			&trace.RunStarted{Agent: "a", AgentVersion: 2, AgentHash: "ab", Tenant: "t", User: "u", Task: "do", ModelAlias: "m",
				Tools: []trace.ToolRef{{Name: "x", Hash: "cd"}}, System: trace.Content{Text: "s", Size: 1}, ToolDefs: trace.Content{Blob: "ef", Size: 9, Preview: "["},
				Budgets: json.RawMessage(`{"max_steps":3}`), Replay: &trace.ReplayInfo{Of: "run_o", FromStep: 4, Mode: "live"},
				Compaction: &trace.CompactionPolicy{Alias: "small", EverySteps: 3, KeepSteps: 2}, Temperature: &temp, Bindings: map[string]string{"customer_id": "c1"}}},
		{trace.EvStepStarted, `{"steps":3,"input_tokens":4712,"cost_micros":1072192,"elapsed_ms":3100}`,
			&trace.StepStarted{}, &trace.StepStarted{Steps: 3, InputTokens: 4712, CostMicros: 1072192, ElapsedMS: 3100}},
		{trace.EvModelCall, `{"alias":"m","model":"x","delta":[14,16],"prompt_hash":"sha256:f6","prompt_bytes":9630,"no_tools":true,"response":{"model":"x","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":1}},"cost_micros":7,"currency":"INR","cost_known":true,"latency_ms":100,"replayed_from":3,"budget_refused":{"bound":"cost","limit":1,"value":2}}`,
			&trace.ModelCall{}, &trace.ModelCall{Alias: "m", Model: "x", Delta: []int64{14, 16}, PromptHash: "sha256:f6", PromptBytes: 9630, NoTools: true,
				Response:   &model.Response{Model: "x", Content: []model.Part{text("hi")}, StopReason: "end_turn", Usage: model.Usage{InputTokens: 5, OutputTokens: 1}},
				CostMicros: 7, Currency: "INR", CostKnown: true, LatencyMS: 100, ReplayedFrom: 3, BudgetRefused: &trace.Budget{Bound: "cost", Limit: 1, Value: 2}}},
		{trace.EvToolAttempt, `{"call_id":"toolu_03_0","index":0,"tool":"issue_refund","args":{"text":"{}","size":2},"args_hash":"bb","idempotency_key":"run_x:4:0","side_effects":"external","tier":1,"decision":{"allowed":false,"control":"approval","reason":"needs approval","approval":{"group":"sup","expires_ms":86400000,"rule":"policy:p","binding":"3f"},"rule":"policy:p"}}`,
			&trace.ToolAttempt{}, &trace.ToolAttempt{CallID: "toolu_03_0", Tool: "issue_refund", Args: trace.Content{Text: "{}", Size: 2}, ArgsHash: "bb",
				IdempotencyKey: "run_x:4:0", SideEffects: "external", Tier: 1, Decision: trace.Decision{Control: "approval", Reason: "needs approval",
					Approval: &trace.ApprovalNeed{Group: "sup", ExpiresMS: 86400000, Rule: "policy:p", Binding: "3f"}, Rule: "policy:p"}}},
		{trace.EvToolResult, `{"call_id":"c","index":1,"tool":"t","status":"ok","output":{"blob":"aa","size":45000,"preview":"{"},"bytes":45000,"truncated":true,"result_hash":"rh","latency_ms":100,"redactions":2,"replayed":"recorded"}`,
			&trace.ToolResult{}, &trace.ToolResult{CallID: "c", Index: 1, Tool: "t", Status: "ok", Output: trace.Content{Blob: "aa", Size: 45000, Preview: "{"},
				Bytes: 45000, Truncated: true, ResultHash: "rh", LatencyMS: 100, Redactions: 2, Replayed: "recorded"}},
		{trace.EvApprovalReq, `{"approval_id":"apr_r_4_0","call_id":"c","index":0,"tool":"t","args":{"text":"{}","size":2},"args_hash":"h","group":"g","requester":"u","expires_at":"2026-12-02T09:00:03.9Z","description":"Call t","rule":"policy:p"}`,
			&trace.ApprovalRequested{}, &trace.ApprovalRequested{ApprovalID: "apr_r_4_0", CallID: "c", Tool: "t", Args: trace.Content{Text: "{}", Size: 2},
				ArgsHash: "h", Group: "g", Requester: "u", ExpiresAt: time.Date(2026, 12, 2, 9, 0, 3, 900_000_000, time.UTC), Description: "Call t", Rule: "policy:p"}},
		{trace.EvApprovalDec, `{"approval_id":"apr_r_4_0","outcome":"edited","decider":"meera","comment":"c","edited_args":"{\"amount_inr\":9000}","recheck":{"allowed":true,"control":"approval","reason":"edited and approved by meera"}}`,
			&trace.ApprovalDecided{}, &trace.ApprovalDecided{ApprovalID: "apr_r_4_0", Outcome: trace.ApprovalEdited, Decider: "meera", Comment: "c", EditedArgs: &edited,
				Recheck: &trace.Decision{Allowed: true, Control: "approval", Reason: "edited and approved by meera"}}},
		{trace.EvCompaction, `{"note":{"text":"n","size":1},"kept_messages":4,"compacted_messages":2,"identifiers":8,"restored":["txn_1"],"model":"s","input_tokens":382,"output_tokens":52,"cost_micros":1,"cost_known":true,"latency_ms":3}`,
			&trace.Compaction{}, &trace.Compaction{Note: trace.Content{Text: "n", Size: 1}, KeptMessages: 4, CompactedMessages: 2, Identifiers: 8, Restored: []string{"txn_1"},
				Model: "s", InputTokens: 382, OutputTokens: 52, CostMicros: 1, CostKnown: true, LatencyMS: 3}},
		{trace.EvDiverged, `{"step":4,"index":-1,"reason":"the model answered differently"}`,
			&trace.Diverged{}, &trace.Diverged{Step: 4, Index: -1, Reason: "the model answered differently"}},
		{trace.EvBudget, `{"bound":"steps","limit":3,"value":3}`, &trace.Budget{}, &trace.Budget{Bound: "steps", Limit: 3, Value: 3}},
		{trace.EvLoopNote, `{"reason":"repeat","text":"stop"}`, &trace.LoopNote{}, &trace.LoopNote{Reason: "repeat", Text: "stop"}},
		{trace.EvTaint, `{"tool":"get_ticket","call_id":"c","seq":5}`, &trace.Taint{}, &trace.Taint{Tool: "get_ticket", CallID: "c", Seq: 5}},
		{trace.EvSandboxEnd, `{"sandboxes":[{"id":"sb1","executor":"gvisor","by":"caller","reason":"run ended","uses":2}]}`,
			&trace.SandboxTeardowns{}, &trace.SandboxTeardowns{Sandboxes: []trace.SandboxTeardown{{ID: "sb1", Executor: "gvisor", By: "caller", Reason: "run ended", Uses: 2}}}},
		{trace.EvRunFailed, `{"status":"failed","reason":"loop detected"}`, &trace.RunEnded{}, &trace.RunEnded{Status: "failed", Reason: "loop detected"}},
		{trace.EvSignal, `{"kind":"approval","payload":{"approval_id":"a","decision":"edit","args_hash":"h","args":{"x":1},"decider":"d"}}`,
			&trace.Signal{}, &trace.Signal{Kind: "approval", Payload: json.RawMessage(`{"approval_id":"a","decision":"edit","args_hash":"h","args":{"x":1},"decider":"d"}`)}},
	}
	for _, tc := range cases {
		t.Run(tc.typ, func(t *testing.T) {
			dec := json.NewDecoder(strings.NewReader(tc.json))
			dec.DisallowUnknownFields() // every recorded field still has a home
			if err := dec.Decode(tc.into); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(tc.into, tc.want) {
				t.Fatalf("decoded %+v\nwant    %+v", tc.into, tc.want)
			}
		})
	}
}
