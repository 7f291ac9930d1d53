package platform

import (
	"context"
	"log/slog"
	"path/filepath"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/container"
	"github.com/agentplane/agentplane/sandbox/gvisor"
	"github.com/agentplane/agentplane/sandbox/toolrun"
	"github.com/agentplane/agentplane/trace"
)

// SandboxOptions turn on the out-of-process tiers. Without a guest wrapper
// binary neither tier is available and tools of tier 2 or 3 fail closed with
// a clear error.
type SandboxOptions struct {
	// Guest is the static wrapper binary that runs inside every sandbox
	// (build it with: CGO_ENABLED=0 go build -o agentplane-guest ./sandbox/guest).
	Guest string
	// Runsc is a static gVisor runsc (default: runsc on PATH).
	Runsc string
	// DowngradeTier3 lets tier-3 tools run on tier 2 when gVisor is missing:
	// an operator's decision, logged at startup and recorded on every call.
	DowngradeTier3 bool
	// StateDir holds sandbox state (default under /run/agentplane). Sandbox
	// uids must be able to traverse its parents, so it is not the data
	// directory, which only its owner may enter.
	StateDir string
}

// startSandboxes builds the executors and their manager. It returns nil
// executors when no guest is configured.
func startSandboxes(ctx context.Context, o SandboxOptions, log *slog.Logger) (*sandboxes, map[int]broker.Executor, error) {
	if o.Guest == "" {
		return nil, nil, nil
	}
	co := container.Options{Guest: o.Guest, Logger: log}
	gv := gvisor.Options{Guest: o.Guest, Runsc: o.Runsc, Logger: log}
	if o.StateDir != "" {
		co.StateDir, gv.StateDir = filepath.Join(o.StateDir, "bwrap"), filepath.Join(o.StateDir, "gvisor")
	}
	g := gvisor.New(gv)
	m := sandbox.NewManager(sandbox.ManagerOptions{
		Executors:      map[int]sandbox.Executor{2: container.New(co), 3: g},
		DowngradeTier3: o.DowngradeTier3,
		Logger:         log,
	})
	if err := m.Start(ctx); err != nil {
		g.Close()
		return nil, nil, err
	}
	execs := map[int]broker.Executor{}
	for tier, r := range toolrun.Executors(m) {
		execs[tier] = r
		log.Info("sandbox tier available", "tier", tier)
	}
	return &sandboxes{Manager: m, gvisor: g}, execs, nil
}

// sandboxes is the manager plus the executors that hold host state.
type sandboxes struct {
	*sandbox.Manager
	gvisor *gvisor.Executor
}

// runEnder hands the loop the run's sandbox teardowns.
type runEnder struct{ m *sandbox.Manager }

func (r runEnder) EndRun(ctx context.Context, tenant, runID string) []trace.SandboxTeardown {
	var out []trace.SandboxTeardown
	for _, td := range r.m.EndRun(ctx, tenant, runID) {
		out = append(out, trace.SandboxTeardown{ID: td.ID, Executor: td.Executor, By: td.By, Reason: td.Reason, Uses: td.Uses, Err: td.Err})
	}
	return out
}

// Stop destroys every sandbox, then releases the executors' host state.
func (s *sandboxes) Stop() {
	s.Manager.Stop()
	s.gvisor.Close()
}
