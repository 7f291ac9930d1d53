// Package runs holds the use cases every front end of agentplane shares:
// start a run, decide an approval, replay a run, cancel one, send it a
// message. The HTTP API, the CLI and evals call a Service; it checks the
// request (agent reference and version rules, run bindings, approvers,
// replay settings) and hands the run to an engine.Engine, never writing a
// run's state into the store itself, so the same calls work on every
// engine. It reads runs and their logs from agentplane's own event store,
// which is the record on every engine.
//
// A Service is safe for concurrent use.
package runs

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
)

// Store is what a Service reads: runs, their logs and agent versions.
type Store interface {
	GetRun(ctx context.Context, id string) (*store.Run, error)
	ListRuns(ctx context.Context, f store.RunFilter) ([]*store.Run, error)
	Events(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error)
	GetAgentVersion(ctx context.Context, name string, version int) (*store.AgentVersion, error)
}

// Directory answers whether a user belongs to a group in a tenant. It is how
// an approval's decider is checked; without one, no approval can be decided
// (fail closed).
type Directory interface {
	InGroup(ctx context.Context, tenant, user, group string) (bool, error)
}

// Options configure a Service.
type Options struct {
	// Engine executes the runs (required).
	Engine engine.Engine
	// Store is the event store runs are read from (required).
	Store Store
	// Registry resolves agent references (required).
	Registry *agent.Registry
	// Principals knows users' own bindings, which a run's bindings may
	// only narrow (nil: no user has any).
	Principals authz.Directory
	// Approvers checks deciders' groups (nil: no approval can be decided).
	Approvers Directory
	// Settings returns a tenant's settings (nil: every tenant has the zero
	// settings).
	Settings func(ctx context.Context, tenant string) (store.TenantSettings, error)
	// CheckModelAlias fails for a model alias the gateway does not have
	// (nil: every alias is taken at its word).
	CheckModelAlias func(alias string) error
}

// Service is the set of use cases over runs.
type Service struct {
	o Options
}

// New checks o and returns a Service.
func New(o Options) (*Service, error) {
	if o.Engine == nil || o.Store == nil || o.Registry == nil {
		return nil, errors.New("runs: Engine, Store and Registry are required")
	}
	return &Service{o: o}, nil
}

// Errors of the use cases (test with errors.Is).
var (
	// ErrBadBindings: run bindings that are malformed or contradict the
	// user's own.
	ErrBadBindings = errors.New("run bindings refused")
	// ErrDirectory: the user directory could not be asked (a platform
	// failure, not the caller's).
	ErrDirectory = errors.New("user directory unavailable")
	// ErrApprovalNotPending: the approval was decided, or its run ended.
	ErrApprovalNotPending = errors.New("approval is not pending")
	// ErrNotApprover: the decider may not decide this approval.
	ErrNotApprover = errors.New("decider may not decide this approval")
	// ErrRunEnded: the run has ended; it takes no more signals.
	ErrRunEnded = errors.New("run has ended")
)

// NewRunID returns a fresh run id.
func NewRunID() string {
	var b [12]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	return "run_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(b[:]))
}

// run returns the run id names, scoped to tenant ("" = any): another
// tenant's run is not found.
func (s *Service) run(ctx context.Context, id, tenant string) (*store.Run, error) {
	run, err := s.o.Store.GetRun(ctx, id)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err != nil || (tenant != "" && run.Tenant != tenant) {
		return nil, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return run, nil
}

// settings returns tenant's settings.
func (s *Service) settings(ctx context.Context, tenant string) (store.TenantSettings, error) {
	if s.o.Settings == nil {
		return store.TenantSettings{Tenant: tenant}, nil
	}
	return s.o.Settings(ctx, tenant)
}

// resolveOptions is what a new run of tenant may name: only aliases when
// the tenant requires them and the caller is not its admin.
func (s *Service) resolveOptions(ctx context.Context, tenant string, admin bool) (agent.ResolveOptions, error) {
	ts, err := s.settings(ctx, tenant)
	if err != nil {
		return agent.ResolveOptions{}, err
	}
	return agent.ResolveOptions{AliasOnly: ts.RequireAlias && !admin}, nil
}

// checkLive fails with agent.ErrRetired when version of name is retired.
func (s *Service) checkLive(ctx context.Context, name string, version int) error {
	v, err := s.o.Store.GetAgentVersion(ctx, name, version)
	if err != nil {
		return err
	}
	if !v.RetiredAt.IsZero() {
		return fmt.Errorf("agent %q version %d was retired at %s: %w", name, version, v.RetiredAt.UTC().Format(time.RFC3339), agent.ErrRetired)
	}
	return nil
}
