package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

const runCols = `id, tenant, user_id, agent, agent_version, task, mode, status, created_at, updated_at, wake_at,
 last_seq, steps, input_tokens, output_tokens, cost_micros, currency, cost_unknown, result, parent_run_id,
 lease_owner, lease_expires, lease_epoch, bindings`

type scanner interface{ Scan(...any) error }

func scanRun(sc scanner) (*store.Run, error) {
	var r store.Run
	var created, updated, wake, leaseExp int64
	var unknown int
	var bindings string
	err := sc.Scan(&r.ID, &r.Tenant, &r.User, &r.Agent, &r.AgentVersion, &r.Task, &r.Mode, &r.Status,
		&created, &updated, &wake, &r.LastSeq, &r.Steps, &r.InputTokens, &r.OutputTokens, &r.CostMicros,
		&r.Currency, &unknown, &r.Result, &r.ParentRunID, &r.LeaseOwner, &leaseExp, &r.LeaseEpoch, &bindings)
	if err != nil {
		return nil, err
	}
	if bindings != "" {
		if err := json.Unmarshal([]byte(bindings), &r.Bindings); err != nil {
			return nil, fmt.Errorf("run %s bindings: %w", r.ID, err)
		}
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
	bindings := ""
	if len(r.Bindings) > 0 {
		b, err := json.Marshal(r.Bindings) // map keys sorted: canonical
		if err != nil {
			return err
		}
		bindings = string(b)
	}
	// In the writer's next group commit, as claims and releases are: run
	// starts under load no longer wait between two batches for a commit of
	// their own.
	err := s.writeInBatch(ctx, r.ID, func(wctx context.Context, tx *sql.Tx) error {
		if ctx.Err() != nil {
			return ctx.Err() // the caller gave up: create nothing
		}
		_, err := tx.StmtContext(wctx, s.stmts.createRun).ExecContext(wctx, r.ID, r.Tenant, r.User, r.Agent, r.AgentVersion, r.Task, r.Mode, r.Status,
			micros(now), micros(now), r.Currency, r.ParentRunID, bindings)
		return err
	})
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("create run %s: %w", r.ID, store.ErrConflict)
	}
	return classify(err)
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
	if f.User != "" {
		q += " AND user_id = ?"
		args = append(args, f.User)
	}
	if f.AgentVersion > 0 {
		q += " AND agent_version = ?"
		args = append(args, f.AgentVersion)
	}
	if f.PromptHash != "" {
		h, ok := store.PromptHashHex(f.PromptHash)
		if !ok {
			return nil, nil
		}
		q += " AND id IN (SELECT run_id FROM run_prompt_hashes WHERE prompt_hash = ?)"
		args = append(args, h)
	}
	if f.Newest {
		q += " ORDER BY created_at DESC, id DESC"
	} else {
		q += " ORDER BY created_at, id"
	}
	if f.Limit > 0 || f.Offset > 0 {
		limit := f.Limit
		if limit <= 0 {
			limit = -1 // SQLite: no limit
		}
		q += " LIMIT ? OFFSET ?"
		args = append(args, limit, f.Offset)
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

// ClaimRun implements store.RunStore. Interactive (stream) runs come first,
// oldest first; background runs are shared between tenants by weighted fair
// queuing (see claimFair).
func (s *Store) ClaimRun(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claimNext(ctx, owner, ttl, now, false)
}

// ClaimRunByID implements store.RunStore.
func (s *Store) ClaimRunByID(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	if err := s.boundLeases(ctx, now); err != nil {
		return nil, err
	}
	return s.claim(ctx, id, owner, ttl, now)
}

// leaseTooLong matches leases that expire farther ahead of now than the
// TTL they were granted for: impossible on one clock, so the clock that
// wrote them has since stepped back.
const leaseTooLong = "status = 'running' AND lease_expires > :now + lease_ttl"

// boundLeases bounds every lease to its TTL from now. Lease expiry is wall
// time written by the claimer's clock; after that clock steps back (an NTP
// step, a VM restore), a dead claimer's lease would otherwise hold its run
// for as long as the step. Bounding keeps a live claimer's lease (its next
// renewal, at a third of the TTL, writes a fresh expiry) and lets a dead
// one's run be taken over one TTL later, whatever the clock did. Idle
// polls only read.
func (s *Store) boundLeases(ctx context.Context, now time.Time) error {
	nowArg := sql.Named("now", micros(now))
	var id string
	err := s.r.QueryRowContext(ctx, "SELECT id FROM runs WHERE "+leaseTooLong+" LIMIT 1", nowArg).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, "UPDATE runs SET lease_expires = :now + lease_ttl WHERE "+leaseTooLong, nowArg)
	if err != nil {
		return err
	}
	n, _ := res.RowsAffected()
	s.log.Warn("leases ran past their TTL from now (the clock stepped back); bounded to now + TTL", "runs", n, "now", now)
	return nil
}

// runnableParts are the ways a run becomes runnable, each one an indexed
// lookup (runs_by_status, runs_by_lease, runs_by_wake, signals_unconsumed),
// so that claiming stays cheap however many runs wait.
var runnableParts = []string{
	"status = 'queued'",
	"status = 'running' AND lease_expires < :now",
	"status = 'waiting' AND lease_owner = '' AND wake_at > 0 AND wake_at <= :now",
	// Unary + keeps the planner on the primary key, driven by the few
	// unconsumed signals, rather than scanning every waiting run.
	"id IN (SELECT run_id FROM signals WHERE consumed = 0) AND +status = 'waiting' AND lease_owner = ''",
}

// candidates selects cols of the runnable runs that match filter, as a
// union of the indexed parts (a waiting run with a due timer and a signal
// appears twice, which no caller minds).
func candidates(cols, filter string) string {
	qs := make([]string, len(runnableParts))
	for i, p := range runnableParts {
		qs[i] = "SELECT " + cols + " FROM runs WHERE " + p + " AND " + filter
	}
	return strings.Join(qs, " UNION ALL ")
}

var (
	pickInteractive = candidates("id, created_at", "mode = 'stream'") + " ORDER BY created_at, id LIMIT 1"
	// pickFair orders background candidates by their tenant's start tag in
	// start-time fair queuing: max(the tenant's last finish, the system's
	// virtual time); ties go to the oldest run.
	pickFair = "WITH c AS (" + candidates("id, tenant, created_at", "mode != 'stream'") + `)
SELECT c.id, c.tenant, max(coalesce(f.finish, 0), :v) AS start FROM c LEFT JOIN fair_queue f ON f.tenant = c.tenant
ORDER BY start, c.created_at, c.id LIMIT 1`
)

// claimNext leases the next runnable run: interactive first, then (unless
// interactiveOnly) background by weighted fair queuing across tenants. Each
// claimed background run advances its tenant's virtual finish time by
// 1/weight, so over time tenants get claims in proportion to their weights
// and a tenant with a long backlog cannot starve one that just arrived.
func (s *Store) claimNext(ctx context.Context, owner string, ttl time.Duration, now time.Time, interactiveOnly bool) (*store.Run, error) {
	if err := s.boundLeases(ctx, now); err != nil {
		return nil, err
	}
	nowArg := sql.Named("now", micros(now))
	// Look first on a reader, so that idle polling never takes the write lock.
	var id string
	var created int64
	err := s.r.QueryRowContext(ctx, pickInteractive, nowArg).Scan(&id, &created)
	if errors.Is(err, sql.ErrNoRows) && !interactiveOnly {
		var tenant string
		var start float64
		err = s.r.QueryRowContext(ctx, pickFair, nowArg, sql.Named("v", 0.0)).Scan(&id, &tenant, &start)
	}
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, err
	}

	// Then claim in the writer's next group commit, looking again there:
	// another worker may have claimed the run meanwhile.
	return s.claimInBatch(ctx, "", owner, ttl, now, func(wctx context.Context, tx *sql.Tx) (string, error) {
		var id string
		err := tx.QueryRowContext(wctx, pickInteractive, nowArg).Scan(&id, &created)
		if errors.Is(err, sql.ErrNoRows) && !interactiveOnly {
			err = s.claimFair(wctx, tx, nowArg, &id)
		}
		return id, err
	})
}

