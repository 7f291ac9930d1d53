package postgres

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

// PutAgentVersion implements store.AgentStore.
func (s *Store) PutAgentVersion(ctx context.Context, v *store.AgentVersion) (bool, error) {
	if v.CreatedAt.IsZero() {
		v.CreatedAt = time.Now().UTC()
	}
	n, err := s.exec(ctx, `INSERT INTO agent_versions(name, version, spec, spec_hash, created_at) VALUES ($1,$2,$3,$4,$5)
		ON CONFLICT(name, version) DO NOTHING`, v.Name, v.Version, blob(v.Spec), v.SpecHash[:], micros(v.CreatedAt))
	if err != nil || n == 1 {
		return n == 1, err
	}
	var hash []byte
	if err := s.queryRow(ctx, "SELECT spec_hash FROM agent_versions WHERE name = $1 AND version = $2", v.Name, v.Version).Scan(&hash); err != nil {
		return false, err
	}
	if bytes.Equal(hash, v.SpecHash[:]) {
		return false, nil
	}
	return false, fmt.Errorf("agent %s version %d: %w", v.Name, v.Version, store.ErrConflict)
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
	v, err := scanAgent(s.queryRow(ctx, "SELECT "+agentCols+" FROM agent_versions WHERE name = $1 AND version = $2", name, version))
	return v, notFound(err, fmt.Sprintf("agent %s version %d", name, version))
}

// ListAgentVersions implements store.AgentStore.
func (s *Store) ListAgentVersions(ctx context.Context, name string) ([]*store.AgentVersion, error) {
	q, args := "SELECT "+agentCols+" FROM agent_versions", []any{}
	if name != "" {
		q += " WHERE name = $1"
		args = append(args, name)
	}
	return queryAll(ctx, s.pool, q+" ORDER BY name, version", args, scanAgent)
}

// RetireAgentVersion implements store.AgentStore.
func (s *Store) RetireAgentVersion(ctx context.Context, name string, version int, at time.Time) error {
	if at.IsZero() {
		at = time.Now().UTC()
	}
	n, err := s.exec(ctx, `UPDATE agent_versions SET retired_at = CASE WHEN retired_at = 0 THEN $1 ELSE retired_at END
		WHERE name = $2 AND version = $3`, micros(at), name, version)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("agent %s version %d: %w", name, version, store.ErrNotFound)
	}
	return nil
}

// SetAlias implements store.AgentStore.
func (s *Store) SetAlias(ctx context.Context, a *store.Alias) error {
	if a.UpdatedAt.IsZero() {
		a.UpdatedAt = time.Now().UTC()
	}
	_, err := s.exec(ctx, `INSERT INTO aliases(agent, alias, version, canary_version, canary_percent, updated_at)
		VALUES ($1,$2,$3,$4,$5,$6) ON CONFLICT(agent, alias) DO UPDATE SET version = excluded.version,
		canary_version = excluded.canary_version, canary_percent = excluded.canary_percent, updated_at = excluded.updated_at`,
		a.Agent, a.Alias, a.Version, a.CanaryVersion, a.CanaryPercent, micros(a.UpdatedAt))
	return err
}

const aliasCols = "agent, alias, version, canary_version, canary_percent, updated_at"

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
	a, err := scanAlias(s.queryRow(ctx, "SELECT "+aliasCols+" FROM aliases WHERE agent = $1 AND alias = $2", agent, alias))
	return a, notFound(err, fmt.Sprintf("alias %s@%s", agent, alias))
}

// ListAliases implements store.AgentStore.
func (s *Store) ListAliases(ctx context.Context, agent string) ([]*store.Alias, error) {
	q, args := "SELECT "+aliasCols+" FROM aliases", []any{}
	if agent != "" {
		q += " WHERE agent = $1"
		args = append(args, agent)
	}
	return queryAll(ctx, s.pool, q+" ORDER BY agent, alias", args, scanAlias)
}

// PutTool implements store.ToolStore: the manifest is stored by hash and
// becomes the current one for its name.
func (s *Store) PutTool(ctx context.Context, t *store.ToolRecord) error {
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now().UTC()
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO tools(hash, name, manifest, created_at) VALUES ($1,$2,$3,$4) ON CONFLICT(hash) DO NOTHING",
			t.Hash[:], t.Name, blob(t.Manifest), micros(t.CreatedAt)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, "INSERT INTO tool_heads(name, hash) VALUES ($1,$2) ON CONFLICT(name) DO UPDATE SET hash = excluded.hash",
			t.Name, t.Hash[:])
		return err
	})
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

const toolHeads = "SELECT t.name, t.manifest, t.hash, t.created_at FROM tool_heads h JOIN tools t ON t.hash = h.hash"

// GetTool implements store.ToolStore.
func (s *Store) GetTool(ctx context.Context, name string) (*store.ToolRecord, error) {
	t, err := scanTool(s.queryRow(ctx, toolHeads+" WHERE h.name = $1", name))
	return t, notFound(err, "tool "+name)
}

// GetToolByHash implements store.ToolStore.
func (s *Store) GetToolByHash(ctx context.Context, sum [32]byte) (*store.ToolRecord, error) {
	t, err := scanTool(s.queryRow(ctx, "SELECT name, manifest, hash, created_at FROM tools WHERE hash = $1", sum[:]))
	return t, notFound(err, fmt.Sprintf("tool %x", sum[:6]))
}

// ListTools implements store.ToolStore.
func (s *Store) ListTools(ctx context.Context) ([]*store.ToolRecord, error) {
	return queryAll(ctx, s.pool, toolHeads+" ORDER BY t.name", nil, scanTool)
}

// SendSignal implements store.SignalStore. A keyed signal is unique for its
// run (signals_by_key): of racing sends, the first insert wins.
func (s *Store) SendSignal(ctx context.Context, sg *store.Signal) error {
	if sg.CreatedAt.IsZero() {
		sg.CreatedAt = time.Now().UTC()
	}
	err := s.queryRow(ctx, "INSERT INTO signals(run_id, kind, payload, key, created_at) VALUES ($1,$2,$3,$4,$5) RETURNING id",
		sg.RunID, sg.Kind, blob(sg.Payload), sg.Key, micros(sg.CreatedAt)).Scan(&sg.ID)
	if errors.Is(err, store.ErrConflict) {
		return fmt.Errorf("signal %s to run %s: sent already: %w", sg.Key, sg.RunID, store.ErrConflict)
	}
	return err
}

// PendingSignals implements store.SignalStore.
func (s *Store) PendingSignals(ctx context.Context, runID string) ([]*store.Signal, error) {
	return queryAll(ctx, s.pool, "SELECT id, run_id, kind, payload, key, created_at FROM signals WHERE run_id = $1 AND NOT consumed ORDER BY id",
		[]any{runID}, func(sc scanner) (*store.Signal, error) {
			var sg store.Signal
			var created int64
			if err := sc.Scan(&sg.ID, &sg.RunID, &sg.Kind, &sg.Payload, &sg.Key, &created); err != nil {
				return nil, err
			}
			sg.CreatedAt = fromMicros(created)
			return &sg, nil
		})
}

// MarkSignalConsumed implements store.SignalStore.
func (s *Store) MarkSignalConsumed(ctx context.Context, id int64) error {
	_, err := s.exec(ctx, "UPDATE signals SET consumed = true WHERE id = $1", id)
	return err
}
