package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
)

// TestTimerFiresOnce: a run waits for a decision with a deadline (an
// approval that expires). Once the deadline has passed, workers of two
// processes (two handles on one database) race to run it: one claims it,
// the expiry is recorded once in the log and its effect runs once.
func TestTimerFiresOnce(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dir := t.TempDir()
		testTimerFiresOnce(t, openStore(t, dir), openStore(t, dir))
	})
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		open := func() store.Store {
			s, err := postgres.Open(context.Background(), postgres.Options{DSN: dsn, Blobs: pgtest.Blobs(t)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			return s
		}
		testTimerFiresOnce(t, open(), open())
	})
}

func testTimerFiresOnce(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	t0 := time.Unix(1_800_000_000, 0).UTC()
	deadline := t0.Add(time.Minute)
	var now atomic.Int64
	now.Store(t0.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()).UTC() }
	var expired atomic.Int64
	acts, err := engine.NewActivities(engine.NewActivity("expire", func(context.Context, int) (int, error) {
		expired.Add(1)
		return 0, nil
	}))
	if err != nil {
		t.Fatal(err)
	}
	wf := func(ctx context.Context, env engine.Env) (engine.Outcome, error) {
		sigs, err := env.Await(ctx, 1, deadline)
		if err != nil {
			return engine.Outcome{}, err
		}
		var sg struct{ Kind string }
		if err := json.Unmarshal(sigs[0].Payload, &sg); err != nil {
			return engine.Outcome{}, err
		}
		if sg.Kind == engine.SignalTimer {
			if _, err := env.Execute(ctx, engine.Call{Activity: "expire", Event: "expired", Step: 1, Durability: engine.Durable, Input: 1}); err != nil {
				return engine.Outcome{}, err
			}
		}
		return engine.Outcome{Status: store.StatusCompleted, Result: sg.Kind}, nil
	}
	if err := a.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async",
		Status: store.StatusQueued, CreatedAt: t0, UpdatedAt: t0}); err != nil {
		t.Fatal(err)
	}
	workers := make([]*engine.Worker, 8)
	for i := range workers {
		s := a
		if i%2 == 1 {
			s = b
		}
		w, err := engine.New(engine.Options{Store: s, Workflow: wf, Activities: acts, Owner: fmt.Sprintf("w%d", i), LeaseTTL: time.Minute, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		workers[i] = w
	}
	if r, err := workers[0].Execute(ctx, "r"); err != nil || r.Status != store.StatusWaiting || !r.WakeAt.Equal(deadline) {
		t.Fatalf("before the deadline: %+v, %v; want waiting until %v", r, err, deadline)
	}
	now.Store(deadline.Add(time.Second).UnixNano())
	var wg sync.WaitGroup
	var ran atomic.Int64
	start := make(chan struct{})
	for _, w := range workers {
		wg.Go(func() {
			<-start
			r, err := w.Execute(ctx, "r")
			switch {
			case errors.Is(err, store.ErrNotFound):
			case err != nil:
				t.Errorf("worker %s: %v", w.Owner(), err)
			case r.Status != store.StatusCompleted:
				t.Errorf("worker %s left the run %s", w.Owner(), r.Status)
			default:
				ran.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	if ran.Load() != 1 || expired.Load() != 1 {
		t.Fatalf("%d workers ran the due run and the expiry took effect %d times, want 1 and 1", ran.Load(), expired.Load())
	}
	evs, err := b.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	timers := 0
	for _, ev := range evs {
		var sg struct{ Kind string }
		if ev.Type == "signal" && json.Unmarshal(ev.Payload, &sg) == nil && sg.Kind == engine.SignalTimer {
			timers++
		}
	}
	if timers != 1 {
		t.Fatalf("the log records the expiry %d times, want once: %d events", timers, len(evs))
	}
}
