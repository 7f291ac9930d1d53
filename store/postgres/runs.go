package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

const runCols = `id, tenant, user_id, agent, agent_version, task, mode, status, created_at, updated_at, wake_at,
 last_seq, steps, input_tokens, output_tokens, cost_micros, currency, cost_unknown, result, parent_run_id,
 lease_owner, lease_expires, lease_epoch, bindings`

func scanRun(sc scanner) (*store.Run, error) {
	var r store.Run
	var created, updated, wake, leaseExp int64
	var bindings string
	err := sc.Scan(&r.ID, &r.Tenant, &r.User, &r.Agent, &r.AgentVersion, &r.Task, &r.Mode, &r.Status,
		&created, &updated, &wake, &r.LastSeq, &r.Steps, &r.InputTokens, &r.OutputTokens, &r.CostMicros,
		&r.Currency, &r.CostUnknown, &r.Result, &r.ParentRunID, &r.LeaseOwner, &leaseExp, &r.LeaseEpoch, &bindings)
	if err != nil {
		return nil, err
	}
	if bindings != "" {
		if err := json.Unmarshal([]byte(bindings), &r.Bindings); err != nil {
			return nil, fmt.Errorf("run %s bindings: %w", r.ID, err)
		}
	}
	r.CreatedAt, r.UpdatedAt, r.WakeAt, r.LeaseExpires = fromMicros(created), fromMicros(updated), fromMicros(wake), fromMicros(leaseExp)
	return &r, nil
}

// CreateRun implements store.RunStore.
func (s *Store) CreateRun(ctx context.Context, r *store.Run) error {
	if r.ID == "" || strings.ContainsAny(r.ID, ":/ ") {
		return fmt.Errorf("create run: invalid id %q", r.ID)
	}
	if r.Status == "" {
		r.Status = store.StatusQueued
	}
	now := r.CreatedAt
	if now.IsZero() {
		now = time.Now().UTC()
		r.CreatedAt = now
	}
	r.UpdatedAt = now
	bindings := ""
	if len(r.Bindings) > 0 {
		b, err := json.Marshal(r.Bindings) // map keys sorted: canonical
		if err != nil {
			return err
		}
		bindings = string(b)
	}
	_, err := s.exec(ctx, `INSERT INTO runs(id, tenant, user_id, agent, agent_version, task, mode, status,
		created_at, updated_at, currency, parent_run_id, bindings) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12,$13)`,
		r.ID, r.Tenant, r.User, r.Agent, r.AgentVersion, r.Task, r.Mode, r.Status,
		micros(now), micros(now), r.Currency, r.ParentRunID, bindings)
	if err != nil {
		return fmt.Errorf("create run %s: %w", r.ID, err)
	}
	return nil
}

// GetRun implements store.RunStore.
func (s *Store) GetRun(ctx context.Context, id string) (*store.Run, error) {
	r, err := scanRun(s.queryRow(ctx, "SELECT "+runCols+" FROM runs WHERE id = $1", id))
	return r, notFound(err, "run "+id)
}

// ListRuns implements store.RunStore. A prompt hash is looked up in
// run_prompt_hashes, which each model_call append fills in its own
// transaction; the order (created_at, id), either way, is the
// runs_by_tenant_created index's.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]*store.Run, error) {
	q := "SELECT " + runCols + " FROM runs WHERE true"
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	eq := func(col string, v any) { q += " AND " + col + " = " + arg(v) }
	if f.Tenant != "" {
		eq("tenant", f.Tenant)
	}
	if f.Agent != "" {
		eq("agent", f.Agent)
	}
	if f.Status != "" {
		eq("status", f.Status)
	}
	if f.User != "" {
		eq("user_id", f.User)
	}
	if f.AgentVersion > 0 {
		eq("agent_version", f.AgentVersion)
	}
	if f.PromptHash != "" {
		h, ok := store.PromptHashHex(f.PromptHash)
		if !ok {
			return nil, nil
		}
		q += " AND id IN (SELECT run_id FROM run_prompt_hashes WHERE prompt_hash = " + arg(h) + ")"
	}
	if f.Newest {
		q += " ORDER BY created_at DESC, id DESC"
	} else {
		q += " ORDER BY created_at, id"
	}
	if f.Limit > 0 {
		q += " LIMIT " + arg(f.Limit)
	}
	if f.Offset > 0 {
		q += " OFFSET " + arg(f.Offset)
	}
	return queryAll(ctx, s.pool, q, args, scanRun)
}
