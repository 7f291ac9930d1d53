package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

var _ store.RateStore = (*Store)(nil)

// AdmitRun implements store.APIStore: the tenant's row of
// admission_tenants is locked (FOR UPDATE) for the transaction, so of
// admissions racing in any number of processes each sees those admitted
// before it.
func (s *Store) AdmitRun(ctx context.Context, tenant, runID string, since []time.Time, now time.Time,
	decide func(open int, cost []map[string]int64) error) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "INSERT INTO admission_tenants(tenant) VALUES ($1) ON CONFLICT DO NOTHING", tenant); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT tenant FROM admission_tenants WHERE tenant = $1 FOR UPDATE", tenant); err != nil {
			return err
		}
		hold := micros(now.Add(-store.AdmissionHold))
		if _, err := tx.Exec(ctx, `DELETE FROM admissions WHERE tenant = $1 AND (admitted_at <= $2
			OR EXISTS (SELECT 1 FROM runs WHERE runs.id = admissions.run_id))`, tenant, hold); err != nil {
			return err
		}
		var open int
		if err := tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM runs WHERE tenant = $1 AND status IN ('queued', 'running', 'waiting'))
			+ (SELECT count(*) FROM admissions WHERE tenant = $1 AND run_id <> $2)`, tenant, runID).Scan(&open); err != nil {
			return err
		}
		costs, err := costsSince(ctx, tx, tenant, since)
		if err != nil {
			return err
		}
		if err := decide(open, costs); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO admissions(run_id, tenant, admitted_at) VALUES ($1, $2, $3)
			ON CONFLICT (run_id) DO UPDATE SET admitted_at = excluded.admitted_at`, runID, tenant, micros(now))
		return err
	})
}

// ForgetAdmission implements store.APIStore.
func (s *Store) ForgetAdmission(ctx context.Context, runID string) error {
	_, err := s.exec(ctx, "DELETE FROM admissions WHERE run_id = $1", runID)
	return err
}

// costsSince sums the tenant's run costs created at or after each time.
func costsSince(ctx context.Context, q querier, tenant string, since []time.Time) ([]map[string]int64, error) {
	costs := make([]map[string]int64, len(since))
	for i, t := range since {
		type sum struct {
			cur string
			n   int64
		}
		rows, err := queryAll(ctx, q, "SELECT currency, coalesce(sum(cost_micros), 0)::bigint FROM runs WHERE tenant = $1 AND created_at >= $2 GROUP BY currency",
			[]any{tenant, micros(t)}, func(sc scanner) (sum, error) {
				var r sum
				return r, sc.Scan(&r.cur, &r.n)
			})
		if err != nil {
			return nil, err
		}
		costs[i] = map[string]int64{}
		for _, r := range rows {
			if r.n != 0 {
				costs[i][r.cur] += r.n
			}
		}
	}
	return costs, nil
}

// TakeRate implements store.RateStore: the windows' rows of rate_keys
// are locked in key order (so concurrent takes cannot deadlock), then
// each window's calls are pruned and counted, and the call is recorded.
func (s *Store) TakeRate(ctx context.Context, windows []store.RateWindow, now time.Time, charge bool) (int, error) {
	full := -1
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		keys := make([]string, len(windows))
		for i, w := range windows {
			keys[i] = w.Key
		}
		slices.Sort(keys)
		keys = slices.Compact(keys)
		if _, err := tx.Exec(ctx, "INSERT INTO rate_keys(key) SELECT unnest($1::text[]) ORDER BY 1 ON CONFLICT DO NOTHING", keys); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "SELECT key FROM rate_keys WHERE key = ANY($1) ORDER BY key FOR UPDATE", keys); err != nil {
			return err
		}
		for i, w := range windows {
			if _, err := tx.Exec(ctx, "DELETE FROM rate_calls WHERE key = $1 AND at <= $2", w.Key, micros(now.Add(-w.Per))); err != nil {
				return err
			}
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM rate_calls WHERE key = $1", w.Key).Scan(&n); err != nil {
				return err
			}
			if n >= w.N {
				full = i
				return nil
			}
		}
		if !charge {
			return nil
		}
		for _, w := range windows {
			if _, err := tx.Exec(ctx, "INSERT INTO rate_calls(key, at) VALUES ($1, $2)", w.Key, micros(now)); err != nil {
				return err
			}
		}
		return nil
	})
	return full, err
}
