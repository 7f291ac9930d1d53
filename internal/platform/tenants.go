package platform

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/store"
)

// TenantSettings returns a tenant's settings; a tenant that never stored
// any has the zero settings.
func (p *Platform) TenantSettings(ctx context.Context, tenant string) (store.TenantSettings, error) {
	ts, err := p.Store.GetTenantSettings(ctx, tenant)
	if errors.Is(err, store.ErrNotFound) {
		return store.TenantSettings{Tenant: tenant}, nil
	}
	if err != nil {
		return store.TenantSettings{}, fmt.Errorf("settings of tenant %s: %w", tenant, err)
	}
	return *ts, nil
}

// resolveOptions is what a new run of tenant may name: only aliases when
// the tenant requires them and the caller is not its admin.
func (p *Platform) resolveOptions(ctx context.Context, tenant string, admin bool) (agent.ResolveOptions, error) {
	ts, err := p.TenantSettings(ctx, tenant)
	if err != nil {
		return agent.ResolveOptions{}, err
	}
	return agent.ResolveOptions{AliasOnly: ts.RequireAlias && !admin}, nil
}

// checkLive fails with agent.ErrRetired when version of name is retired.
func (p *Platform) checkLive(ctx context.Context, name string, version int) error {
	v, err := p.Store.GetAgentVersion(ctx, name, version)
	if err != nil {
		return err
	}
	if !v.RetiredAt.IsZero() {
		return fmt.Errorf("agent %q version %d was retired at %s: %w", name, version, v.RetiredAt.UTC().Format(time.RFC3339), agent.ErrRetired)
	}
	return nil
}
