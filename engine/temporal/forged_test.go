package temporal

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// TestForgedSignalRefused: a Temporal signal sent around agentplane
// (straight to the workflow, as anyone who may signal workflows in the
// namespace could) is not recorded: the append that would record it finds
// no such pending signal, the run fails closed, and its log holds no
// signal; a signal sent through the engine, with its payload altered in
// flight, is refused the same way.
func TestForgedSignalRefused(t *testing.T) {
	_, c := devServer(t, client.Options{})
	ctx := context.Background()
	st := tempStore(t)
	e, err := New(Options{Client: c, TaskQueue: "forged", Store: st, Workflow: approvalSteps(false), Activities: countActivities(t), Poll: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	work := func() {
		wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		if err := e.Work(wctx, engine.WorkOptions{UntilIdle: true}); err != nil || wctx.Err() != nil {
			t.Fatalf("work: %v %v", err, wctx.Err())
		}
	}
	approve, _ := json.Marshal(map[string]string{"decision": "approve"})
	for _, tc := range []struct {
		id   string
		send func(id string) error
	}{
		{"no-such-signal", func(id string) error {
			return c.SignalWorkflow(ctx, id, "", SignalName, sigMsg{ID: 4242, Kind: "approval", Payload: approve})
		}},
		{"altered-payload", func(id string) error {
			sg, err := engine.StoreSignal(ctx, st, id, engine.Signal{Kind: "approval", Payload: []byte(`{"decision":"reject"}`)}, time.Now())
			if err != nil {
				return err
			}
			return c.SignalWorkflow(ctx, id, "", SignalName, sigMsg{ID: sg.ID, Kind: sg.Kind, Payload: approve})
		}},
	} {
		if err := st.CreateRun(ctx, &store.Run{ID: tc.id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
			t.Fatal(err)
		}
		if err := e.launch(ctx, tc.id); err != nil {
			t.Fatal(err)
		}
		work()
		if r, _ := st.GetRun(ctx, tc.id); r.Status != store.StatusWaiting {
			t.Fatalf("%s: %s, want waiting for the approval", tc.id, r.Status)
		}
		if err := tc.send(tc.id); err != nil {
			t.Fatal(err)
		}
		// Nothing in the store says the run has something to do (no
		// pending signal of its own): work until it ends, bounded.
		r := workUntilEnded(t, e, st, tc.id)
		if r.Status != store.StatusFailed || !strings.Contains(r.Result, "not a pending signal agentplane stored") {
			t.Fatalf("%s: run = %s %q, want failed refusing the signal", tc.id, r.Status, r.Result)
		}
		evs, err := st.Events(ctx, tc.id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type == "signal" {
				t.Fatalf("%s: the forged signal was recorded: %s", tc.id, ev.Payload)
			}
		}
	}
}

// workUntilEnded runs e's workers until run id ends (bounded).
func workUntilEnded(t *testing.T, e *Engine, st store.Store, id string) *store.Run {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- e.Work(ctx, engine.WorkOptions{}) }()
	defer func() { cancel(); <-done }()
	for {
		r, err := st.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if store.Terminal(r.Status) {
			return r
		}
		select {
		case <-ctx.Done():
			t.Fatalf("run %s did not end within 2 minutes: %s", id, r.Status)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