// claimFair picks the background run to claim and charges its tenant.
func (s *Store) claimFair(ctx context.Context, tx *sql.Tx, nowArg sql.NamedArg, id *string) error {
	var v float64
	if err := tx.QueryRowContext(ctx, "SELECT finish FROM fair_queue WHERE tenant = ''").Scan(&v); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	var tenant string
	var start float64
	if err := tx.QueryRowContext(ctx, pickFair, nowArg, sql.Named("v", v)).Scan(id, &tenant, &start); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO fair_queue(tenant, weight, finish) VALUES (?1, 1, ?2 + 1)
		ON CONFLICT(tenant) DO UPDATE SET finish = ?2 + 1.0 / weight`, tenant, start); err != nil {
		return err
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO fair_queue(tenant, weight, finish) VALUES ('', 1, ?1)
		ON CONFLICT(tenant) DO UPDATE SET finish = ?1`, start)
	return err
}

const runnable = `(
  status = 'queued'
  OR (status = 'running' AND lease_expires < :now)
  OR (status = 'waiting' AND lease_owner = '' AND ((wake_at > 0 AND wake_at <= :now)
      OR EXISTS (SELECT 1 FROM signals WHERE signals.run_id = runs.id AND consumed = 0)))
)`

// claim leases run id if it is runnable, in the writer's next group commit.
func (s *Store) claim(ctx context.Context, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return s.claimInBatch(ctx, id, owner, ttl, now, func(wctx context.Context, tx *sql.Tx) (string, error) {
		var got string
		err := tx.StmtContext(wctx, s.stmts.claimable).QueryRowContext(wctx, sql.Named("now", micros(now)), sql.Named("id", id)).Scan(&got)
		return got, err
	})
}

