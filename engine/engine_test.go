package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
)

func openStore(t *testing.T, dir string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// counter is a workflow with n effects, each an activity; it counts real
// executions and can be told to crash (cancel its worker) inside effect k,
// before the effect happens.
type counter struct {
	n        int
	executed atomic.Int64
	crashAt  atomic.Int64 // effect index to crash in; -1 never
	crash    context.CancelFunc
}

func (c *counter) effect(ctx context.Context, i int) (int, error) {
	if int64(i) == c.crashAt.Load() {
		c.crash() // the process dies: nothing after this point runs
		return 0, ctx.Err()
	}
	c.executed.Add(1)
	return i * 10, nil
}

func (c *counter) activities() *engine.Activities {
	acts, err := engine.NewActivities(engine.NewActivity("effect", c.effect))
	if err != nil {
		panic(err)
	}
	return acts
}

func (c *counter) workflow(ctx context.Context, env engine.Env) (engine.Outcome, error) {
	sum := 0
	for i := 0; i < c.n; i++ {
		ev, err := env.Execute(ctx, engine.Call{Activity: "effect", Event: "effect", Step: i, Durability: engine.Durable, Input: i})
		if err != nil {
			return engine.Outcome{}, err
		}
		var v int
		if err := json.Unmarshal(ev.Payload, &v); err != nil {
			return engine.Outcome{}, err
		}
		sum += v
	}
	if _, err := env.Record(ctx, "done", c.n, engine.Durable, sum); err != nil {
		return engine.Outcome{}, err
	}
	return engine.Outcome{Status: store.StatusCompleted, Result: fmt.Sprint(sum)}, nil
}

func TestResumeReplaysRecordedEffects(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	c := &counter{n: 6}
	c.crashAt.Store(3)
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	e1, err := engine.New(engine.Options{Store: s, Workflow: c.workflow, Activities: c.activities(), Owner: "w1", LeaseTTL: time.Second, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRun(ctx, &store.Run{ID: "r1", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	// The first worker "crashes" before effect 3: it returns without
	// releasing, as a killed process would, leaving its lease in place.
	cctx, cancel := context.WithCancel(ctx)
	c.crash = cancel
	if _, err := e1.Execute(cctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if got := c.executed.Load(); got != 3 {
		t.Fatalf("executed %d effects before the crash, want 3", got)
	}
	r, _ := s.GetRun(ctx, "r1")
	if r.Status != store.StatusRunning {
		t.Fatalf("status after crash = %s, want running (lease still held)", r.Status)
	}
	// Another worker cannot take it before the lease expires ...
	c.crashAt.Store(-1)
	e2, _ := engine.New(engine.Options{Store: s, Workflow: c.workflow, Activities: c.activities(), Owner: "w2", LeaseTTL: time.Second, Clock: clock})
	if _, err := e2.Execute(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim under a live lease: err = %v, want ErrNotFound", err)
	}
	// ... and takes it over after.
	now = now.Add(2 * time.Second)
	r, err = e2.Execute(ctx, "r1")
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != store.StatusCompleted || r.Result != "150" {
		t.Fatalf("run = %s %q, want completed 150", r.Status, r.Result)
	}
	if got := c.executed.Load(); got != 6 {
		t.Fatalf("effects executed in total = %d, want 6 (recorded ones must not re-run)", got)
	}
	evs, _ := s.Events(ctx, "r1", 0, 0)
	if len(evs) != 7 {
		t.Fatalf("events = %d, want 7", len(evs))
	}
	// Verify re-runs the workflow over the log without executing anything.
	out, n, err := e2.Verify(ctx, "r1")
	if err != nil || n != 7 || out.Result != "150" {
		t.Fatalf("verify = %v %d %v", out, n, err)
	}
	if got := c.executed.Load(); got != 6 {
		t.Fatalf("verify executed effects: %d", got)
	}
}

func TestNondeterminismDetected(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	c := &counter{n: 3}
	c.crashAt.Store(-1)
	e, _ := engine.New(engine.Options{Store: s, Workflow: c.workflow, Activities: c.activities(), Owner: "w"})
	s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"})
	if _, err := e.Execute(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	changed := func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		_, err := env.Record(ctx, "something-else", 0, engine.Buffered, 1)
		return engine.Outcome{}, err
	}
	e2, _ := engine.New(engine.Options{Store: s, Workflow: changed, Owner: "w"})
	if _, _, err := e2.Verify(ctx, "r"); !errors.Is(err, engine.ErrNondeterminism) {
		t.Fatalf("err = %v, want ErrNondeterminism", err)
	}
}

func TestStaleWorkerIsFencedOut(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, dir)
	s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"})
	now := time.Unix(1_800_000_000, 0)
	old, err := s.ClaimRunByID(ctx, "r", "old", time.Second, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ClaimRunByID(ctx, "r", "new", time.Second, now.Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	ev := store.Event{RunID: "r", Seq: 1, Type: "x", At: now, Payload: []byte("{}")}
	ev.Hash = store.ChainHash(ev.PrevHash, &ev)
	err = s.Append(ctx, store.AppendRequest{RunID: "r", Epoch: old.LeaseEpoch, Events: []store.Event{ev}, Durable: true})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("stale append: err = %v, want ErrLeaseLost", err)
	}
}

func TestAwaitParksUntilSignal(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	wf := func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		sigs, err := env.Await(ctx, 0, time.Time{})
		if err != nil {
			return engine.Outcome{}, err
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: string(sigs[0].Payload)}, nil
	}
	e, _ := engine.New(engine.Options{Store: s, Workflow: wf, Owner: "w"})
	s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"})
	r, err := e.Execute(ctx, "r")
	if err != nil || r.Status != store.StatusWaiting {
		t.Fatalf("run = %+v, %v; want waiting", r, err)
	}
	if _, err := e.Execute(ctx, "r"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a waiting run with no signal must not be claimable: %v", err)
	}
	if err := s.SendSignal(ctx, &store.Signal{RunID: "r", Kind: "message", Payload: []byte(`{"text":"hi"}`)}); err != nil {
		t.Fatal(err)
	}
	r, err = e.Execute(ctx, "r")
	if err != nil || r.Status != store.StatusCompleted {
		t.Fatalf("after signal: %+v %v", r, err)
	}
	if p, _ := s.PendingSignals(ctx, "r"); len(p) != 0 {
		t.Fatalf("signal not consumed: %d pending", len(p))
	}
}
