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

var _ store.APIStore = (*Store)(nil)

// PutAPIKey implements store.APIStore.
func (s *Store) PutAPIKey(ctx context.Context, k *store.APIKey) error {
	if k.ID == "" || k.Tenant == "" || k.User == "" {
		return errors.New("put api key: id, tenant and user are required")
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO api_keys(id, tenant, user_id, name, secret_hash, scopes, created_at, revoked_at)
		VALUES (?,?,?,?,?,?,?,?)`, k.ID, k.Tenant, k.User, k.Name, k.SecretHash[:], strings.Join(k.Scopes, " "),
		micros(k.CreatedAt), micros(k.RevokedAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("api key %s: %w", k.ID, store.ErrConflict)
	}
	return err
}

const apiKeyCols = "id, tenant, user_id, name, secret_hash, scopes, created_at, revoked_at"

func scanAPIKey(sc scanner) (*store.APIKey, error) {
	var k store.APIKey
	var hash []byte
	var scopes string
	var created, revoked int64
	if err := sc.Scan(&k.ID, &k.Tenant, &k.User, &k.Name, &hash, &scopes, &created, &revoked); err != nil {
		return nil, err
	}
	copy(k.SecretHash[:], hash)
	k.Scopes = strings.Fields(scopes)
	k.CreatedAt, k.RevokedAt = fromMicros(created), fromMicros(revoked)
	return &k, nil
}

// GetAPIKey implements store.APIStore.
func (s *Store) GetAPIKey(ctx context.Context, id string) (*store.APIKey, error) {
	k, err := scanAPIKey(s.r.QueryRowContext(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("api key %s: %w", id, store.ErrNotFound)
	}
	return k, err
}

// ListAPIKeys implements store.APIStore.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]*store.APIKey, error) {
	q, args := "SELECT "+apiKeyCols+" FROM api_keys", []any{}
	if tenant != "" {
		q += " WHERE tenant = ?"
		args = append(args, tenant)
	}
	return queryAll(ctx, s.r, q+" ORDER BY created_at, id", args, scanAPIKey)
}

// RevokeAPIKey implements store.APIStore.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.w.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE id = ? AND revoked_at = 0", micros(at), id)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("api key %s (or it is revoked already): %w", id, store.ErrNotFound)
	}
	return nil
}

// ReserveIdempotencyKey implements store.APIStore.
func (s *Store) ReserveIdempotencyKey(ctx context.Context, rec *store.Idempotency) (*store.Idempotency, bool, error) {
	if rec.Tenant == "" || rec.Key == "" || rec.RunID == "" {
		return nil, false, errors.New("reserve idempotency key: tenant, key and run id are required")
	}
	res, err := s.w.ExecContext(ctx, `INSERT INTO idempotency_keys(tenant, key, request_hash, run_id, created_at)
		VALUES (?,?,?,?,?) ON CONFLICT(tenant, key) DO NOTHING`, rec.Tenant, rec.Key, rec.RequestHash[:], rec.RunID, micros(rec.CreatedAt))
	if err != nil {
		return nil, false, err
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return rec, true, nil
	}
	var got store.Idempotency
	var hash []byte
	var created int64
	err = s.w.QueryRowContext(ctx, "SELECT tenant, key, request_hash, run_id, created_at FROM idempotency_keys WHERE tenant = ? AND key = ?",
		rec.Tenant, rec.Key).Scan(&got.Tenant, &got.Key, &hash, &got.RunID, &created)
	if err != nil {
		return nil, false, err
	}
	copy(got.RequestHash[:], hash)
	got.CreatedAt = fromMicros(created)
	return &got, false, nil
}

// DeleteIdempotencyKey implements store.APIStore.
func (s *Store) DeleteIdempotencyKey(ctx context.Context, tenant, key, runID string) error {
	_, err := s.w.ExecContext(ctx, "DELETE FROM idempotency_keys WHERE tenant = ? AND key = ? AND run_id = ?", tenant, key, runID)
	return err
}

// ClaimAgentName implements store.APIStore.
func (s *Store) ClaimAgentName(ctx context.Context, agent, tenant string, at time.Time) (string, error) {
	if agent == "" || tenant == "" {
		return "", errors.New("claim agent name: agent and tenant are required")
	}
	if _, err := s.w.ExecContext(ctx, "INSERT INTO agent_owners(agent, tenant, created_at) VALUES (?,?,?) ON CONFLICT(agent) DO NOTHING",
		agent, tenant, micros(at)); err != nil {
		return "", err
	}
	var owner string
	err := s.w.QueryRowContext(ctx, "SELECT tenant FROM agent_owners WHERE agent = ?", agent).Scan(&owner)
	return owner, err
}

// AgentOwner implements store.APIStore.
func (s *Store) AgentOwner(ctx context.Context, agent string) (string, error) {
	var owner string
	err := s.r.QueryRowContext(ctx, "SELECT tenant FROM agent_owners WHERE agent = ?", agent).Scan(&owner)
	if errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("owner of agent %s: %w", agent, store.ErrNotFound)
	}
	return owner, err
}

// AgentsOwnedBy implements store.APIStore.
func (s *Store) AgentsOwnedBy(ctx context.Context, tenant string) ([]string, error) {
	return queryAll(ctx, s.r, "SELECT agent FROM agent_owners WHERE tenant = ? ORDER BY agent", []any{tenant},
		func(sc scanner) (string, error) {
			var a string
			return a, sc.Scan(&a)
		})
}

// PutWebhook implements store.APIStore.
func (s *Store) PutWebhook(ctx context.Context, w *store.Webhook) error {
	if w.Tenant == "" || w.URL == "" || w.Secret == "" {
		return errors.New("put webhook: tenant, url and secret are required")
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO webhooks(tenant, url, secret, updated_at) VALUES (?,?,?,?)
		ON CONFLICT(tenant) DO UPDATE SET url = excluded.url, secret = excluded.secret, updated_at = excluded.updated_at`,
		w.Tenant, w.URL, w.Secret, micros(w.UpdatedAt))
	return err
}

