package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

// The lease methods of the run store: claiming (by id, next runnable,
// interactive only), renewal and release. A claim locks the run's row with
// FOR UPDATE SKIP LOCKED, so concurrent claimers in any process skip the
// rows others are taking and each run goes to one of them; the lease epoch
// bumped by a claim fences every append, renewal and release made under
// an older one.

// runnable is the condition of a claimable run at $1 (now, microseconds).
const runnable = `(
  status = 'queued'
  OR (status = 'running' AND lease_expires < $1)
  OR (status = 'waiting' AND lease_owner = '' AND ((wake_at > 0 AND wake_at <= $1)
      OR EXISTS (SELECT 1 FROM signals WHERE signals.run_id = runs.id AND NOT consumed)))
)`

// ClaimRun implements store.RunStore. Interactive (stream) runs come first,
// oldest first; background runs are shared between tenants by weighted
// fair queuing (see claimFair).
func (s *Store) ClaimRun(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claimNext(ctx, owner, ttl, now, false)
}

// ClaimInteractive implements store.APIStore.
func (s *Store) ClaimInteractive(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claimNext(ctx, owner, ttl, now, true)
}

// ClaimRunByID implements store.RunStore.
func (s *Store) ClaimRunByID(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	if err := s.boundLeases(ctx, now); err != nil {
		return nil, err
	}
	var r *store.Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var got string
		if err := tx.QueryRow(ctx, "SELECT id FROM runs WHERE id = $2 AND "+runnable+" FOR UPDATE SKIP LOCKED",
			micros(now), id).Scan(&got); err != nil {
			return err
		}
		var err error
		r, err = lease(ctx, tx, got, owner, ttl, now)
		return err
	})
	return r, claimErr(err)
}

func claimErr(err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	return err
}

// leaseTooLong matches leases that expire farther ahead of $1 (now) than
// the TTL they were granted for: impossible on one clock, so the clock
// that wrote them has since stepped back.
const leaseTooLong = "status = 'running' AND lease_expires > $1 + lease_ttl"

// boundLeases bounds every lease to its TTL from now (see the sqlite
// store's boundLeases for why). Idle polls only read.
func (s *Store) boundLeases(ctx context.Context, now time.Time) error {
	var id string
	err := s.queryRow(ctx, "SELECT id FROM runs WHERE "+leaseTooLong+" LIMIT 1", micros(now)).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	n, err := s.exec(ctx, "UPDATE runs SET lease_expires = $1 + lease_ttl WHERE "+leaseTooLong, micros(now))
	if err != nil {
		return err
	}
	s.log.Warn("leases ran past their TTL from now (the clock stepped back); bounded to now + TTL", "runs", n, "now", now)
	return nil
}

const (
	pickInteractive = "SELECT id FROM runs WHERE mode = 'stream' AND " + runnable +
		" ORDER BY created_at, id LIMIT 1 FOR UPDATE SKIP LOCKED"
	// pickFair orders background candidates by their tenant's start tag in
	// start-time fair queuing: max(the tenant's last finish, the system's
	// virtual time $2); ties go to the oldest run.
	pickFair = `SELECT runs.id, runs.tenant, greatest(coalesce(f.finish, 0), $2::float8) AS start
FROM runs LEFT JOIN fair_queue f ON f.tenant = runs.tenant
WHERE runs.mode <> 'stream' AND ` + runnable + `
ORDER BY start, runs.created_at, runs.id LIMIT 1 FOR UPDATE OF runs SKIP LOCKED`
)

// claimNext leases the next runnable run: interactive first, then (unless
// interactiveOnly) background by weighted fair queuing across tenants.
func (s *Store) claimNext(ctx context.Context, owner string, ttl time.Duration, now time.Time, interactiveOnly bool) (*store.Run, error) {
	if err := s.boundLeases(ctx, now); err != nil {
		return nil, err
	}
	var r *store.Run
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		var id string
		err := tx.QueryRow(ctx, pickInteractive, micros(now)).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) && !interactiveOnly {
			err = claimFair(ctx, tx, now, &id)
		}
		if err != nil {
			return err
		}
		r, err = lease(ctx, tx, id, owner, ttl, now)
		return err
	})
	return r, claimErr(err)
}

// claimFair picks the background run to claim and charges its tenant:
// its virtual finish time advances by 1/weight from the later of its
// stored finish and the run's start tag (the upsert holds the tenant's
// row lock, so claims of one tenant racing in several processes each
// advance it), and the system's virtual time to the run's start tag. Rows are locked in one order (the tenant's,
// then the system's), so concurrent claimers cannot deadlock.
func claimFair(ctx context.Context, tx pgx.Tx, now time.Time, id *string) error {
	var v float64
	if err := tx.QueryRow(ctx, "SELECT finish FROM fair_queue WHERE tenant = ''").Scan(&v); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	var tenant string
	var start float64
	if err := tx.QueryRow(ctx, pickFair, micros(now), v).Scan(id, &tenant, &start); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO fair_queue(tenant, weight, finish) VALUES ($1, 1, $2::float8 + 1)
		ON CONFLICT(tenant) DO UPDATE SET finish = greatest(fair_queue.finish, $2::float8) + 1.0 / fair_queue.weight`, tenant, start); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO fair_queue(tenant, weight, finish) VALUES ('', 1, $1::float8)
		ON CONFLICT(tenant) DO UPDATE SET finish = greatest(fair_queue.finish, $1::float8)`, start)
	return err
}

// lease gives the locked run id to owner in tx.
func lease(ctx context.Context, tx pgx.Tx, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return scanRun(tx.QueryRow(ctx, `UPDATE runs SET status = 'running', lease_owner = $1, lease_expires = $2, lease_ttl = $3,
		lease_epoch = lease_epoch + 1, updated_at = $4 WHERE id = $5 RETURNING `+runCols,
		owner, micros(now.Add(ttl)), ttl.Microseconds(), micros(now), id))
}

// RenewLease implements store.RunStore.
func (s *Store) RenewLease(ctx context.Context, id string, epoch int64, ttl time.Duration, now time.Time) error {
	n, err := s.exec(ctx, "UPDATE runs SET lease_expires = $1, lease_ttl = $2 WHERE id = $3 AND lease_epoch = $4 AND status = 'running'",
		micros(now.Add(ttl)), ttl.Microseconds(), id, epoch)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("renew lease of run %s: %w", id, store.ErrLeaseLost)
	}
	return nil
}

// ReleaseRun implements store.RunStore. Appends are written when they are
// made (see Append), so nothing is left to flush; the release commits
// synchronously, which makes every earlier buffered append durable too.
func (s *Store) ReleaseRun(ctx context.Context, id string, epoch int64, u store.RunUpdate) error {
	set, args := runUpdateSQL(&u, 4)
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, "UPDATE runs SET lease_owner = '', lease_expires = 0, lease_ttl = 0, updated_at = $1"+set+
			" WHERE id = $2 AND lease_epoch = $3", append([]any{micros(time.Now()), id, epoch}, args...)...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("release run %s: %w", id, store.ErrLeaseLost)
		}
		// Streams in every process re-read the run's status.
		return notifyChange(ctx, tx, id, 0)
	})
}
