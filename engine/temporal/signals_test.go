package temporal

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// collectSignals waits until it has taken want signals, then records their
// payloads and completes.
func collectSignals(want int) engine.Workflow {
	return func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		var got []string
		for step := 1; len(got) < want; step++ {
			sigs, err := env.Await(ctx, step, time.Time{})
			if err != nil {
				return engine.Outcome{}, err
			}
			for _, ev := range sigs {
				got = append(got, string(ev.Payload))
			}
		}
		if _, err := env.Record(ctx, "collected", 0, engine.Durable, got); err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: "ok"}, nil
	}
}

// TestSignalBeforeWorkflowStarts: a signal stored while the run's row
// exists but its workflow does not (its Start crashed between the two, or
// the signal raced it) finds no workflow to deliver to; the workflow, once
// started, takes it first, then one sent later, each recorded once and in
// order, although the first is also delivered to the running workflow
// late.
func TestSignalBeforeWorkflowStarts(t *testing.T) {
	_, c := devServer(t, client.Options{})
	ctx := context.Background()
	st := tempStore(t)
	e, err := New(Options{Client: c, TaskQueue: "early", Store: st, Workflow: collectSignals(2), Activities: countActivities(t), Poll: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const id = "early-signal"
	if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	first := json.RawMessage(`{"n":1}`)
	if err := e.Signal(ctx, id, engine.Signal{Kind: "message", Payload: first}); err != nil {
		t.Fatalf("signal a run whose workflow has not started: %v", err)
	}
	pending, err := st.PendingSignals(ctx, id)
	if err != nil || len(pending) != 1 {
		t.Fatalf("pending signals before the start: %v %v", pending, err)
	}
	if err := e.launch(ctx, id); err != nil {
		t.Fatal(err)
	}
	work := func() {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := e.Work(wctx, engine.WorkOptions{UntilIdle: true}); err != nil || wctx.Err() != nil {
			t.Fatalf("work: %v %v", err, wctx.Err())
		}
	}
	work()
	if r, err := st.GetRun(ctx, id); err != nil || r.Status != store.StatusWaiting {
		t.Fatalf("after the early signal the run is %+v (%v), want waiting for the second", r, err)
	}
	// The same stored signal reaches the running workflow late (a Signal
	// whose delivery raced the start): it is not taken twice.
	if err := e.deliver(ctx, id, pending[0]); err != nil {
		t.Fatal(err)
	}
	if err := e.Signal(ctx, id, engine.Signal{Kind: "message", Payload: json.RawMessage(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	work()
	r, err := st.GetRun(ctx, id)
	if err != nil || r.Status != store.StatusCompleted {
		t.Fatalf("run: %+v %v", r, err)
	}
	evs, err := st.Events(ctx, id, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var signals int
	var collected []string
	for _, ev := range evs {
		switch ev.Type {
		case "signal":
			signals++
		case "collected":
			if err := json.Unmarshal(ev.Payload, &collected); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := []string{string(engine.SignalEventPayload("message", first)), string(engine.SignalEventPayload("message", json.RawMessage(`{"n":2}`)))}
	if signals != 2 || len(collected) != 2 || collected[0] != want[0] || collected[1] != want[1] {
		t.Fatalf("log: %d signal events, collected %q; want the two signals once each, the early one first: %q", signals, collected, want)
	}
	if left, err := st.PendingSignals(ctx, id); err != nil || len(left) != 0 {
		t.Fatalf("signals left pending: %v %v", left, err)
	}
}

// TestStartThatStoppedIsLaunched: a Start that stored the run and stopped
// before its workflow was started (a crash between the two) leaves a queued
// run nothing would ever signal; the workers' reconciliation starts its
// workflow, and the run completes.
func TestStartThatStoppedIsLaunched(t *testing.T) {
	_, c := devServer(t, client.Options{})
	ctx := context.Background()
	st := tempStore(t)
	e, err := New(Options{Client: c, TaskQueue: "stopped-start", Store: st, Workflow: collectSignals(0), Activities: countActivities(t),
		Poll: 20 * time.Millisecond, Reconcile: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	const id = "stopped-start"
	if err := st.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := e.Work(wctx, engine.WorkOptions{UntilIdle: true}); err != nil || wctx.Err() != nil {
		t.Fatalf("work: %v %v", err, wctx.Err())
	}
	if r, err := st.GetRun(ctx, id); err != nil || r.Status != store.StatusCompleted {
		t.Fatalf("run after the workers' reconciliation: %+v %v, want completed", r, err)
	}
}
