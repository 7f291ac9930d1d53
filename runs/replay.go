package runs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// ReplayRequest asks to re-run a recorded run from a step with a change.
type ReplayRequest struct {
	Of       string
	FromStep int
	// Agent optionally pins another version: "name@7" or "name@alias".
	Agent        string
	ModelAlias   string
	Instructions string
	Mode         string // recorded (default) | live
	Mocks        map[string]json.RawMessage
	InternalLive bool
	// Tenant scopes the lookup of the original ("" = any, for the CLI).
	Tenant string
	// ID optionally names the new run.
	ID string
	// Admin: as StartRequest.Admin, for Agent.
	Admin bool
}

// Replay starts a new run linked to the original. A replay is a new run:
// it is refused on a retired version (replay on a live one instead), and
// Agent follows the tenant's alias rule as Start's reference does. Steps
// before FromStep are served from the original's log; from FromStep on the
// run goes live with the patch, and tools with side effects never run live
// unless the manifest and the request allow it (see loop/replay.go).
func (s *Service) Replay(ctx context.Context, r ReplayRequest) (*store.Run, error) {
	orig, err := s.run(ctx, r.Of, r.Tenant)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if !store.Terminal(orig.Status) {
		return nil, fmt.Errorf("replay: run %s is %s; only an ended run can be replayed", r.Of, orig.Status)
	}
	if r.FromStep < 1 {
		return nil, errors.New("replay: --from-step must be 1 or more")
	}
	if r.Mode == "" {
		r.Mode = trace.ReplayRecorded
	}
	if r.Mode != trace.ReplayRecorded && r.Mode != trace.ReplayLive {
		return nil, fmt.Errorf("replay: mode must be recorded or live, not %q", r.Mode)
	}
	for name, m := range r.Mocks {
		if !json.Valid(m) {
			return nil, fmt.Errorf("replay: mock for %s is not valid JSON", name)
		}
	}
	var d *agent.Definition
	version := orig.AgentVersion
	if r.Agent != "" {
		ro, err := s.resolveOptions(ctx, orig.Tenant, r.Admin)
		if err != nil {
			return nil, err
		}
		if d, version, err = s.o.Registry.Resolve(ctx, r.Agent, orig.ID, ro); err != nil {
			return nil, err
		}
	} else {
		if err := s.checkLive(ctx, orig.Agent, version); err != nil {
			return nil, fmt.Errorf("replay: %w; replay it on a live version (name one, for example %s@%s)", err, orig.Agent, agent.AliasProd)
		}
		if d, err = s.o.Registry.Get(ctx, orig.Agent, version); err != nil {
			return nil, err
		}
	}
	// The replay asks the model from its first live step: refuse up front
	// an alias the gateway does not have, rather than start a run that can
	// only fail.
	alias := r.ModelAlias
	if alias == "" {
		alias = d.Model.Alias
	}
	if s.o.CheckModelAlias != nil {
		if err := s.o.CheckModelAlias(alias); err != nil {
			return nil, fmt.Errorf("replay: %w", err)
		}
	}
	if r.ID == "" {
		r.ID = NewRunID()
	}
	info := trace.ReplayInfo{Of: orig.ID, FromStep: r.FromStep, Mode: r.Mode, ModelAlias: r.ModelAlias,
		Instructions: r.Instructions, Mocks: r.Mocks, InternalLive: r.InternalLive}
	return s.start(ctx, engine.StartRequest{RunID: r.ID, Tenant: orig.Tenant, User: orig.User, Agent: d.Agent, AgentVersion: version,
		AgentHash: d.Hash(), Task: orig.Task, Mode: orig.Mode, Currency: orig.Currency, Bindings: orig.Bindings,
		Replay: &engine.Replay{Info: info}})
}
