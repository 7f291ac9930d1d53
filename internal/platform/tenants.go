package platform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
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

// PutTenantSettings validates and stores a tenant's settings: link domains
// are normalised (render.NormalizeDomains) and bounded.
func (p *Platform) PutTenantSettings(ctx context.Context, ts store.TenantSettings) (store.TenantSettings, error) {
	if ts.Tenant == "" {
		return store.TenantSettings{}, errors.New("tenant settings: tenant is required")
	}
	ds, err := render.NormalizeDomains(ts.LinkDomains)
	if err != nil {
		return store.TenantSettings{}, fmt.Errorf("tenant %s: %w", ts.Tenant, err)
	}
	ts.LinkDomains = ds
	if ts.UpdatedAt.IsZero() {
		ts.UpdatedAt = time.Now().UTC()
	}
	if err := p.Store.PutTenantSettings(ctx, &ts); err != nil {
		return store.TenantSettings{}, err
	}
	return ts, nil
}

// RenderPolicy is how model text is shown to tenant's viewers: links only
// to the tenant's listed domains (see package render).
func (p *Platform) RenderPolicy(ctx context.Context, tenant string) (*render.Policy, error) {
	ts, err := p.TenantSettings(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return render.NewPolicy(ts.LinkDomains)
}

// OutputFlags says what rendering a run's model text under pol had to
// neutralise: the text of every model response in the log and the final
// result. The log itself keeps the model's exact bytes.
func OutputFlags(pol *render.Policy, evs []store.Event) render.Flags {
	flags := render.Flags{}
	add := func(s string) {
		if s != "" {
			_, f := pol.Text(s)
			flags.Add(f)
		}
	}
	for i := range evs {
		switch evs[i].Type {
		case trace.EvModelCall:
			var mc trace.ModelCall
			if json.Unmarshal(evs[i].Payload, &mc) == nil && mc.Response != nil {
				add(mc.Response.Text())
			}
		case trace.EvRunCompleted, trace.EvRunFailed:
			var re trace.RunEnded
			if json.Unmarshal(evs[i].Payload, &re) == nil {
				add(re.Result)
			}
		}
	}
	return flags
}
