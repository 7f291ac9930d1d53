package trace_test

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// logBuilder appends chained events to a memSource the way the engine does.
type logBuilder struct {
	t    *testing.T
	src  *memSource
	tr   *trace.Transcript
	head [32]byte
	seq  int64
	at   time.Time
}

func (b *logBuilder) add(typ string, step int, payload any) *store.Event {
	b.t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		b.t.Fatal(err)
	}
	b.seq++
	b.at = b.at.Add(100 * time.Millisecond)
	ev := store.Event{RunID: "r1", Seq: b.seq, Type: typ, Step: step, At: b.at, Payload: p, PrevHash: b.head}
	ev.Hash = store.ChainHash(b.head, &ev)
	b.head = ev.Hash
	b.src.events = append(b.src.events, ev)
	if b.tr != nil {
		if err := b.tr.Add(&b.src.events[len(b.src.events)-1]); err != nil {
			b.t.Fatal(err)
		}
	}
	return &b.src.events[len(b.src.events)-1]
}

// modelCall records a model call whose prompt hash is that of the
// transcript so far, as the loop records it.
func (b *logBuilder) modelCall(step int, resp *model.Response) {
	req := b.tr.Request(false)
	h, size := trace.PromptHash(req)
	b.add(trace.EvModelCall, step, trace.ModelCall{Alias: "m", Delta: b.tr.TakeDelta(), PromptHash: h, PromptBytes: size, Response: resp})
}

// buildLog writes a small, valid run: run_started (tool definitions in a
// blob), one tool call whose large result is a blob, a final answer.
func buildLog(t *testing.T) (*memSource, map[string]int64) {
	t.Helper()
	ctx := context.Background()
	src := newMem()
	b := &logBuilder{t: t, src: src, at: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
	defs := []model.ToolDef{{Name: "echo", Description: strings.Repeat("Echoes. ", 10), InputSchema: json.RawMessage(`{"type":"object"}`)}}
	defsJSON, _ := json.Marshal(defs)
	sys, _ := trace.MakeContent(ctx, src, []byte("You are a test agent."), 64, 16)
	td, _ := trace.MakeContent(ctx, src, defsJSON, 64, 16)
	if !td.IsBlob() || sys.IsBlob() {
		t.Fatal("want inline instructions and tool definitions in a blob")
	}
	b.tr = trace.NewTranscript("You are a test agent.", defs, func(c trace.Content) ([]byte, error) { return trace.Load(ctx, src, c) })
	seqs := map[string]int64{}
	seqs["run_started"] = b.add(trace.EvRunStarted, 0, trace.RunStarted{Agent: "a", AgentVersion: 1, Task: "echo a lot", System: sys, ToolDefs: td}).Seq
	b.add(trace.EvStepStarted, 1, trace.StepStarted{})
	use := model.Part{Type: model.PartToolUse, ToolUseID: "tu1", Name: "echo", Input: json.RawMessage(`{"text":"x"}`)}
	b.modelCall(1, &model.Response{Content: []model.Part{use}, StopReason: model.StopToolUse})
	seqs["model_call_1"] = b.seq
	b.add(trace.EvToolAttempt, 1, trace.ToolAttempt{CallID: "tu1", Tool: "echo", Args: trace.Content{Text: `{"text":"x"}`, Size: 12}, Decision: trace.Decision{Allowed: true}})
	out, _ := trace.MakeContent(ctx, src, []byte(strings.Repeat("x", 200)), 64, 16)
	seqs["tool_result"] = b.add(trace.EvToolResult, 1, trace.ToolResult{CallID: "tu1", Tool: "echo", Status: trace.StatusOK, Output: out, Bytes: 200}).Seq
	b.add(trace.EvStepStarted, 2, trace.StepStarted{Steps: 1})
	b.modelCall(2, &model.Response{Content: []model.Part{text("done")}, StopReason: model.StopEndTurn})
	seqs["model_call_2"] = b.seq
	seqs["run_completed"] = b.add(trace.EvRunCompleted, 2, trace.RunEnded{Status: store.StatusCompleted, Result: "done"}).Seq
	return src, seqs
}

func blobOf(t *testing.T, src *memSource, seq int64) [32]byte {
	t.Helper()
	refs, err := trace.BlobRefs(&src.events[seq-1])
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 1 {
		t.Fatalf("seq %d references %d blobs", seq, len(refs))
	}
	sum, err := refs[0].Sum()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestVerify(t *testing.T) {
	ctx := context.Background()
	src, seqs := buildLog(t)
	rep, err := trace.Verify(ctx, src, "r1")
	if err != nil || !rep.OK() {
		t.Fatalf("a valid log does not verify: %+v %v", rep, err)
	}
	if rep.Events != len(src.events) || rep.Blobs != 2 || rep.Prompts != 2 || rep.HeadHash != hex.EncodeToString(src.events[len(src.events)-1].Hash[:]) {
		t.Fatalf("report %+v", rep)
	}

	cases := []struct {
		name   string
		tamper func(t *testing.T, src *memSource)
		seq    int64 // where the problem is reported (-1: anywhere)
		want   string
	}{
		{"payload byte flipped", func(t *testing.T, src *memSource) {
			p := src.events[seqs["run_completed"]-1].Payload
			p[strings.Index(string(p), "done")] = 'D'
		}, seqs["run_completed"], "tampered"},
		{"event type changed", func(t *testing.T, src *memSource) {
			src.events[seqs["run_completed"]-1].Type = trace.EvRunFailed
		}, seqs["run_completed"], "tampered"},
		{"event time changed", func(t *testing.T, src *memSource) {
			src.events[2].At = src.events[2].At.Add(time.Microsecond)
		}, 3, "tampered"},
		{"event deleted", func(t *testing.T, src *memSource) {
			src.events = append(src.events[:3], src.events[4:]...)
		}, 5, "sequence gap"},
		{"hash rewritten to match edited content", func(t *testing.T, src *memSource) {
			ev := &src.events[1]
			ev.Payload = []byte(`{"steps":9}`)
			ev.Hash = store.ChainHash(ev.PrevHash, ev)
		}, 3, "previous-hash link broken"},
		{"blob byte flipped", func(t *testing.T, src *memSource) {
			sum := blobOf(t, src, seqs["tool_result"])
			src.blobs[sum][10] ^= 1
		}, seqs["tool_result"], "content does not match its hash"},
		{"blob missing", func(t *testing.T, src *memSource) {
			delete(src.blobs, blobOf(t, src, seqs["tool_result"]))
		}, seqs["tool_result"], "not found"},
		{"tool definitions blob missing", func(t *testing.T, src *memSource) {
			delete(src.blobs, blobOf(t, src, seqs["run_started"]))
		}, -1, "tool definitions"},
		{"prompt hash not the rebuilt prompt's", func(t *testing.T, src *memSource) {
			// Re-chain the whole log so only the prompt hash is wrong.
			ev := &src.events[seqs["model_call_2"]-1]
			var mc trace.ModelCall
			_ = json.Unmarshal(ev.Payload, &mc)
			mc.PromptHash = "sha256:" + strings.Repeat("0", 64)
			ev.Payload, _ = json.Marshal(mc)
			rechain(src)
		}, seqs["model_call_2"], "rebuilt prompt does not match"},
		{"log does not start with run_started", func(t *testing.T, src *memSource) {
			src.events[0].Type = trace.EvStepStarted
			rechain(src)
		}, 0, "log does not start with run_started"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			src, _ := buildLog(t)
			tc.tamper(t, src)
			rep, err := trace.Verify(ctx, src, "r1")
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatal("tampering went undetected")
			}
			for _, p := range rep.Problems {
				if (tc.seq < 0 || p.Seq == tc.seq) && strings.Contains(p.Detail, tc.want) {
					return
				}
			}
			t.Fatalf("problems %+v do not report %q at seq %d", rep.Problems, tc.want, tc.seq)
		})
	}

	t.Run("no events", func(t *testing.T) {
		if _, err := trace.Verify(ctx, newMem(), "nobody"); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("Verify of a run without events: %v", err)
		}
	})
}

