package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestEverythingGoesThroughTheEngine runs the API and the use cases over a
// recording Engine wrapping the embedded one: every start (a run, a
// replay), every signal (an approval decision, a message) and every cancel
// reaches the engine interface, and the engine's store refuses a run or a
// signal written outside an engine call. Afterwards every run in the store
// and every signal in every log is one the recorder saw (or the engine's
// own: a timer, a replay's instructions), so nothing reached the store by
// another way.
func TestEverythingGoesThroughTheEngine(t *testing.T) {
	rec := &recordingEngine{}
	guard := &guardStore{}
	f := newFixture(t, fixtureOptions{platform: func(o *platform.Options) {
		o.WrapStore = func(s store.Store) store.Store { guard.Store = s; return guard }
		o.WrapEngine = func(e engine.Engine) engine.Engine { rec.Engine = e; return rec }
	}})
	ctx := context.Background()

	// A run through its two approvals, with a message on the way.
	a := f.startAsync(priya)
	ap := f.waitPending(priya, a, "issue_refund")
	if r := f.do(priya, "POST", "/v1/runs/"+a+"/messages", map[string]any{"text": "The customer called again."}); r.status != http.StatusAccepted {
		t.Fatalf("message: %s", r)
	}
	f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
	email := f.waitPending(priya, a, "send_email")
	f.decide(meera, email.ID, map[string]any{"decision": "approve"})
	f.waitStatus(priya, a, store.StatusCompleted)

	// A run cancelled while it waits.
	b := f.startAsync(priya)
	f.waitPending(priya, b, "issue_refund")
	if r := f.do(priya, "POST", "/v1/runs/"+b+":cancel", map[string]any{"reason": "withdrawn"}); r.status != http.StatusAccepted {
		t.Fatalf("cancel: %s", r)
	}
	f.waitStatus(priya, b, store.StatusCancelled)

	// A replay of the first run.
	replay := f.replayCompleted(priya, a, 1)

	// The use cases called directly (as the CLI and evals do) go the same way.
	c, err := f.p.Runs.Start(ctx, runs.StartRequest{Agent: demoAgent, Task: demoTask, Tenant: bankTenant, User: priya, Mode: "async"})
	if err != nil {
		t.Fatal(err)
	}
	f.waitPending(priya, c.ID, "issue_refund")
	if _, err := f.p.Runs.Message(ctx, runs.MessageRequest{RunID: c.ID, Text: "one more thing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Runs.Cancel(ctx, runs.CancelRequest{RunID: c.ID, By: priya}); err != nil {
		t.Fatal(err)
	}
	f.waitStatus(priya, c.ID, store.StatusCancelled)

	calls := rec.snapshot()
	want := map[string]int{"start": 4, "signal approval": 2, "signal message": 2, "cancel": 2}
	got := map[string]int{}
	for _, c := range calls {
		got[c.op]++
	}
	for op, n := range want {
		if got[op] != n {
			t.Errorf("engine saw %d %s, want %d (all: %v)", got[op], op, n, got)
		}
	}
	if !hasCall(calls, "start", replay, "replay of "+a) {
		t.Errorf("the replay did not start through the engine as a replay of %s: %+v", a, calls)
	}
	if n := guard.writes(); n < len(calls) {
		t.Errorf("the engine's store saw %d writes for %d engine calls", n, len(calls))
	}
	if errs := guard.refused(); len(errs) > 0 {
		t.Errorf("writes outside an engine call reached the store: %v", errs)
	}

	// Every run and every signal in the store came through the recorder.
	all, err := f.p.Store.ListRuns(ctx, store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != 4 {
		t.Fatalf("%d runs in the store, want 4", len(all))
	}
	for _, run := range all {
		if !hasCall(calls, "start", run.ID, "") {
			t.Errorf("run %s is in the store but never started through the engine", run.ID)
		}
		evs, err := f.p.Store.Events(ctx, run.ID, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Type != trace.EvSignal {
				continue
			}
			var sg trace.Signal
			if err := json.Unmarshal(ev.Payload, &sg); err != nil {
				t.Fatal(err)
			}
			switch sg.Kind {
			case engine.SignalTimer, engine.SignalReplay:
				continue // the engine's own
			case trace.SignalCancel:
				if !hasCall(calls, "cancel", run.ID, "") {
					t.Errorf("run %s seq %d: a cancel that never went through the engine", run.ID, ev.Seq)
				}
			default:
				if !hasCall(calls, "signal "+sg.Kind, run.ID, string(sg.Payload)) {
					t.Errorf("run %s seq %d: a %s signal that never went through the engine: %s", run.ID, ev.Seq, sg.Kind, sg.Payload)
				}
			}
		}
	}

	// The guard is live: a start that bypasses the engine interface's
	// caller (straight into the embedded engine, outside any recorded
	// call) is refused by the store.
	before := len(guard.refused())
	_, err = f.p.Embedded.Start(ctx, engine.StartRequest{RunID: "run_bypass", Tenant: bankTenant, User: priya,
		Agent: all[0].Agent, AgentVersion: all[0].AgentVersion, AgentHash: hashOf(t, f, all[0]), Task: "x", Mode: "async"})
	if err == nil || len(guard.refused()) != before+1 {
		t.Fatalf("a start outside an engine call was not refused: %v", err)
	}
}

func hashOf(t *testing.T, f *fixture, r *store.Run) [32]byte {
	t.Helper()
	d, err := f.p.Registry.Get(context.Background(), r.Agent, r.AgentVersion)
	if err != nil {
		t.Fatal(err)
	}
	return d.Hash()
}

// call is one call the recording engine saw.
type call struct {
	op, runID, detail string
}

func hasCall(calls []call, op, runID, detail string) bool {
	for _, c := range calls {
		if c.op == op && c.runID == runID && (detail == "" || c.detail == detail) {
			return true
		}
	}
	return false
}

// viaEngine marks the context of a call made through the recording engine.
type viaEngine struct{}

// recordingEngine records every start, signal and cancel, and marks the
// context of the inner call so that guardStore lets its writes through.
type recordingEngine struct {
	engine.Engine
	mu    sync.Mutex
	calls []call
}

func (r *recordingEngine) record(ctx context.Context, c call) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
	return context.WithValue(ctx, viaEngine{}, true)
}

func (r *recordingEngine) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

func (r *recordingEngine) Start(ctx context.Context, req engine.StartRequest) (engine.Started, error) {
	detail := ""
	if req.Replay != nil {
		detail = "replay of " + req.Replay.Info.Of
	}
	return r.Engine.Start(r.record(ctx, call{"start", req.RunID, detail}), req)
}

func (r *recordingEngine) Signal(ctx context.Context, runID string, s engine.Signal) error {
	return r.Engine.Signal(r.record(ctx, call{"signal " + s.Kind, runID, string(s.Payload)}), runID, s)
}

func (r *recordingEngine) Cancel(ctx context.Context, runID string, c engine.Cancel) error {
	return r.Engine.Cancel(r.record(ctx, call{"cancel", runID, c.Reason}), runID, c)
}

// guardStore is the embedded engine's store: it refuses CreateRun and
// SendSignal outside a call through the recording engine (the worker's
// own timer signals aside).
type guardStore struct {
	store.Store
	mu     sync.Mutex
	n      int
	denied []error
}

func (g *guardStore) check(ctx context.Context, what string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ctx.Value(viaEngine{}) != true {
		err := fmt.Errorf("%s outside an engine call", what)
		g.denied = append(g.denied, err)
		return err
	}
	g.n++
	return nil
}

func (g *guardStore) writes() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n
}

func (g *guardStore) refused() []error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]error(nil), g.denied...)
}

func (g *guardStore) CreateRun(ctx context.Context, r *store.Run) error {
	if err := g.check(ctx, "create run "+r.ID); err != nil {
		return err
	}
	return g.Store.CreateRun(ctx, r)
}

func (g *guardStore) SendSignal(ctx context.Context, s *store.Signal) error {
	if s.Kind != engine.SignalTimer {
		if err := g.check(ctx, "signal "+s.Kind+" to "+s.RunID); err != nil {
			return err
		}
	}
	return g.Store.SendSignal(ctx, s)
}
