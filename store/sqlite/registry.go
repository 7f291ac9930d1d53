package sqlite

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

// PutAgentVersion implements store.AgentStore.
func (s *Store) PutAgentVersion(ctx context.Context, v *store.AgentVersion) (bool, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	var hash []byte
	err = tx.QueryRowContext(ctx, "SELECT spec_hash FROM agent_versions WHERE name = ? AND version = ?", v.Name, v.Version).Scan(&hash)
	switch {
	case err == nil:
		if bytes.Equal(hash, v.SpecHash[:]) {
			return false, nil
		}
		return false, fmt.Errorf("agent %s version %d: %w", v.Name, v.Version, store.ErrConflict)
	case !errors.Is(err, sql.ErrNoRows):
		return false, err
	}
	if v.CreatedAt.IsZero() {
		v.CreatedAt = time.Now().UTC()
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO agent_versions(name, version, spec, spec_hash, created_at) VALUES (?,?,?,?,?)",
		v.Name, v.Version, v.Spec, v.SpecHash[:], micros(v.CreatedAt)); err != nil {
		return false, err
	}
	return true, classify(tx.Commit())
}

const agentCols = "name, version, spec, spec_hash, created_at, retired_at"

func scanAgent(sc scanner) (*store.AgentVersion, error) {
	var v store.AgentVersion
	var hash []byte
	var created, retired int64
	if err := sc.Scan(&v.Name, &v.Version, &v.Spec, &hash, &created, &retired); err != nil {
		return nil, err
	}
	copy(v.SpecHash[:], hash)
	v.CreatedAt, v.RetiredAt = fromMicros(created), fromMicros(retired)
	return &v, nil
}

// GetAgentVersion implements store.AgentStore.
func (s *Store) GetAgentVersion(ctx context.Context, name string, version int) (*store.AgentVersion, error) {
	v, err := scanAgent(s.r.QueryRowContext(ctx,
		"SELECT "+agentCols+" FROM agent_versions WHERE name = ? AND version = ?", name, version))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("agent %s version %d: %w", name, version, store.ErrNotFound)
	}
	return v, err
}

