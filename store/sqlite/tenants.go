package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/store"
)

var _ store.TenantStore = (*Store)(nil)

// GetTenantSettings implements store.TenantStore.
func (s *Store) GetTenantSettings(ctx context.Context, tenant string) (*store.TenantSettings, error) {
	var (
		ts      = store.TenantSettings{Tenant: tenant}
		domains string
		require int
		updated int64
	)
	err := s.r.QueryRowContext(ctx, "SELECT link_domains, require_alias, updated_at FROM tenant_settings WHERE tenant = ?", tenant).
		Scan(&domains, &require, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("settings of tenant %s: %w", tenant, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(domains), &ts.LinkDomains); err != nil {
		return nil, fmt.Errorf("settings of tenant %s: link domains: %w", tenant, err)
	}
	ts.LinkDomains = sortedCopy(ts.LinkDomains)
	ts.RequireAlias, ts.UpdatedAt = require != 0, fromMicros(updated)
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
	require := 0
	if ts.RequireAlias {
		require = 1
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO tenant_settings(tenant, link_domains, require_alias, updated_at) VALUES (?,?,?,?)
		ON CONFLICT(tenant) DO UPDATE SET link_domains = excluded.link_domains, require_alias = excluded.require_alias,
		updated_at = excluded.updated_at`, ts.Tenant, string(dj), require, micros(ts.UpdatedAt))
	return err
}
