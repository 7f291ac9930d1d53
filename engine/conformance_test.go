package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/engine/enginetest"
	"github.com/agentplane/agentplane/store"
)

// embedded drives the embedded engine for the conformance suite.
type embedded struct {
	t *testing.T
	e *engine.Worker
	s store.Store
}

// Start has nothing to do: a queued run is claimable.
func (x embedded) Start(context.Context, string) error { return nil }

func (x embedded) Signal(ctx context.Context, runID, kind string, payload []byte) error {
	return x.s.SendSignal(ctx, &store.Signal{RunID: runID, Kind: kind, Payload: payload})
}

func (x embedded) Work(ctx context.Context, concurrency int) error {
	if err := x.e.Work(ctx, engine.WorkOptions{Concurrency: concurrency, UntilIdle: true}); err != nil {
		x.t.Logf("work: %v (a failed run; its status says so)", err)
	}
	return nil
}

func (x embedded) Verify(ctx context.Context, runID string) (engine.Outcome, int, error) {
	return x.e.Verify(ctx, runID)
}

func TestConformance(t *testing.T) {
	enginetest.Exercise(t, func(t *testing.T, c enginetest.Config) enginetest.Engine {
		e, err := engine.New(engine.Options{Store: c.Store, Workflow: c.Workflow, Activities: c.Activities, Retry: c.Retry,
			LeaseTTL: c.LeaseTTL, Clock: c.Clock, Poll: 5 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		return embedded{t: t, e: e, s: c.Store}
	})
}