// ListAgentVersions implements store.AgentStore.
func (s *Store) ListAgentVersions(ctx context.Context, name string) ([]*store.AgentVersion, error) {
	q := "SELECT " + agentCols + " FROM agent_versions"
	var args []any
	if name != "" {
		q += " WHERE name = ?"
		args = append(args, name)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY name, version", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.AgentVersion
	for rows.Next() {
		v, err := scanAgent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// RetireAgentVersion implements store.AgentStore.
func (s *Store) RetireAgentVersion(ctx context.Context, name string, version int, at time.Time) error {
	if at.IsZero() {
		at = time.Now().UTC()
	}
	res, err := s.w.ExecContext(ctx, `UPDATE agent_versions SET retired_at = CASE WHEN retired_at = 0 THEN ? ELSE retired_at END
		WHERE name = ? AND version = ?`, micros(at), name, version)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("agent %s version %d: %w", name, version, store.ErrNotFound)
	}
	return nil
}

// SetAlias implements store.AgentStore.
func (s *Store) SetAlias(ctx context.Context, a *store.Alias) error {
	if a.UpdatedAt.IsZero() {
		a.UpdatedAt = time.Now().UTC()
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO aliases(agent, alias, version, canary_version, canary_percent, updated_at)
		VALUES (?,?,?,?,?,?) ON CONFLICT(agent, alias) DO UPDATE SET version = excluded.version,
		canary_version = excluded.canary_version, canary_percent = excluded.canary_percent, updated_at = excluded.updated_at`,
		a.Agent, a.Alias, a.Version, a.CanaryVersion, a.CanaryPercent, micros(a.UpdatedAt))
	return err
}

func scanAlias(sc scanner) (*store.Alias, error) {
	var a store.Alias
	var upd int64
	if err := sc.Scan(&a.Agent, &a.Alias, &a.Version, &a.CanaryVersion, &a.CanaryPercent, &upd); err != nil {
		return nil, err
	}
	a.UpdatedAt = fromMicros(upd)
	return &a, nil
}

// GetAlias implements store.AgentStore.
func (s *Store) GetAlias(ctx context.Context, agent, alias string) (*store.Alias, error) {
	a, err := scanAlias(s.r.QueryRowContext(ctx,
		"SELECT agent, alias, version, canary_version, canary_percent, updated_at FROM aliases WHERE agent = ? AND alias = ?", agent, alias))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("alias %s@%s: %w", agent, alias, store.ErrNotFound)
	}
	return a, err
}

// ListAliases implements store.AgentStore.
func (s *Store) ListAliases(ctx context.Context, agent string) ([]*store.Alias, error) {
	q := "SELECT agent, alias, version, canary_version, canary_percent, updated_at FROM aliases"
	var args []any
	if agent != "" {
		q += " WHERE agent = ?"
		args = append(args, agent)
	}
	rows, err := s.r.QueryContext(ctx, q+" ORDER BY agent, alias", args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Alias
	for rows.Next() {
		a, err := scanAlias(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// PutTool implements store.ToolStore: the manifest is stored by hash and
// becomes the current one for its name.
func (s *Store) PutTool(ctx context.Context, t *store.ToolRecord) error {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().UTC()
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT OR IGNORE INTO tools(hash, name, manifest, created_at) VALUES (?,?,?,?)",
		t.Hash[:], t.Name, t.Manifest, micros(t.CreatedAt)); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT INTO tool_heads(name, hash) VALUES (?,?) ON CONFLICT(name) DO UPDATE SET hash = excluded.hash",
		t.Name, t.Hash[:]); err != nil {
		return err
	}
	return classify(tx.Commit())
}

func scanTool(sc scanner) (*store.ToolRecord, error) {
	var t store.ToolRecord
	var hash []byte
	var created int64
	if err := sc.Scan(&t.Name, &t.Manifest, &hash, &created); err != nil {
		return nil, err
	}
	copy(t.Hash[:], hash)
	t.CreatedAt = fromMicros(created)
	return &t, nil
}

// GetTool implements store.ToolStore.
func (s *Store) GetTool(ctx context.Context, name string) (*store.ToolRecord, error) {
	t, err := scanTool(s.r.QueryRowContext(ctx, `SELECT t.name, t.manifest, t.hash, t.created_at FROM tool_heads h
		JOIN tools t ON t.hash = h.hash WHERE h.name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("tool %s: %w", name, store.ErrNotFound)
	}
	return t, err
}

// GetToolByHash implements store.ToolStore.
func (s *Store) GetToolByHash(ctx context.Context, sum [32]byte) (*store.ToolRecord, error) {
	t, err := scanTool(s.r.QueryRowContext(ctx, "SELECT name, manifest, hash, created_at FROM tools WHERE hash = ?", sum[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("tool %x: %w", sum[:6], store.ErrNotFound)
	}
	return t, err
}

// ListTools implements store.ToolStore.
func (s *Store) ListTools(ctx context.Context) ([]*store.ToolRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT t.name, t.manifest, t.hash, t.created_at FROM tool_heads h
		JOIN tools t ON t.hash = h.hash ORDER BY t.name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.ToolRecord
	for rows.Next() {
		t, err := scanTool(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// SendSignal implements store.SignalStore.
func (s *Store) SendSignal(ctx context.Context, sg *store.Signal) error {
	if sg.CreatedAt.IsZero() {
		sg.CreatedAt = time.Now().UTC()
	}
	res, err := s.w.ExecContext(ctx, "INSERT INTO signals(run_id, kind, payload, key, created_at) VALUES (?,?,?,?,?)",
		sg.RunID, sg.Kind, blob(sg.Payload), sg.Key, micros(sg.CreatedAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("signal %s to run %s: sent already: %w", sg.Key, sg.RunID, store.ErrConflict)
	}
	if err != nil {
		return err
	}
	if sg.ID, err = res.LastInsertId(); err != nil {
		return err
	}
	s.sigw.sent(sg.ID)
	return nil
}

// PendingSignals implements store.SignalStore.
func (s *Store) PendingSignals(ctx context.Context, runID string) ([]*store.Signal, error) {
	none, version, record := s.sigw.known(runID)
	if !none && !record {
		// The version is stale (the writer has not committed lately): read
		// it afresh, one small read that serves every run's next steps.
		at := time.Now()
		var v int64
		if err := s.reads.signalVersion.QueryRowContext(ctx).Scan(&v); err == nil {
			s.sigw.publish(v, at)
			none, version, record = s.sigw.known(runID)
		}
	}
	if none {
		return nil, nil
	}
	s.sigw.querying()
	rows, err := s.reads.signals.QueryContext(ctx, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Signal
	for rows.Next() {
		var sg store.Signal
		var created int64
		if err := rows.Scan(&sg.ID, &sg.RunID, &sg.Kind, &sg.Payload, &sg.Key, &created); err != nil {
			return nil, err
		}
		sg.CreatedAt = fromMicros(created)
		out = append(out, &sg)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 && record {
		s.sigw.found(runID, version)
	}
	return out, nil
}

// MarkSignalConsumed implements store.SignalStore.
func (s *Store) MarkSignalConsumed(ctx context.Context, id int64) error {
	_, err := s.w.ExecContext(ctx, "UPDATE signals SET consumed = 1 WHERE id = ?", id)
	return err
}
