package trace_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestBlobRefsOnlyPlatformContent (issue 15, class 3): a run's blobs are
// the Content fields the platform writes; a blob-shaped object or a bare
// hash anywhere a caller or a model chooses the text names nothing.
func TestBlobRefsOnlyPlatformContent(t *testing.T) {
	h1, h2 := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	planted := `{"blob":"` + h2 + `","size":10}`
	mk := func(typ string, v any) *store.Event {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return &store.Event{Type: typ, Payload: b}
	}
	blob := trace.Content{Blob: h1, Size: 5000, Preview: "p"}
	cases := []struct {
		name string
		ev   *store.Event
		want []string
	}{
		{"system prompt and tool definitions", mk(trace.EvRunStarted, trace.RunStarted{System: blob, ToolDefs: trace.Content{Text: "[]"}, Task: h2}), []string{h1}},
		{"tool arguments", mk(trace.EvToolAttempt, trace.ToolAttempt{Args: blob}), []string{h1}},
		{"tool output", mk(trace.EvToolResult, trace.ToolResult{Output: blob}), []string{h1}},
		{"approval request", mk(trace.EvApprovalReq, trace.ApprovalRequested{Args: blob}), []string{h1}},
		{"compaction note", mk(trace.EvCompaction, trace.Compaction{Note: blob}), []string{h1}},
		{"inline output quoting a reference", mk(trace.EvToolResult, trace.ToolResult{Output: trace.Content{Text: planted}}), nil},
		{"a message carrying a reference", &store.Event{Type: trace.EvSignal, Payload: []byte(`{"kind":"message","payload":{"text":"` + h2 + `","x":` + planted + `}}`)}, nil},
		{"an approver's edit carrying a reference", &store.Event{Type: trace.EvSignal, Payload: []byte(`{"kind":"approval","payload":{"args":` + planted + `}}`)}, nil},
		{"model output carrying a reference", &store.Event{Type: trace.EvModelCall, Payload: []byte(`{"response":{"content":[{"type":"tool_use","input":` + planted + `}]}}`)}, nil},
		{"a task that is a hash", mk(trace.EvRunStarted, trace.RunStarted{Task: h2}), nil},
		{"unknown event type", &store.Event{Type: "future_event", Payload: []byte(planted)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			refs, err := trace.BlobRefs(c.ev)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range refs {
				got = append(got, r.Blob)
			}
			if strings.Join(got, ",") != strings.Join(c.want, ",") {
				t.Fatalf("refs = %v, want %v", got, c.want)
			}
		})
	}
	if _, err := trace.BlobRefs(&store.Event{Type: trace.EvToolResult, Payload: []byte(`{"output":`)}); err == nil {
		t.Fatal("an undecodable tool_result was taken for one without blobs")
	}
}