// GetWebhook implements store.APIStore.
func (s *Store) GetWebhook(ctx context.Context, tenant string) (*store.Webhook, error) {
	w := store.Webhook{Tenant: tenant}
	var updated int64
	err := s.r.QueryRowContext(ctx, "SELECT url, secret, updated_at FROM webhooks WHERE tenant = ?", tenant).Scan(&w.URL, &w.Secret, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("webhook of tenant %s: %w", tenant, store.ErrNotFound)
	}
	w.UpdatedAt = fromMicros(updated)
	return &w, err
}

// DeleteWebhook implements store.APIStore.
func (s *Store) DeleteWebhook(ctx context.Context, tenant string, at time.Time) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "DELETE FROM webhooks WHERE tenant = ?", tenant)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("webhook of tenant %s: %w", tenant, store.ErrNotFound)
	}
	if _, err := tx.ExecContext(ctx, "UPDATE webhook_deliveries SET status = ?, updated_at = ?, last_error = ? WHERE tenant = ? AND status = ?",
		store.DeliveryDropped, micros(at), "dropped: the tenant's webhook was deleted", tenant, store.DeliveryPending); err != nil {
		return err
	}
	return classify(tx.Commit())
}

const terminalSQL = "('completed', 'completed_partial', 'failed', 'cancelled')"

// RunsToNotify implements store.APIStore.
func (s *Store) RunsToNotify(ctx context.Context, limit int) ([]*store.Run, error) {
	if limit <= 0 {
		limit = 100
	}
	return queryAll(ctx, s.r, "SELECT "+runCols+" FROM runs WHERE notified = 0 AND status IN "+terminalSQL+
		" ORDER BY updated_at LIMIT ?", []any{limit}, scanRun)
}

