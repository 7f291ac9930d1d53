package golden_test

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/agentplane/agentplane/internal/golden"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestIncrementalPromptHash feeds every golden log to a transcript event by
// event (approvals, an edit, a replay, a compaction, budget and loop stops)
// and checks after each event that the loop's incremental prompt hash
// (Transcript.PromptHash) is byte for byte the hash of the whole request,
// with and without tools, and at each model call the recorded one.
func TestIncrementalPromptHash(t *testing.T) {
	checked := 0
	for _, dir := range fixtureDirs(t) {
		fx, err := golden.Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		load := func(c trace.Content) ([]byte, error) {
			if !c.IsBlob() {
				return []byte(c.Text), nil
			}
			var sum [32]byte
			if b, err := hex.DecodeString(c.Blob); err != nil || len(b) != 32 {
				return nil, fmt.Errorf("bad blob ref %q", c.Blob)
			} else {
				copy(sum[:], b)
			}
			b, ok := fx.Blobs[sum]
			if !ok {
				return nil, fmt.Errorf("blob %s missing", c.Blob)
			}
			return b, nil
		}
		for _, r := range fx.Runs {
			var rs trace.RunStarted
			if err := json.Unmarshal(r.Events[0].Payload, &rs); err != nil {
				t.Fatal(err)
			}
			sys, err := load(rs.System)
			if err != nil {
				t.Fatal(err)
			}
			defsJSON, err := load(rs.ToolDefs)
			if err != nil {
				t.Fatal(err)
			}
			var defs []model.ToolDef
			if err := json.Unmarshal(defsJSON, &defs); err != nil {
				t.Fatal(err)
			}
			tr := trace.NewTranscript(string(sys), defs, load)
			for i := range r.Events {
				ev := &r.Events[i]
				if ev.Type == trace.EvModelCall {
					var mc trace.ModelCall
					if err := json.Unmarshal(ev.Payload, &mc); err != nil {
						t.Fatal(err)
					}
					if h, size := tr.PromptHash(mc.NoTools); h != mc.PromptHash || size != mc.PromptBytes {
						t.Errorf("%s seq %d: incremental hash %s (%d bytes), recorded %s (%d bytes)", r.Row.ID, ev.Seq, h, size, mc.PromptHash, mc.PromptBytes)
					}
					tr.TakeDelta()
				}
				if err := tr.Add(ev); err != nil {
					t.Fatal(err)
				}
				if len(tr.Messages()) == 0 {
					continue
				}
				for _, noTools := range []bool{false, true} {
					h1, s1 := tr.PromptHash(noTools)
					h2, s2 := trace.PromptHash(tr.Request(noTools))
					if h1 != h2 || s1 != s2 {
						t.Fatalf("%s after seq %d (%s), noTools %v: incremental %s (%d bytes), whole %s (%d bytes)", r.Row.ID, ev.Seq, ev.Type, noTools, h1, s1, h2, s2)
					}
					checked++
				}
			}
		}
	}
	if checked < 100 {
		t.Fatalf("only %d prompt states checked", checked)
	}
	// A changed system prompt or tool list is never served from the kept
	// prefix.
	tr := trace.NewTranscript("one", nil, nil)
	if err := tr.Add(&store.Event{RunID: "r", Seq: 1, Type: trace.EvRunStarted, Payload: json.RawMessage(`{"task":"hi"}`)}); err != nil {
		t.Fatal(err)
	}
	h1, _ := tr.PromptHash(false)
	tr.System = "two"
	h2, _ := tr.PromptHash(false)
	tr.Tools = []model.ToolDef{{Name: "x"}}
	h3, _ := tr.PromptHash(false)
	w2, _ := trace.PromptHash(tr.Request(false))
	if h1 == h2 || h2 == h3 || h3 != w2 {
		t.Fatalf("stale prefix: %s %s %s (want %s)", h1, h2, h3, w2)
	}
}
