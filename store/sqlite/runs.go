package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

const runCols = `id, tenant, user_id, agent, agent_version, task, mode, status, created_at, updated_at, wake_at,
 last_seq, steps, input_tokens, output_tokens, cost_micros, currency, cost_unknown, result, parent_run_id,
 lease_owner, lease_expires, lease_epoch`

type scanner interface{ Scan(...any) error }

func scanRun(sc scanner) (*store.Run, error) {
	var r store.Run
	var created, updated, wake, leaseExp int64
	var unknown int
	err := sc.Scan(&r.ID, &r.Tenant, &r.User, &r.Agent, &r.AgentVersion, &r.Task, &r.Mode, &r.Status,
		&created, &updated, &wake, &r.LastSeq, &r.Steps, &r.InputTokens, &r.OutputTokens, &r.CostMicros,
		&r.Currency, &unknown, &r.Result, &r.ParentRunID, &r.LeaseOwner, &leaseExp, &r.LeaseEpoch)
	if err != nil {
		return nil, err
	}
	r.CreatedAt, r.UpdatedAt, r.WakeAt, r.LeaseExpires = fromMicros(created), fromMicros(updated), fromMicros(wake), fromMicros(leaseExp)
	r.CostUnknown = unknown != 0
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
	_, err := s.w.ExecContext(ctx, `INSERT INTO runs(id, tenant, user_id, agent, agent_version, task, mode, status,
		created_at, updated_at, currency, parent_run_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		r.ID, r.Tenant, r.User, r.Agent, r.AgentVersion, r.Task, r.Mode, r.Status,
		micros(now), micros(now), r.Currency, r.ParentRunID)
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("create run %s: %w", r.ID, store.ErrConflict)
	}
	return err
}

// GetRun implements store.RunStore.
func (s *Store) GetRun(ctx context.Context, id string) (*store.Run, error) {
	r, err := scanRun(s.r.QueryRowContext(ctx, "SELECT "+runCols+" FROM runs WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("run %s: %w", id, store.ErrNotFound)
	}
	return r, err
}

// ListRuns implements store.RunStore.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]*store.Run, error) {
	q := "SELECT " + runCols + " FROM runs WHERE 1=1"
	var args []any
	if f.Tenant != "" {
		q += " AND tenant = ?"
		args = append(args, f.Tenant)
	}
	if f.Agent != "" {
		q += " AND agent = ?"
		args = append(args, f.Agent)
	}
	if f.Status != "" {
		q += " AND status = ?"
		args = append(args, f.Status)
	}
	q += " ORDER BY created_at, id"
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

const runnable = `(
  status = 'queued'
  OR (status = 'running' AND lease_expires < :now)
  OR (status = 'waiting' AND lease_owner = '' AND ((wake_at > 0 AND wake_at <= :now)
      OR EXISTS (SELECT 1 FROM signals WHERE signals.run_id = runs.id AND consumed = 0)))
)`

// ClaimRun implements store.RunStore. Interactive (stream) runs come first.
func (s *Store) ClaimRun(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claim(ctx, "", owner, ttl, now)
}

// ClaimRunByID implements store.RunStore.
func (s *Store) ClaimRunByID(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claim(ctx, id, owner, ttl, now)
}

func (s *Store) claim(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	q := "SELECT id FROM runs WHERE " + runnable
	args := []any{sql.Named("now", micros(now))}
	if id != "" {
		q += " AND id = :id"
		args = append(args, sql.Named("id", id))
	}
	q += " ORDER BY CASE mode WHEN 'stream' THEN 0 ELSE 1 END, created_at LIMIT 1"
	var got string
	if err := tx.QueryRowContext(ctx, q, args...).Scan(&got); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return nil, store.ErrNotFound
		}
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE runs SET status = 'running', lease_owner = ?, lease_expires = ?,
		lease_epoch = lease_epoch + 1, updated_at = ? WHERE id = ?`,
		owner, micros(now.Add(ttl)), micros(now), got); err != nil {
		return nil, err
	}
	r, err := scanRun(tx.QueryRowContext(ctx, "SELECT "+runCols+" FROM runs WHERE id = ?", got))
	if err != nil {
		return nil, err
	}
	if err := tx.Commit(); err != nil {
		return nil, err
	}
	s.clearSticky(got)
	return r, nil
}

// RenewLease implements store.RunStore.
func (s *Store) RenewLease(ctx context.Context, id string, epoch int64, ttl time.Duration, now time.Time) error {
	res, err := s.w.ExecContext(ctx, "UPDATE runs SET lease_expires = ? WHERE id = ? AND lease_epoch = ? AND status = 'running'",
		micros(now.Add(ttl)), id, epoch)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("renew lease of run %s: %w", id, store.ErrLeaseLost)
	}
	return nil
}

// ReleaseRun implements store.RunStore.
func (s *Store) ReleaseRun(ctx context.Context, id string, epoch int64, u store.RunUpdate) error {
	// Flush under the caller's epoch: only its own failed appends matter.
	if err := s.Append(ctx, store.AppendRequest{RunID: id, Epoch: epoch, Durable: true}); err != nil {
		return err
	}
	q, args := runUpdateSQL(&u)
	args = append([]any{micros(time.Now())}, args...)
	args = append(args, id, epoch)
	res, err := s.w.ExecContext(ctx, "UPDATE runs SET lease_owner = '', lease_expires = 0, updated_at = ?"+q+
		" WHERE id = ? AND lease_epoch = ?", args...)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("release run %s: %w", id, store.ErrLeaseLost)
	}
	return nil
}
