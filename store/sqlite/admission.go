package sqlite

import (
	"context"
	"time"

	"github.com/agentplane/agentplane/store"
)

var _ store.RateStore = (*Store)(nil)

// AdmitRun implements store.APIStore. The transaction is BEGIN IMMEDIATE
// (the writer's _txlock): it holds the database's write lock from the
// first read, so admissions in every process on the directory are
// serialised.
func (s *Store) AdmitRun(ctx context.Context, tenant, runID string, since []time.Time, now time.Time,
	decide func(open int, cost []map[string]int64) error) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `DELETE FROM admissions WHERE tenant = ? AND (admitted_at <= ?
		OR EXISTS (SELECT 1 FROM runs WHERE runs.id = admissions.run_id))`, tenant, micros(now.Add(-store.AdmissionHold))); err != nil {
		return classify(err)
	}
	var open int
	if err := tx.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM runs WHERE tenant = ?1 AND status IN ('queued', 'running', 'waiting'))
		+ (SELECT count(*) FROM admissions WHERE tenant = ?1 AND run_id <> ?2)`, tenant, runID).Scan(&open); err != nil {
		return classify(err)
	}
	costs, err := costsSince(ctx, tx, tenant, since)
	if err != nil {
		return classify(err)
	}
	if err := decide(open, costs); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO admissions(run_id, tenant, admitted_at) VALUES (?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET admitted_at = excluded.admitted_at`, runID, tenant, micros(now)); err != nil {
		return classify(err)
	}
	return classify(tx.Commit())
}

// ForgetAdmission implements store.APIStore.
func (s *Store) ForgetAdmission(ctx context.Context, runID string) error {
	_, err := s.w.ExecContext(ctx, "DELETE FROM admissions WHERE run_id = ?", runID)
	return err
}

// costsSince sums the tenant's run costs created at or after each time.
func costsSince(ctx context.Context, q sqlQuerier, tenant string, since []time.Time) ([]map[string]int64, error) {
	costs := make([]map[string]int64, len(since))
	for i, t := range since {
		type row struct {
			cur string
			sum int64
		}
		rows, err := queryAll(ctx, q, "SELECT currency, coalesce(sum(cost_micros), 0) FROM runs WHERE tenant = ? AND created_at >= ? GROUP BY currency",
			[]any{tenant, micros(t)}, func(sc scanner) (row, error) {
				var r row
				return r, sc.Scan(&r.cur, &r.sum)
			})
		if err != nil {
			return nil, err
		}
		costs[i] = map[string]int64{}
		for _, r := range rows {
			if r.sum != 0 {
				costs[i][r.cur] += r.sum
			}
		}
	}
	return costs, nil
}

// TakeRate implements store.RateStore under the database's write lock.
func (s *Store) TakeRate(ctx context.Context, windows []store.RateWindow, now time.Time, charge bool) (int, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return -1, err
	}
	defer tx.Rollback()
	for i, w := range windows {
		if _, err := tx.ExecContext(ctx, "DELETE FROM rate_calls WHERE key = ? AND at <= ?", w.Key, micros(now.Add(-w.Per))); err != nil {
			return -1, classify(err)
		}
		var n int
		if err := tx.QueryRowContext(ctx, "SELECT count(*) FROM rate_calls WHERE key = ?", w.Key).Scan(&n); err != nil {
			return -1, classify(err)
		}
		if n >= w.N {
			return i, classify(tx.Commit())
		}
	}
	if charge {
		for _, w := range windows {
			if _, err := tx.ExecContext(ctx, "INSERT INTO rate_calls(key, at) VALUES (?, ?)", w.Key, micros(now)); err != nil {
				return -1, classify(err)
			}
		}
	}
	return -1, classify(tx.Commit())
}
