package temporal

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/engine/enginetest"
	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
	"github.com/agentplane/agentplane/store"
)

// conformance drives the Temporal engine for the conformance suite.
type conformance struct {
	e *Engine
	s store.Store
}

// Start starts the workflow of the run the suite created in the store.
func (x conformance) Start(ctx context.Context, runID string) error { return x.e.launch(ctx, runID) }

// Signal stores and delivers a signal of any kind (the suite's test
// workflows read kinds the API would refuse, and a cancel).
func (x conformance) Signal(ctx context.Context, runID, kind string, payload []byte) error {
	sg := &store.Signal{RunID: runID, Kind: kind, Payload: payload}
	if err := x.s.SendSignal(ctx, sg); err != nil {
		return err
	}
	return x.e.deliver(ctx, runID, sg)
}

func (x conformance) Work(ctx context.Context, concurrency int) error {
	return x.e.Work(ctx, engine.WorkOptions{Concurrency: concurrency, UntilIdle: true})
}

func (x conformance) Verify(ctx context.Context, runID string) (engine.Outcome, int, error) {
	v, err := x.e.Verify(ctx, runID)
	return engine.Outcome{Status: v.Status, Result: v.Result}, v.Events, err
}

// conformanceNamespaces is how many namespaces the suite's server has:
// one per harness (each harness has its own store and reuses run ids).
const conformanceNamespaces = 24

// TestConformance runs enginetest.Exercise on the Temporal engine against
// a real dev server. Time on the suite's fake clock reaches the runs
// through the engine's clock (Options.Clock): it stamps the log and Work
// wakes a wait whose deadline passed on it; the Temporal timers, on the
// server's clock, would fire 24 real hours later.
func TestConformance(t *testing.T) {
	var names []string
	for i := range conformanceNamespaces {
		names = append(names, fmt.Sprintf("conf%d", i))
	}
	srv := temporaltest.Start(t, temporaltest.Options{Namespaces: names})
	var mu sync.Mutex
	byStore := map[store.Store]string{}
	enginetest.Exercise(t, func(t *testing.T, c enginetest.Config) enginetest.Engine {
		mu.Lock()
		ns, ok := byStore[c.Store]
		if !ok {
			if len(byStore) == len(names) {
				mu.Unlock()
				t.Fatalf("the suite uses more than %d stores: raise conformanceNamespaces", len(names))
			}
			ns = names[len(byStore)]
			byStore[c.Store] = ns
		}
		mu.Unlock()
		cl := srv.Client(t, client.Options{Namespace: ns})
		e, err := New(Options{Client: cl, TaskQueue: "agentplane", Store: c.Store, Workflow: c.Workflow, Activities: c.Activities,
			Retry: c.Retry, Clock: c.Clock, Poll: 50 * time.Millisecond, Reconcile: time.Second,
			Policy: func(string) ActivityPolicy {
				// A crashed worker's attempt is retried once its
				// heartbeats stop for 2 s.
				p := DefaultPolicy(c.Retry)
				p.StartToClose, p.Heartbeat = time.Minute, 2*time.Second
				return p
			}})
		if err != nil {
			t.Fatal(err)
		}
		return conformance{e: e, s: c.Store}
	})
}
