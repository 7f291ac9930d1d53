package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

// PutAPIKey implements store.APIStore.
func (s *Store) PutAPIKey(ctx context.Context, k *store.APIKey) error {
	if k.ID == "" || k.Tenant == "" || k.User == "" {
		return errors.New("put api key: id, tenant and user are required")
	}
	_, err := s.exec(ctx, `INSERT INTO api_keys(id, tenant, user_id, name, secret_hash, scopes, created_at, revoked_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7,$8)`, k.ID, k.Tenant, k.User, k.Name, k.SecretHash[:], strings.Join(k.Scopes, " "),
		micros(k.CreatedAt), micros(k.RevokedAt))
	if err != nil {
		return fmt.Errorf("api key %s: %w", k.ID, err)
	}
	return nil
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
	k, err := scanAPIKey(s.queryRow(ctx, "SELECT "+apiKeyCols+" FROM api_keys WHERE id = $1", id))
	return k, notFound(err, "api key "+id)
}

// ListAPIKeys implements store.APIStore.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]*store.APIKey, error) {
	q, args := "SELECT "+apiKeyCols+" FROM api_keys", []any{}
	if tenant != "" {
		q += " WHERE tenant = $1"
		args = append(args, tenant)
	}
	return queryAll(ctx, s.pool, q+" ORDER BY created_at, id", args, scanAPIKey)
}

// RevokeAPIKey implements store.APIStore.
func (s *Store) RevokeAPIKey(ctx context.Context, id string, at time.Time) error {
	n, err := s.exec(ctx, "UPDATE api_keys SET revoked_at = $1 WHERE id = $2 AND revoked_at = 0", micros(at), id)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("api key %s (or it is revoked already): %w", id, store.ErrNotFound)
	}
	return nil
}

// ReserveIdempotencyKey implements store.APIStore. The primary key decides
// between racing reservations: the first insert wins and every other caller
// reads the winner's record.
func (s *Store) ReserveIdempotencyKey(ctx context.Context, rec *store.Idempotency) (*store.Idempotency, bool, error) {
	if rec.Tenant == "" || rec.Key == "" || rec.RunID == "" {
		return nil, false, errors.New("reserve idempotency key: tenant, key and run id are required")
	}
	n, err := s.exec(ctx, `INSERT INTO idempotency_keys(tenant, key, request_hash, run_id, created_at)
		VALUES ($1,$2,$3,$4,$5) ON CONFLICT(tenant, key) DO NOTHING`, rec.Tenant, rec.Key, rec.RequestHash[:], rec.RunID, micros(rec.CreatedAt))
	if err != nil {
		return nil, false, err
	}
	if n == 1 {
		return rec, true, nil
	}
	got := store.Idempotency{Tenant: rec.Tenant, Key: rec.Key}
	var hash []byte
	var created int64
	// A reservation deleted between the insert and this read (its request
	// was refused) is reported as a conflict the caller may retry.
	err = s.queryRow(ctx, "SELECT request_hash, run_id, created_at FROM idempotency_keys WHERE tenant = $1 AND key = $2",
		rec.Tenant, rec.Key).Scan(&hash, &got.RunID, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("idempotency key: released while it was read: %w", store.ErrConflict)
	}
	if err != nil {
		return nil, false, err
	}
	copy(got.RequestHash[:], hash)
	got.CreatedAt = fromMicros(created)
	return &got, false, nil
}

// DeleteIdempotencyKey implements store.APIStore.
func (s *Store) DeleteIdempotencyKey(ctx context.Context, tenant, key, runID string) error {
	_, err := s.exec(ctx, "DELETE FROM idempotency_keys WHERE tenant = $1 AND key = $2 AND run_id = $3", tenant, key, runID)
	return err
}

