package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/agentplane/agentplane/store"
)

var _ store.ConnectorStore = (*Store)(nil)

const connectorColumns = "name, tenant, spec, overlays, snapshot, snapshot_hash, reviewed_by, reviewed_at, created_at, updated_at"

// PutConnector implements store.ConnectorStore.
func (s *Store) PutConnector(ctx context.Context, c *store.Connector) error {
	if c.Tenant == "" || c.Name == "" {
		return errors.New("put connector: tenant and name are required")
	}
	now := time.Now().UTC()
	if c.UpdatedAt.IsZero() {
		c.UpdatedAt = now
	}
	if c.CreatedAt.IsZero() {
		c.CreatedAt = c.UpdatedAt
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var owner string
	switch err := tx.QueryRowContext(ctx, "SELECT tenant FROM connectors WHERE name = ?", c.Name).Scan(&owner); {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return err
	case owner != c.Tenant:
		return fmt.Errorf("connector %s: the name is taken by another tenant: %w", c.Name, store.ErrConflict)
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO connectors(`+connectorColumns+`) VALUES (?,?,?,?,?,?,?,?,?,?)
		ON CONFLICT(name) DO UPDATE SET spec = excluded.spec, overlays = excluded.overlays, snapshot = excluded.snapshot,
		snapshot_hash = excluded.snapshot_hash, reviewed_by = excluded.reviewed_by, reviewed_at = excluded.reviewed_at,
		updated_at = excluded.updated_at`,
		c.Name, c.Tenant, nonNil(c.Spec), nonNil(c.Overlays), nonNil(c.Snapshot), c.SnapshotHash, c.ReviewedBy,
		micros(c.ReviewedAt), micros(c.CreatedAt), micros(c.UpdatedAt))
	if err != nil {
		return err
	}
	return tx.Commit()
}

func nonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// GetConnector implements store.ConnectorStore.
func (s *Store) GetConnector(ctx context.Context, tenant, name string) (*store.Connector, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+connectorColumns+" FROM connectors WHERE tenant = ? AND name = ?", tenant, name)
	if err != nil {
		return nil, err
	}
	cs, err := scanConnectors(rows)
	if err != nil {
		return nil, err
	}
	if len(cs) == 0 {
		return nil, fmt.Errorf("connector %s of tenant %s: %w", name, tenant, store.ErrNotFound)
	}
	return cs[0], nil
}

// ListConnectors implements store.ConnectorStore.
func (s *Store) ListConnectors(ctx context.Context, tenant string) ([]*store.Connector, error) {
	q, args := "SELECT "+connectorColumns+" FROM connectors ORDER BY name", []any(nil)
	if tenant != "" {
		q, args = "SELECT "+connectorColumns+" FROM connectors WHERE tenant = ? ORDER BY name", []any{tenant}
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return scanConnectors(rows)
}

// DeleteConnector implements store.ConnectorStore.
func (s *Store) DeleteConnector(ctx context.Context, tenant, name string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM connectors WHERE tenant = ? AND name = ?", tenant, name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("connector %s of tenant %s: %w", name, tenant, store.ErrNotFound)
	}
	return nil
}

func scanConnectors(rows *sql.Rows) ([]*store.Connector, error) {
	defer rows.Close()
	var out []*store.Connector
	for rows.Next() {
		var (
			c                          store.Connector
			reviewed, created, updated int64
		)
		if err := rows.Scan(&c.Name, &c.Tenant, &c.Spec, &c.Overlays, &c.Snapshot, &c.SnapshotHash, &c.ReviewedBy,
			&reviewed, &created, &updated); err != nil {
			return nil, err
		}
		if len(c.Snapshot) == 0 {
			c.Snapshot = nil
		}
		c.ReviewedAt, c.CreatedAt, c.UpdatedAt = fromMicros(reviewed), fromMicros(created), fromMicros(updated)
		out = append(out, &c)
	}
	return out, rows.Err()
}
