package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/store"
)

const connectorCols = "name, tenant, spec, overlays, snapshot, snapshot_hash, reviewed_by, reviewed_at, created_at, updated_at"

// PutConnector implements store.ConnectorStore. It is one statement: the
// insert of a new name, or the update of the caller's own, so that two
// tenants racing for one name from two processes cannot both have it (the
// loser's update matches no row and is ErrConflict).
func (s *Store) PutConnector(ctx context.Context, c *store.Connector) error {
	if c.Tenant == "" || c.Name == "" {
		return errors.New("put connector: tenant and name are required")
	}
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = time.Now().UTC()
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = c.UpdatedAt
	}
	n, err := s.exec(ctx, `INSERT INTO connectors(`+connectorCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10)
		ON CONFLICT(name) DO UPDATE SET spec = excluded.spec, overlays = excluded.overlays, snapshot = excluded.snapshot,
		snapshot_hash = excluded.snapshot_hash, reviewed_by = excluded.reviewed_by, reviewed_at = excluded.reviewed_at,
		updated_at = excluded.updated_at
		WHERE connectors.tenant = excluded.tenant`,
		c.Name, c.Tenant, blob(c.Spec), blob(c.Overlays), blob(c.Snapshot), c.SnapshotHash, c.ReviewedBy,
		micros(c.ReviewedAt), micros(c.CreatedAt), micros(c.UpdatedAt))
	if err != nil {
		return fmt.Errorf("put connector %s: %w", c.Name, err)
	}
	if n == 0 {
		return fmt.Errorf("connector %s: the name is taken by another tenant: %w", c.Name, store.ErrConflict)
	}
	return nil
}

func scanConnector(sc scanner) (*store.Connector, error) {
	var (
		c                          store.Connector
		reviewed, created, updated int64
	)
	if err := sc.Scan(&c.Name, &c.Tenant, &c.Spec, &c.Overlays, &c.Snapshot, &c.SnapshotHash, &c.ReviewedBy,
		&reviewed, &created, &updated); err != nil {
		return nil, err
	}
	if len(c.Snapshot) == 0 {
		c.Snapshot = nil
	}
	c.ReviewedAt, c.CreatedAt, c.UpdatedAt = fromMicros(reviewed), fromMicros(created), fromMicros(updated)
	return &c, nil
}

// GetConnector implements store.ConnectorStore.
func (s *Store) GetConnector(ctx context.Context, tenant, name string) (*store.Connector, error) {
	c, err := scanConnector(s.queryRow(ctx, "SELECT "+connectorCols+" FROM connectors WHERE tenant = $1 AND name = $2", tenant, name))
	return c, notFound(err, fmt.Sprintf("connector %s of tenant %s", name, tenant))
}

// ListConnectors implements store.ConnectorStore.
func (s *Store) ListConnectors(ctx context.Context, tenant string) ([]*store.Connector, error) {
	if tenant == "" {
		return queryAll(ctx, s.pool, "SELECT "+connectorCols+" FROM connectors ORDER BY name", nil, scanConnector)
	}
	return queryAll(ctx, s.pool, "SELECT "+connectorCols+" FROM connectors WHERE tenant = $1 ORDER BY name", []any{tenant}, scanConnector)
}

// DeleteConnector implements store.ConnectorStore.
func (s *Store) DeleteConnector(ctx context.Context, tenant, name string) error {
	n, err := s.exec(ctx, "DELETE FROM connectors WHERE tenant = $1 AND name = $2", tenant, name)
	if err != nil {
		return fmt.Errorf("delete connector %s: %w", name, err)
	}
	if n == 0 {
		return fmt.Errorf("connector %s of tenant %s: %w", name, tenant, store.ErrNotFound)
	}
	return nil
}