// ClaimAgentName implements store.APIStore.
func (s *Store) ClaimAgentName(ctx context.Context, agent, tenant string, at time.Time) (string, error) {
	if agent == "" || tenant == "" {
		return "", errors.New("claim agent name: agent and tenant are required")
	}
	if _, err := s.exec(ctx, "INSERT INTO agent_owners(agent, tenant, created_at) VALUES ($1,$2,$3) ON CONFLICT(agent) DO NOTHING",
		agent, tenant, micros(at)); err != nil {
		return "", err
	}
	var owner string
	err := s.queryRow(ctx, "SELECT tenant FROM agent_owners WHERE agent = $1", agent).Scan(&owner)
	return owner, err
}

// AgentOwner implements store.APIStore.
func (s *Store) AgentOwner(ctx context.Context, agent string) (string, error) {
	var owner string
	err := s.queryRow(ctx, "SELECT tenant FROM agent_owners WHERE agent = $1", agent).Scan(&owner)
	return owner, notFound(err, "owner of agent "+agent)
}

// AgentsOwnedBy implements store.APIStore.
func (s *Store) AgentsOwnedBy(ctx context.Context, tenant string) ([]string, error) {
	return queryAll(ctx, s.pool, "SELECT agent FROM agent_owners WHERE tenant = $1 ORDER BY agent", []any{tenant},
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
	_, err := s.exec(ctx, `INSERT INTO webhooks(tenant, url, secret, updated_at) VALUES ($1,$2,$3,$4)
		ON CONFLICT(tenant) DO UPDATE SET url = excluded.url, secret = excluded.secret, updated_at = excluded.updated_at`,
		w.Tenant, w.URL, w.Secret, micros(w.UpdatedAt))
	return err
}

// GetWebhook implements store.APIStore.
func (s *Store) GetWebhook(ctx context.Context, tenant string) (*store.Webhook, error) {
	w := store.Webhook{Tenant: tenant}
	var updated int64
	err := s.queryRow(ctx, "SELECT url, secret, updated_at FROM webhooks WHERE tenant = $1", tenant).Scan(&w.URL, &w.Secret, &updated)
	if err != nil {
		return nil, notFound(err, "webhook of tenant "+tenant)
	}
	w.UpdatedAt = fromMicros(updated)
	return &w, nil
}

// DeleteWebhook implements store.APIStore.
func (s *Store) DeleteWebhook(ctx context.Context, tenant string, at time.Time) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "DELETE FROM webhooks WHERE tenant = $1", tenant)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("webhook of tenant %s: %w", tenant, store.ErrNotFound)
		}
		_, err = tx.Exec(ctx, "UPDATE webhook_deliveries SET status = $1, updated_at = $2, last_error = $3 WHERE tenant = $4 AND status = $5",
			store.DeliveryDropped, micros(at), "dropped: the tenant's webhook was deleted", tenant, store.DeliveryPending)
		return err
	})
}

const terminalSQL = "('completed', 'completed_partial', 'failed', 'cancelled')"

// RunsToNotify implements store.APIStore.
func (s *Store) RunsToNotify(ctx context.Context, limit int) ([]*store.Run, error) {
	if limit <= 0 {
		limit = 100
	}
	return queryAll(ctx, s.pool, "SELECT "+runCols+" FROM runs WHERE NOT notified AND status IN "+terminalSQL+
		" ORDER BY updated_at LIMIT $1", []any{limit}, scanRun)
}

