package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/agentplane/agentplane/store"
)

// PutPrincipal implements store.PrincipalStore.
func (s *Store) PutPrincipal(ctx context.Context, p *store.Principal) error {
	bindings := p.Bindings
	if bindings == nil {
		bindings = map[string]string{}
	}
	sj, _ := json.Marshal(sortedCopy(p.Scopes))
	gj, _ := json.Marshal(sortedCopy(p.Groups))
	bj, err := json.Marshal(bindings)
	if err != nil {
		return err
	}
	if p.UpdatedAt.IsZero() {
		p.UpdatedAt = time.Now().UTC()
	}
	_, err = s.exec(ctx, `INSERT INTO principals(tenant, user_id, scopes, groups_, bindings, updated_at) VALUES ($1,$2,$3,$4,$5,$6)
		ON CONFLICT(tenant, user_id) DO UPDATE SET scopes = excluded.scopes, groups_ = excluded.groups_,
		bindings = excluded.bindings, updated_at = excluded.updated_at`,
		p.Tenant, p.User, string(sj), string(gj), string(bj), micros(p.UpdatedAt))
	return err
}

func sortedCopy(ss []string) []string {
	out := slices.Clone(ss)
	if out == nil {
		out = []string{}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

const principalCols = "tenant, user_id, scopes, groups_, bindings, updated_at"

func scanPrincipal(sc scanner) (*store.Principal, error) {
	var (
		p          store.Principal
		sj, gj, bj string
		updated    int64
	)
	if err := sc.Scan(&p.Tenant, &p.User, &sj, &gj, &bj, &updated); err != nil {
		return nil, err
	}
	if err := errors.Join(json.Unmarshal([]byte(sj), &p.Scopes), json.Unmarshal([]byte(gj), &p.Groups), json.Unmarshal([]byte(bj), &p.Bindings)); err != nil {
		return nil, fmt.Errorf("principal %s/%s: %w", p.Tenant, p.User, err)
	}
	p.UpdatedAt = fromMicros(updated)
	return &p, nil
}

// GetPrincipal implements store.PrincipalStore.
func (s *Store) GetPrincipal(ctx context.Context, tenant, user string) (*store.Principal, error) {
	p, err := scanPrincipal(s.queryRow(ctx, "SELECT "+principalCols+" FROM principals WHERE tenant = $1 AND user_id = $2", tenant, user))
	return p, notFound(err, fmt.Sprintf("principal %s/%s", tenant, user))
}

// ListPrincipals implements store.PrincipalStore.
func (s *Store) ListPrincipals(ctx context.Context, tenant string) ([]*store.Principal, error) {
	q, args := "SELECT "+principalCols+" FROM principals", []any{}
	if tenant != "" {
		q += " WHERE tenant = $1"
		args = append(args, tenant)
	}
	return queryAll(ctx, s.pool, q+" ORDER BY tenant, user_id", args, scanPrincipal)
}

// DeletePrincipal implements store.PrincipalStore.
func (s *Store) DeletePrincipal(ctx context.Context, tenant, user string) error {
	n, err := s.exec(ctx, "DELETE FROM principals WHERE tenant = $1 AND user_id = $2", tenant, user)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("principal %s/%s: %w", tenant, user, store.ErrNotFound)
	}
	return nil
}

// GetTenantSettings implements store.TenantStore.
func (s *Store) GetTenantSettings(ctx context.Context, tenant string) (*store.TenantSettings, error) {
	ts := store.TenantSettings{Tenant: tenant}
	var domains string
	var updated int64
	err := s.queryRow(ctx, "SELECT link_domains, require_alias, updated_at FROM tenant_settings WHERE tenant = $1", tenant).
		Scan(&domains, &ts.RequireAlias, &updated)
	if err != nil {
		return nil, notFound(err, "settings of tenant "+tenant)
	}
	if err := json.Unmarshal([]byte(domains), &ts.LinkDomains); err != nil {
		return nil, fmt.Errorf("settings of tenant %s: link domains: %w", tenant, err)
	}
	ts.LinkDomains, ts.UpdatedAt = sortedCopy(ts.LinkDomains), fromMicros(updated)
	return &ts, nil
}

// PutTenantSettings implements store.TenantStore.
func (s *Store) PutTenantSettings(ctx context.Context, ts *store.TenantSettings) error {
	if ts.Tenant == "" {
		return errors.New("put tenant settings: tenant is required")
	}
	dj, err := json.Marshal(sortedCopy(ts.LinkDomains))
	if err != nil {
		return err
	}
	if ts.UpdatedAt.IsZero() {
		ts.UpdatedAt = time.Now().UTC()
	}
	_, err = s.exec(ctx, `INSERT INTO tenant_settings(tenant, link_domains, require_alias, updated_at) VALUES ($1,$2,$3,$4)
		ON CONFLICT(tenant) DO UPDATE SET link_domains = excluded.link_domains, require_alias = excluded.require_alias,
		updated_at = excluded.updated_at`, ts.Tenant, string(dj), ts.RequireAlias, micros(ts.UpdatedAt))
	return err
}
