package platform_test

import (
	"context"
	"errors"
	"github.com/agentplane/agentplane/runs"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
)

// TestClass10Replay: a replay is a new run, so it cannot bring a retired
// version back to life, and in a tenant that requires aliases it may name
// a version number only for an admin.
func TestClass10Replay(t *testing.T) {
	ctx := context.Background()
	p := openDemo(t)
	orig := demoRun(t, p)
	if _, err := p.Registry.Retire(ctx, orig.Agent, orig.AgentVersion); err != nil {
		t.Fatal(err)
	}
	_, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: orig.ID, FromStep: 1})
	if !errors.Is(err, agent.ErrRetired) {
		t.Fatalf("replay on the retired version = %v, want ErrRetired", err)
	}

	v2 := applyVersion2(t, p, orig.Agent)
	if _, err := p.PutTenantSettings(ctx, store.TenantSettings{Tenant: orig.Tenant, RequireAlias: true}); err != nil {
		t.Fatal(err)
	}
	ref := orig.Agent + "@2"
	if _, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: orig.ID, FromStep: 1, Agent: ref}); !errors.Is(err, agent.ErrAliasRequired) {
		t.Fatalf("replay naming %s without admin = %v, want ErrAliasRequired", ref, err)
	}
	run, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: orig.ID, FromStep: 1, Agent: ref, Admin: true})
	if err != nil || run.AgentVersion != v2 {
		t.Fatalf("an admin's replay on %s = %+v, %v", ref, run, err)
	}
}

// applyVersion2 stores version 2 of the agent (version 1 with another
// number) and returns 2.
func applyVersion2(t *testing.T, p *platform.Platform, name string) int {
	t.Helper()
	d, err := p.Registry.Get(context.Background(), name, 1)
	if err != nil {
		t.Fatal(err)
	}
	d.Version = 2
	if _, err := p.Registry.Apply(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return 2
}
