package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

// Append implements store.EventStore. Each append is one transaction that
// locks the run's row, so it is ordered with claims and with other appends
// to the run in every process: the lease epoch and the next sequence number
// are checked under that lock. A buffered (non-durable) append commits with
// synchronous_commit off: it returns once committed in memory, and the next
// synchronous commit (a durable append, a release, a Flush) writes it to
// disk with everything before it, in order. Its failures are therefore
// returned by the call itself.
func (s *Store) Append(ctx context.Context, req store.AppendRequest) error {
	for i := range req.Events {
		if req.Events[i].RunID != req.RunID {
			return fmt.Errorf("postgres store: event for run %q appended to run %q", req.Events[i].RunID, req.RunID)
		}
	}
	if len(req.Events) == 0 && req.Update == nil && len(req.ConsumeSignals) == 0 {
		if req.Durable {
			return s.Flush(ctx, req.RunID)
		}
		return nil
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if !req.Durable {
			if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = off"); err != nil {
				return err
			}
		}
		return appendOne(ctx, tx, &req)
	})
}

func appendOne(ctx context.Context, tx pgx.Tx, req *store.AppendRequest) error {
	var lastSeq, epoch int64
	err := tx.QueryRow(ctx, "SELECT last_seq, lease_epoch FROM runs WHERE id = $1 FOR UPDATE", req.RunID).Scan(&lastSeq, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("append to run %s: %w", req.RunID, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if epoch != req.Epoch {
		return fmt.Errorf("append to run %s (epoch %d, current %d): %w", req.RunID, req.Epoch, epoch, store.ErrLeaseLost)
	}
	if len(req.Events) > 0 {
		rows := make([][]any, len(req.Events))
		for i := range req.Events {
			ev := &req.Events[i]
			if ev.Seq != lastSeq+1 {
				return fmt.Errorf("append to run %s: seq %d after %d: %w", req.RunID, ev.Seq, lastSeq, store.ErrConflict)
			}
			rows[i] = []any{ev.RunID, ev.Seq, ev.Type, ev.Step, micros(ev.At), blob(ev.Payload), ev.PrevHash[:], ev.Hash[:]}
			lastSeq = ev.Seq
		}
		if len(rows) == 1 {
			if _, err := tx.Exec(ctx, "INSERT INTO events(run_id, seq, type, step, at, payload, prev_hash, hash) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)",
				rows[0]...); err != nil {
				return fmt.Errorf("append to run %s: %w", req.RunID, err)
			}
		} else if _, err := tx.CopyFrom(ctx, pgx.Identifier{"events"},
			[]string{"run_id", "seq", "type", "step", "at", "payload", "prev_hash", "hash"}, pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("append to run %s: %w", req.RunID, err)
		}
	}
	for _, id := range req.ConsumeSignals {
		tag, err := tx.Exec(ctx, "UPDATE signals SET consumed = true WHERE id = $1 AND run_id = $2 AND NOT consumed", id, req.RunID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("append to run %s: signal %d already consumed: %w", req.RunID, id, store.ErrConflict)
		}
	}
	set, args := runUpdateSQL(req.Update, 3)
	_, err = tx.Exec(ctx, "UPDATE runs SET last_seq = $1"+set+" WHERE id = $2", append([]any{lastSeq, req.RunID}, args...)...)
	return err
}

// runUpdateSQL renders u's SET fragments (each starting with a comma),
// numbering parameters from $from.
func runUpdateSQL(u *store.RunUpdate, from int) (string, []any) {
	if u == nil {
		return "", nil
	}
	var q string
	var args []any
	add := func(col string, v any) {
		q += ", " + col + " = $" + strconv.Itoa(from+len(args))
		args = append(args, v)
	}
	if u.Status != nil {
		add("status", *u.Status)
	}
	if u.Steps != nil {
		add("steps", *u.Steps)
	}
	if u.InputTokens != nil {
		add("input_tokens", *u.InputTokens)
	}
	if u.OutputTokens != nil {
		add("output_tokens", *u.OutputTokens)
	}
	if u.CostMicros != nil {
		add("cost_micros", *u.CostMicros)
	}
	if u.Currency != nil {
		add("currency", *u.Currency)
	}
	if u.CostUnknown != nil {
		add("cost_unknown", *u.CostUnknown)
	}
	if u.Result != nil {
		add("result", *u.Result)
	}
	if u.WakeAt != nil {
		add("wake_at", micros(*u.WakeAt))
	}
	return q, args
}

// Flush implements store.EventStore: a transaction that is given an id
// commits synchronously, and the server's write-ahead log is flushed in
// order, so every buffered append committed before it is on disk after it.
func (s *Store) Flush(ctx context.Context, runID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT pg_current_xact_id()")
		return err
	})
}

// Events implements store.EventStore.
func (s *Store) Events(ctx context.Context, runID string, after int64, limit int) ([]store.Event, error) {
	q := "SELECT seq, type, step, at, payload, prev_hash, hash FROM events WHERE run_id = $1 AND seq > $2 ORDER BY seq"
	args := []any{runID, after}
	if limit > 0 {
		q += " LIMIT $3"
		args = append(args, limit)
	}
	return queryAll(ctx, s.pool, q, args, func(sc scanner) (store.Event, error) {
		ev := store.Event{RunID: runID}
		var at int64
		var prev, hash []byte
		if err := sc.Scan(&ev.Seq, &ev.Type, &ev.Step, &at, &ev.Payload, &prev, &hash); err != nil {
			return ev, err
		}
		ev.At = fromMicros(at)
		copy(ev.PrevHash[:], prev)
		copy(ev.Hash[:], hash)
		return ev, nil
	})
}
