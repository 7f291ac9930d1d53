package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// SignalReplay carries a replay's instructions to the new run; the loop
// reads it once when the run starts and records it in run_started.
const SignalReplay = "replay"

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

// Replay creates a new run linked to the original. A replay is a new run:
// it is refused on a retired version (replay on a live one instead), and
// Agent follows the tenant's alias rule as StartRun's reference does. Steps before FromStep are
// served from the original's log; from FromStep on the run goes live with the
// patch, and tools with side effects never run live unless the manifest and
// the request allow it (see loop/replay.go).
func (p *Platform) Replay(ctx context.Context, r ReplayRequest) (*store.Run, error) {
	orig, err := p.Store.GetRun(ctx, r.Of)
	if err != nil || (r.Tenant != "" && orig.Tenant != r.Tenant) {
		return nil, fmt.Errorf("replay: run %s: %w", r.Of, store.ErrNotFound)
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
	version := orig.AgentVersion
	agentName := orig.Agent
	if r.Agent != "" {
		ro, err := p.resolveOptions(ctx, orig.Tenant, r.Admin)
		if err != nil {
			return nil, err
		}
		d, v, err := p.Registry.Resolve(ctx, r.Agent, orig.ID, ro)
		if err != nil {
			return nil, err
		}
		agentName, version = d.Agent, v
	} else if err := p.checkLive(ctx, agentName, version); err != nil {
		return nil, fmt.Errorf("replay: %w; replay it on a live version (name one, for example %s@%s)", err, agentName, agent.AliasProd)
	}
	// The replay asks the model from its first live step: refuse up front
	// an alias the gateway does not have, rather than start a run that can
	// only fail.
	alias := r.ModelAlias
	if alias == "" {
		d, err := p.Registry.Get(ctx, agentName, version)
		if err != nil {
			return nil, err
		}
		alias = d.Model.Alias
	}
	if err := p.checkModelAlias(alias); err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	if r.ID == "" {
		r.ID = NewRunID()
	}
	spec, err := json.Marshal(trace.ReplayInfo{Of: orig.ID, FromStep: r.FromStep, Mode: r.Mode, ModelAlias: r.ModelAlias,
		Instructions: r.Instructions, Mocks: r.Mocks, InternalLive: r.InternalLive})
	if err != nil {
		return nil, err
	}
	// The instructions go first, so the run is never claimable without them.
	if err := p.Store.SendSignal(ctx, &store.Signal{RunID: r.ID, Kind: SignalReplay, Payload: spec}); err != nil {
		return nil, err
	}
	run := &store.Run{ID: r.ID, Tenant: orig.Tenant, User: orig.User, Agent: agentName, AgentVersion: version, Bindings: orig.Bindings,
		Task: orig.Task, Mode: orig.Mode, Status: store.StatusQueued, Currency: orig.Currency, ParentRunID: orig.ID}
	if err := p.Store.CreateRun(ctx, run); err != nil {
		return nil, err
	}
	return run, nil
}

// replaySpec is the loop's ReplaySpec: the replay signal waiting for runID.
func (p *Platform) replaySpec(ctx context.Context, runID string) (*trace.ReplayInfo, error) {
	sigs, err := p.Store.PendingSignals(ctx, runID)
	if err != nil {
		return nil, err
	}
	for _, sg := range sigs {
		if sg.Kind == SignalReplay {
			var info trace.ReplayInfo
			if err := json.Unmarshal(sg.Payload, &info); err != nil {
				return nil, fmt.Errorf("replay instructions for %s: %w", runID, err)
			}
			return &info, nil
		}
	}
	return nil, nil
}
