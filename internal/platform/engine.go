package platform

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/engine/temporal"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/store"
)

// EngineHelp says what an engine spec may be (flags and errors).
const EngineHelp = "temporal://HOST:PORT?namespace=N&task_queue=Q for a Temporal server, or empty for the embedded engine on the run store"

// openEngine builds the engine o.Engine names over the loop and the
// platform's store es: the embedded engine by default, or the Temporal
// engine on the server a temporal:// URL names.
func (p *Platform) openEngine(ctx context.Context, o Options, es store.Store) error {
	if o.Engine == "" {
		emb, err := engine.NewEmbedded(engine.Options{Store: es, Workflow: p.Loop.Workflow, Activities: p.Loop.Activities(),
			LeaseTTL: o.LeaseTTL, Clock: o.Clock, Logger: o.Logger})
		if err != nil {
			return err
		}
		p.Embedded, p.Engine = emb, emb
		return nil
	}
	if !strings.HasPrefix(o.Engine, "temporal://") {
		return fmt.Errorf("engine %q: want %s", o.Engine, EngineHelp)
	}
	cfg, err := temporal.ParseURL(o.Engine)
	if err != nil {
		return err
	}
	cl, err := temporal.Dial(ctx, cfg, temporal.DialOptions{})
	if err != nil {
		return err
	}
	e, err := temporal.New(temporal.Options{Client: cl, TaskQueue: cfg.TaskQueue, Store: es, Workflow: p.Loop.Workflow,
		Activities: p.Loop.Activities(), Clock: o.Clock, Logger: o.Logger, Policy: loopPolicy})
	if err != nil {
		cl.Close()
		return err
	}
	p.Engine, p.engineClose = e, cl.Close
	return nil
}

// loopPolicy is how long each of the loop's activities may take on
// Temporal and how it is retried: a model call as ModelCallPolicy, a tool
// execution as ToolCallPolicy under the longest timeout a manifest may set
// (with heartbeats), the rest (decisions, records, teardown) the default.
func loopPolicy(name string) temporal.ActivityPolicy {
	switch name {
	case loop.ActModelCall, loop.ActCompact:
		return temporal.ModelCallPolicy()
	case loop.ActToolExecute:
		return temporal.ToolCallPolicy(10 * time.Minute)
	}
	return temporal.ActivityPolicy{}
}