// rechain recomputes every hash, as a forger with write access would.
func rechain(src *memSource) {
	var prev [32]byte
	for i := range src.events {
		src.events[i].PrevHash = prev
		src.events[i].Hash = store.ChainHash(prev, &src.events[i])
		prev = src.events[i].Hash
	}
}

func TestPromptsRebuildEveryRequestInOrder(t *testing.T) {
	ctx := context.Background()
	src, seqs := buildLog(t)
	var got []int64
	var last *model.Request
	err := trace.Prompts(ctx, src, src.events, func(ev *store.Event, mc *trace.ModelCall, req *model.Request) error {
		got = append(got, ev.Seq)
		if h, _ := trace.PromptHash(req); h != mc.PromptHash {
			t.Errorf("seq %d: rebuilt prompt hash differs", ev.Seq)
		}
		last = req
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != seqs["model_call_1"] || got[1] != seqs["model_call_2"] {
		t.Fatalf("Prompts visited %v", got)
	}
	// The second prompt holds the task, the call and its whole blob result.
	if len(last.Messages) != 3 || last.Messages[2].Content[0].Text != strings.Repeat("x", 200) || len(last.Tools) != 1 {
		t.Fatalf("second prompt %+v", last)
	}
	stop := errors.New("stop")
	if err := trace.Prompts(ctx, src, src.events, func(*store.Event, *trace.ModelCall, *model.Request) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("Prompts did not return fn's error: %v", err)
	}
	if err := trace.Prompts(ctx, src, nil, nil); err == nil {
		t.Fatal("Prompts accepted an empty log")
	}
}