// claimInBatch leases to owner the run pick chooses (sql.ErrNoRows: none)
// in the writer's next group commit, looking there because another worker
// may have claimed it meanwhile. runID is the run's id when known.
func (s *Store) claimInBatch(ctx context.Context, runID, owner string, ttl time.Duration, now time.Time,
	pick func(ctx context.Context, tx *sql.Tx) (string, error)) (*store.Run, error) {
	var r *store.Run
	err := s.writeInBatch(ctx, runID, func(wctx context.Context, tx *sql.Tx) error {
		r = nil
		if ctx.Err() != nil {
			return nil // the caller gave up: claim nothing
		}
		id, err := pick(wctx, tx)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		r, err = s.stmts.lease(wctx, tx, id, owner, ttl, now)
		return err
	})
	return s.claimed(ctx, r, err)
}

// claimed is the outcome of a claim made in a batch: the leased run, or
// why there is none.
func (s *Store) claimed(ctx context.Context, r *store.Run, err error) (*store.Run, error) {
	if err != nil {
		return nil, classify(err)
	}
	if r == nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, store.ErrNotFound
	}
	s.clearSticky(r.ID)
	return r, nil
}

// lease gives run id to owner in tx.
func (w *writeStmts) lease(ctx context.Context, tx *sql.Tx, id, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	if _, err := tx.StmtContext(ctx, w.leaseRun).ExecContext(ctx, owner, micros(now.Add(ttl)), ttl.Microseconds(), micros(now), id); err != nil {
		return nil, err
	}
	return scanRun(tx.StmtContext(ctx, w.runByID).QueryRowContext(ctx, id))
}

// releaseOp is the writer's op that releases run id under epoch with u;
// *released says, once it committed, whether the lease was still epoch's.
func (s *Store) releaseOp(id string, epoch int64, u store.RunUpdate) (op *appendOp, released *bool) {
	var status, result, wake any
	if u.Status != nil {
		status = *u.Status
	}
	if u.Result != nil {
		result = *u.Result
	}
	if u.WakeAt != nil {
		wake = micros(*u.WakeAt)
	}
	var unknown any
	if u.CostUnknown != nil {
		unknown = boolInt(*u.CostUnknown)
	}
	released = new(bool)
	op = &appendOp{req: store.AppendRequest{RunID: id, Epoch: epoch, Durable: true}, done: make(chan error, 1)}
	op.write = func(wctx context.Context, tx *sql.Tx) error {
		*released = false
		// An append of this worker's that failed in an earlier batch.
		if err := s.takeSticky(id, epoch); err != nil {
			return err
		}
		res, err := tx.StmtContext(wctx, s.stmts.releaseRun).ExecContext(wctx, micros(time.Now()), status, opt(u.Steps), opt(u.InputTokens),
			opt(u.OutputTokens), opt(u.CostMicros), opt(u.Currency), unknown, result, wake, id, epoch)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		*released = n == 1
		return nil
	}
	return op, released
}

// RenewLease implements store.RunStore.
func (s *Store) RenewLease(ctx context.Context, id string, epoch int64, ttl time.Duration, now time.Time) error {
	var renewed bool
	err := s.writeInBatch(ctx, id, func(wctx context.Context, tx *sql.Tx) error {
		res, err := tx.StmtContext(wctx, s.stmts.renew).ExecContext(wctx, micros(now.Add(ttl)), ttl.Microseconds(), id, epoch)
		if err != nil {
			return err
		}
		n, _ := res.RowsAffected()
		renewed = n == 1
		return nil
	})
	if err != nil {
		return classify(err)
	}
	if !renewed {
		return fmt.Errorf("renew lease of run %s: %w", id, store.ErrLeaseLost)
	}
	return nil
}

// ReleaseRun implements store.RunStore. The release is an op of the
// writer's queue under the caller's epoch, after the run's appends: it
// fails with the first of them that failed (only the caller's own failed
// appends matter), and commits in their batch.
func (s *Store) ReleaseRun(ctx context.Context, id string, epoch int64, u store.RunUpdate) error {
	if err := s.takeSticky(id, epoch); err != nil {
		return err
	}
	op, released := s.releaseOp(id, epoch, u)
	if err := s.enqueue(ctx, op); err != nil {
		return err
	}
	// Waited for even if ctx ends: the op sets *released.
	if err := <-op.done; err != nil {
		return classify(err)
	}
	if err := s.takeSticky(id, epoch); err != nil {
		return err
	}
	if !*released {
		return fmt.Errorf("release run %s: %w", id, store.ErrLeaseLost)
	}
	s.sigw.forget(id)
	return nil
}