// MarkNotified implements store.APIStore. The conditional update decides
// between processes: one hands the run to the outbox, the others get
// store.ErrConflict.
func (s *Store) MarkNotified(ctx context.Context, runID string, d *store.Delivery) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE runs SET notified = true WHERE id = $1 AND NOT notified AND status IN "+terminalSQL, runID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("notify run %s: not an ended run waiting for notification: %w", runID, store.ErrConflict)
		}
		if d == nil {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO webhook_deliveries(id, tenant, run_id, event_type, url, payload, status,
			attempts, next_attempt_at, created_at, updated_at, last_error) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)`,
			d.ID, d.Tenant, d.RunID, d.EventType, d.URL, blob(d.Payload), d.Status, d.Attempts,
			micros(d.NextAttemptAt), micros(d.CreatedAt), micros(d.UpdatedAt), d.LastError)
		return err
	})
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

// ClaimDeliveries implements store.APIStore: the due rows are locked with
// FOR UPDATE SKIP LOCKED and leased in one statement, so concurrent
// dispatchers in any process skip what another is taking.
func (s *Store) ClaimDeliveries(ctx context.Context, now time.Time, lease time.Duration, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = 100
	}
	return queryAll(ctx, s.pool, "UPDATE webhook_deliveries SET next_attempt_at = $1 WHERE id IN (SELECT id FROM webhook_deliveries"+
		" WHERE status = 'pending' AND next_attempt_at <= $2 ORDER BY next_attempt_at, id LIMIT $3 FOR UPDATE SKIP LOCKED) RETURNING "+deliveryCols,
		[]any{micros(now.Add(lease)), micros(now), limit}, scanDelivery)
}

// RecordAttempt implements store.APIStore.
func (s *Store) RecordAttempt(ctx context.Context, a *store.DeliveryAttempt, d *store.Delivery) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO webhook_attempts(delivery_id, n, at, status_code, error, duration_ms) VALUES ($1,$2,$3,$4,$5,$6)
			ON CONFLICT(delivery_id, n) DO NOTHING`, a.DeliveryID, a.N, micros(a.At), a.StatusCode, a.Error, a.DurationMS)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("attempt %d of delivery %s: %w", a.N, a.DeliveryID, store.ErrConflict)
		}
		var status string
		if err := tx.QueryRow(ctx, "SELECT status FROM webhook_deliveries WHERE id = $1 FOR UPDATE", d.ID).Scan(&status); err != nil {
			return notFound(err, "delivery "+d.ID)
		}
		if status != store.DeliveryPending {
			return nil
		}
		_, err = tx.Exec(ctx, "UPDATE webhook_deliveries SET status = $1, attempts = $2, next_attempt_at = $3, updated_at = $4, last_error = $5 WHERE id = $6",
			d.Status, d.Attempts, micros(d.NextAttemptAt), micros(d.UpdatedAt), d.LastError, d.ID)
		return err
	})
}

// ListDeliveries implements store.APIStore.
func (s *Store) ListDeliveries(ctx context.Context, tenant, runID string, limit int) ([]*store.Delivery, error) {
	if limit <= 0 {
		limit = 100
	}
	q, args := "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE tenant = $1", []any{tenant}
	if runID != "" {
		q += " AND run_id = $2"
		args = append(args, runID)
	}
	q += fmt.Sprintf(" ORDER BY created_at DESC, id DESC LIMIT $%d", len(args)+1)
	return queryAll(ctx, s.pool, q, append(args, limit), scanDelivery)
}

// GetDelivery implements store.APIStore.
func (s *Store) GetDelivery(ctx context.Context, id string) (*store.Delivery, error) {
	d, err := scanDelivery(s.queryRow(ctx, "SELECT "+deliveryCols+" FROM webhook_deliveries WHERE id = $1", id))
	return d, notFound(err, "delivery "+id)
}

// ListAttempts implements store.APIStore.
func (s *Store) ListAttempts(ctx context.Context, deliveryID string) ([]*store.DeliveryAttempt, error) {
	return queryAll(ctx, s.pool, "SELECT delivery_id, n, at, status_code, error, duration_ms FROM webhook_attempts WHERE delivery_id = $1 ORDER BY n",
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
	if err := s.queryRow(ctx, "SELECT count(*) FROM runs WHERE tenant = $1 AND status IN ('queued', 'running', 'waiting')",
		tenant).Scan(&open); err != nil {
		return 0, nil, err
	}
	costs, err := costsSince(ctx, s.pool, tenant, since)
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
	_, err := s.exec(ctx, `INSERT INTO fair_queue(tenant, weight, finish) VALUES ($1, $2, 0)
		ON CONFLICT(tenant) DO UPDATE SET weight = excluded.weight`, tenant, weight)
	return err
}
