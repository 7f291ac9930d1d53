package engine_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestEmbeddedStartSignalCancel: Start is idempotent on the run id, refuses
// another request under the same id and a definition hash that is not the
// stored version's; a replay's instructions reach the loop; Signal takes
// only approvals and messages; Cancel records who and why; a start, a
// message and a cancel reach the workflow in order; Drive of a run with
// nothing to do is ErrNotRunnable; Verify counts the events.
func TestEmbeddedStartSignalCancel(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	spec := []byte(`{"agent":"a"}`)
	if _, err := s.PutAgentVersion(ctx, &store.AgentVersion{Name: "a", Version: 1, Spec: spec, SpecHash: sha256.Sum256(spec)}); err != nil {
		t.Fatal(err)
	}
	var seen []string
	wf := func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		for {
			sigs, err := env.Await(ctx, 1, time.Time{})
			if err != nil {
				return engine.Outcome{}, err
			}
			for _, ev := range sigs {
				var sg trace.Signal
				_ = json.Unmarshal(ev.Payload, &sg)
				seen = append(seen, sg.Kind+" "+string(sg.Payload))
				if sg.Kind == trace.SignalCancel {
					return engine.Outcome{Status: store.StatusCancelled}, nil
				}
			}
		}
	}
	e, err := engine.NewEmbedded(engine.Options{Store: s, Workflow: wf})
	if err != nil {
		t.Fatal(err)
	}
	req := engine.StartRequest{RunID: "run_1", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, AgentHash: sha256.Sum256(spec),
		Task: "x", Mode: "async", Bindings: map[string]string{"customer_id": "c1"}}
	if st, err := e.Start(ctx, req); err != nil || !st.Created || st.RunID != "run_1" {
		t.Fatalf("first start: %+v %v", st, err)
	}
	if st, err := e.Start(ctx, req); err != nil || st.Created {
		t.Fatalf("the same start again: %+v %v, want the run, not created", st, err)
	}
	other := req
	other.Task = "y"
	if _, err := e.Start(ctx, other); !errors.Is(err, engine.ErrStartConflict) {
		t.Fatalf("another request under the same id: %v, want ErrStartConflict", err)
	}
	forged := req
	forged.RunID, forged.AgentHash = "run_2", [32]byte{1}
	if _, err := e.Start(ctx, forged); err == nil || !strings.Contains(err.Error(), "hash") {
		t.Fatalf("a hash that is not the stored version's: %v", err)
	}
	if _, err := s.GetRun(ctx, "run_2"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a refused start stored a run: %v", err)
	}

	rp := req
	rp.RunID, rp.Replay = "run_3", &engine.Replay{Info: trace.ReplayInfo{Of: "run_1", FromStep: 2, Mode: trace.ReplayRecorded}}
	if _, err := e.Start(ctx, rp); err != nil {
		t.Fatal(err)
	}
	info, err := engine.PendingReplay(ctx, s, "run_3")
	if err != nil || info == nil || info.Of != "run_1" || info.FromStep != 2 {
		t.Fatalf("replay instructions: %+v %v", info, err)
	}
	if r, err := s.GetRun(ctx, "run_3"); err != nil || r.ParentRunID != "run_1" {
		t.Fatalf("replay run: %+v %v", r, err)
	}

	for _, kind := range []string{engine.SignalTimer, engine.SignalReplay, trace.SignalCancel, "other"} {
		if err := e.Signal(ctx, "run_1", engine.Signal{Kind: kind, Payload: []byte(`{}`)}); err == nil {
			t.Errorf("Signal took kind %q", kind)
		}
	}
	if err := e.Signal(ctx, "run_1", engine.Signal{Kind: trace.SignalMessage, Payload: []byte(`not json`)}); err == nil {
		t.Error("Signal took a payload that is not JSON")
	}
	if err := e.Drive(ctx, "run_1"); err != nil {
		t.Fatal(err)
	}
	if err := e.Drive(ctx, "run_1"); !errors.Is(err, engine.ErrNotRunnable) {
		t.Fatalf("Drive of a run waiting for nothing: %v, want ErrNotRunnable", err)
	}
	if err := e.Signal(ctx, "run_1", engine.Signal{Kind: trace.SignalMessage, Payload: []byte(`{"text":"hi"}`)}); err != nil {
		t.Fatal(err)
	}
	if err := e.Cancel(ctx, "run_1", engine.Cancel{By: "u", Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	if err := e.Drive(ctx, "run_1"); err != nil {
		t.Fatal(err)
	}
	want := []string{`message {"text":"hi"}`, `cancel {"by":"u","reason":"done"}`}
	if strings.Join(seen, "|") != strings.Join(want, "|") {
		t.Fatalf("the workflow saw %q, want %q", seen, want)
	}
	if r, err := s.GetRun(ctx, "run_1"); err != nil || r.Status != store.StatusCancelled {
		t.Fatalf("run after cancel: %+v %v", r, err)
	}
	seen = nil
	v, err := e.Verify(ctx, "run_1")
	if err != nil || v.Status != store.StatusCancelled || v.Events != 2 {
		t.Fatalf("verify: %+v %v", v, err)
	}
}
