package engine_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// TestLeaseSurvivesClockStepBack: a worker dies holding a run, then the
// wall clock steps back three hours. Another worker takes the run over one
// lease TTL later, not three hours later, and finishes it without
// re-running recorded effects.
func TestLeaseSurvivesClockStepBack(t *testing.T) {
	ctx := context.Background()
	s := openStore(t, t.TempDir())
	c := &counter{n: 4}
	c.crashAt.Store(2)
	var mu sync.Mutex
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	set := func(t time.Time) { mu.Lock(); now = t; mu.Unlock() }
	const ttl = 10 * time.Second
	e1, err := engine.New(engine.Options{Store: s, Workflow: c.workflow, Activities: c.activities(), Owner: "w1", LeaseTTL: ttl, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.CreateRun(ctx, &store.Run{ID: "r1", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	c.crash = cancel
	if _, err := e1.Execute(cctx, "r1"); err != nil {
		t.Fatal(err)
	}
	if r, _ := s.GetRun(ctx, "r1"); r.Status != store.StatusRunning {
		t.Fatalf("status after crash = %s, want running (the dead worker's lease)", r.Status)
	}

	back := clock().Add(-3 * time.Hour)
	set(back)
	c.crashAt.Store(-1)
	e2, _ := engine.New(engine.Options{Store: s, Workflow: c.workflow, Activities: c.activities(), Owner: "w2", LeaseTTL: ttl, Clock: clock})
	if _, err := e2.Execute(ctx, "r1"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("claim right after the step: err = %v, want ErrNotFound (the lease still has up to a TTL)", err)
	}
	set(back.Add(ttl + time.Millisecond))
	r, err := e2.Execute(ctx, "r1")
	if err != nil {
		t.Fatalf("claim one TTL after the step: %v (the lease held the run for the whole step)", err)
	}
	if r.Status != store.StatusCompleted || r.Result != "60" {
		t.Fatalf("run = %s %q, want completed 60", r.Status, r.Result)
	}
	if got := c.executed.Load(); got != 4 {
		t.Fatalf("effects executed = %d, want 4 (recorded ones must not re-run)", got)
	}
}
