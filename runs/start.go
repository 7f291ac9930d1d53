package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// StartRequest asks for a new run.
type StartRequest struct {
	// Agent is "name", "name@7" or "name@alias".
	Agent  string
	Task   string
	Tenant string
	User   string
	Mode   string // stream (default) | async
	// ID optionally names the run; starting the same request under the
	// same id again returns that run (idempotent creation).
	ID string
	// Bindings narrow what the run may act on: a call naming one of these
	// arguments must name this value (customer_id=c_88213 keeps a ticket's
	// run on the ticket's customer). They may narrow the user's own
	// bindings, never contradict them.
	Bindings map[string]string
	// Admin says the caller holds the tenant's admin scope: it may name a
	// version number or latest even when the tenant requires aliases.
	Admin bool
}

// maxTask bounds a run's task.
const maxTask = 256 << 10

// Start resolves the agent reference once, pins the version and starts the
// run on the engine. A retired version is refused however it is named
// (agent.ErrRetired), and when the tenant requires aliases a caller without
// Admin may name only an alias (agent.ErrAliasRequired). A canary alias
// picks its version from the run id, so a retried Start pins the same one.
func (s *Service) Start(ctx context.Context, r StartRequest) (*store.Run, error) {
	if strings.TrimSpace(r.Task) == "" {
		return nil, errors.New("start run: empty task")
	}
	if len(r.Task) > maxTask {
		return nil, errors.New("start run: task larger than 256 KiB")
	}
	if r.Tenant == "" || r.User == "" {
		return nil, errors.New("start run: tenant and user are required: every run acts on behalf of a user")
	}
	if r.Mode == "" {
		r.Mode = "stream"
	}
	if r.ID == "" {
		r.ID = NewRunID()
	}
	// A secret pasted into the task is never stored: the run, its log and
	// the model get the placeholder instead.
	r.Task, _ = trace.UserText(r.Task)
	if len(r.Bindings) > 0 {
		var pr *authz.Principal
		if s.o.Principals != nil {
			var err error
			pr, err = s.o.Principals.Principal(ctx, r.Tenant, r.User)
			if err != nil && !errors.Is(err, authz.ErrUnknownUser) {
				return nil, fmt.Errorf("start run: %w: the user directory could not answer: %w", ErrDirectory, err)
			}
		}
		if err := authz.CheckRunBindings(pr, r.Bindings); err != nil {
			return nil, fmt.Errorf("start run: %w: %w", ErrBadBindings, err)
		}
	}
	ro, err := s.resolveOptions(ctx, r.Tenant, r.Admin)
	if err != nil {
		return nil, err
	}
	d, version, err := s.o.Registry.Resolve(ctx, r.Agent, r.ID, ro)
	if err != nil {
		return nil, err
	}
	return s.start(ctx, engine.StartRequest{RunID: r.ID, Tenant: r.Tenant, User: r.User, Agent: d.Agent, AgentVersion: version,
		AgentHash: d.Hash(), Task: r.Task, Mode: r.Mode, Currency: d.Budgets.Currency, Bindings: r.Bindings})
}

// start hands a pinned run to the engine and reads it back from the store.
func (s *Service) start(ctx context.Context, r engine.StartRequest) (*store.Run, error) {
	if _, err := s.o.Engine.Start(ctx, r); err != nil {
		if errors.Is(err, engine.ErrStartConflict) {
			return nil, fmt.Errorf("%w: %w", store.ErrConflict, err)
		}
		return nil, err
	}
	return s.o.Store.GetRun(ctx, r.RunID)
}