// MarkNotified implements store.APIStore.
func (s *Store) MarkNotified(ctx context.Context, runID string, d *store.Delivery) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, "UPDATE runs SET notified = 1 WHERE id = ? AND notified = 0 AND status IN "+terminalSQL, runID)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("notify run %s: not an ended run waiting for notification: %w", runID, store.ErrConflict)
	}
	if d != nil {
		if _, err := tx.ExecContext(ctx, `INSERT INTO webhook_deliveries(id, tenant, run_id, event_type, url, payload, status,
			attempts, next_attempt_at, created_at, updated_at, last_error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
			d.ID, d.Tenant, d.RunID, d.EventType, d.URL, blob(d.Payload), d.Status, d.Attempts,
			micros(d.NextAttemptAt), micros(d.CreatedAt), micros(d.UpdatedAt), d.LastError); err != nil {
			return err
		}
	}
	return classify(tx.Commit())
}

const deliveryCols = "id, tenant, run_id, event_type, url, payload, status, attempts, next_attempt_at, created_at, updated_at, last_error"

func scanDelivery(sc scanner) (*store.Delivery, error) {
	var d store.Delivery
	var next, created, updated int64
	if err := sc.Scan(&d.ID, &d.Tenant, &d.RunID, &d.EventType, &d.URL, &d.Payload, &d.Status, &d.Attempts,
		&next, &created, &updated, &d.LastError); err != nil {
		return nil, err
	}
	d.NextAttemptAt, d.CreatedAt, d.UpdatedAt = fromMicros(next), fromMicros(created), fromMicros(updated)
	return &d, nil
}

// ClaimDeliveries implements store.APIStore: one UPDATE ... RETURNING
// under the database's write lock, which every process shares.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = 100
	}
	ds, err := queryAll(ctx, s.w.DB, "UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id IN (SELECT id FROM webhook_deliveries"+
		" WHERE status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, id LIMIT ?) RETURNING "+deliveryCols,
		[]any{micros(now.Add(lease)), micros(now), limit}, scanDelivery)
	return ds, classify(err)
}

// RecordAttempt implements store.APIStore.
func (s *Store) RecordAttempt(ctx context.Context, a *store.DeliveryAttempt, d *store.Delivery) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "INSERT INTO webhook_attempts(delivery_id, n, at, status_code, error, duration_ms) VALUES (?,?,?,?,?,?)",
		a.DeliveryID, a.N, micros(a.At), a.StatusCode, a.Error, a.DurationMS); err != nil {
		if strings.Contains(err.Error(), "UNIQUE") || strings.Contains(err.Error(), "PRIMARY KEY") {
			return fmt.Errorf("attempt %d of delivery %s: %w", a.N, a.DeliveryID, store.ErrConflict)
		}
		return err
	}
	var status string
	if err := tx.QueryRowContext(ctx, "SELECT status FROM webhook_deliveries WHERE id = ?", d.ID).Scan(&status); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("delivery %s: %w", d.ID, store.ErrNotFound)
		}
		return err
	}
	if status == store.DeliveryPending {
		if _, err := tx.ExecContext(ctx, "UPDATE webhook_deliveries SET status = ?, attempts = ?, next_attempt_at = ?, updated_at = ?, last_error = ? WHERE id = ?",
			d.Status, d.Attempts, micros(d.NextAttemptAt), micros(d.UpdatedAt), d.LastError, d.ID); err != nil {
			return err
		}
	}
	return classify(tx.Commit())
}

// ListDeliveries implements store.APIStore.
func (s *Store) ListDeliveries(ctx context.Context, tenant, runID string, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE tenant = ?", []any{tenant}
	if runID != "" {
		q += " AND run_id = ?"
		args = append(args, runID)
	}
	return queryAll(ctx, s.r, q+" ORDER BY created_at DESC, id DESC LIMIT ?", append(args, limit), scanDelivery)
}

// GetDelivery implements store.APIStore.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.r.QueryRowContext(ctx, "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("delivery %s: %w", id, store.ErrNotFound)
	}
	return d, err
}

// ListAttempts implements store.APIStore.
func (s *Store) ListAttempts(ctx context.Context, deliveryID string) ([]*store.DeliveryAttempt, error) {
	return queryAll(ctx, s.r, "SELECT delivery_id, n, at, status_code, error, duration_ms FROM webhook_attempts WHERE delivery_id = ? ORDER BY n",
		[]any{deliveryID}, func(sc scanner) (*store.DeliveryAttempt, error) {
			var a store.DeliveryAttempt
			var at int64
			if err := sc.Scan(&a.DeliveryID, &a.N, &at, &a.StatusCode, &a.Error, &a.DurationMS); err != nil {
				return nil, err
			}
			a.At = fromMicros(at)
			return &a, nil
		})
}

// Usage implements store.APIStore.
func (s *Store) Usage(ctx context.Context, tenant string, since []time.Time) (int, []map[string]int64, error) {
	var open int
	if err := s.r.QueryRowContext(ctx, "SELECT count(*) FROM runs WHERE tenant = ? AND status IN ('queued', 'running', 'waiting')",
		tenant).Scan(&open); err != nil {
		return 0, nil, err
	}
	costs, err := costsSince(ctx, s.r, tenant, since)
	if err != nil {
		return 0, nil, err
	}
	return open, costs, nil
}

// SetFairWeight implements store.APIStore.
func (s *Store) SetFairWeight(ctx context.Context, tenant string, weight float64) error {
	if tenant == "" || !(weight > 0) {
		return fmt.Errorf("fair weight of tenant %q: want a tenant and a positive weight, got %v", tenant, weight)
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO fair_queue(tenant, weight, finish) VALUES (?, ?, 0)
		ON CONFLICT(tenant) DO UPDATE SET weight = excluded.weight`, tenant, weight)
	return err
}

// ClaimInteractive implements store.APIStore.
func (s *Store) ClaimInteractive(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claimNext(ctx, owner, ttl, now, true)
}

// sqlQuerier is a *sql.DB or a *sql.Tx.
type sqlQuerier interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
}

func queryAll[T any](ctx context.Context, db sqlQuerier, q string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
