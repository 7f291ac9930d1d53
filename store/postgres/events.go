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
		return appendOne(ctx, tx, &req)
	})
}

// appendOne sends the whole append as one batch (one round trip inside
// the transaction): it locks the run's row and reads its head, then
// writes the events and the prompt hashes of its model calls, consumes the
// signals and updates the run, each write conditioned on the epoch and head
// the caller expects. The head read decides the error; on any error the
// transaction is rolled back, so nothing of a refused append remains.
func appendOne(ctx context.Context, tx pgx.Tx, req *store.AppendRequest) error {
	first := int64(0)
	if len(req.Events) > 0 {
		first = req.Events[0].Seq
		for i := range req.Events {
			if req.Events[i].Seq != first+int64(i) {
				return fmt.Errorf("append to run %s: seq %d after %d: %w", req.RunID, req.Events[i].Seq, first+int64(i)-1, store.ErrConflict)
			}
		}
	}
	b := &pgx.Batch{}
	if !req.Durable {
		b.Queue("SET LOCAL synchronous_commit = off")
	}
	b.Queue("SELECT last_seq, lease_epoch FROM runs WHERE id = $1 FOR UPDATE", req.RunID)
	// $1 run, $2 epoch, $3 the head the events follow (-1: any head).
	const fenced = "EXISTS (SELECT 1 FROM runs WHERE id = $1 AND lease_epoch = $2 AND ($3::bigint < 0 OR last_seq = $3::bigint))"
	head := int64(-1)
	if len(req.Events) > 0 {
		head = first - 1
		q := "INSERT INTO events(run_id, seq, type, step, at, payload, prev_hash, hash) SELECT v.* FROM (VALUES "
		args := []any{req.RunID, req.Epoch, head}
		for i := range req.Events {
			ev := &req.Events[i]
			if i > 0 {
				q += ", "
			}
			n := len(args)
			q += fmt.Sprintf("($1::text, $%d::bigint, $%d::text, $%d::integer, $%d::bigint, $%d::bytea, $%d::bytea, $%d::bytea)",
				n+1, n+2, n+3, n+4, n+5, n+6, n+7)
			args = append(args, ev.Seq, ev.Type, ev.Step, micros(ev.At), blob(ev.Payload), ev.PrevHash[:], ev.Hash[:])
		}
		b.Queue(q+") AS v WHERE "+fenced, args...)
	}
	// The prompt hashes of the model calls, indexed with the events.
	var prompts []string
	for i := range req.Events {
		if h := store.PromptHashOf(&req.Events[i]); h != "" {
			prompts = append(prompts, h)
		}
	}
	if len(prompts) > 0 {
		b.Queue(`INSERT INTO run_prompt_hashes(prompt_hash, run_id) SELECT DISTINCT h, $1 FROM unnest($4::text[]) AS h
			WHERE `+fenced+` ON CONFLICT DO NOTHING`, req.RunID, req.Epoch, head, prompts)
	}
	for _, id := range req.ConsumeSignals {
		b.Queue("UPDATE signals SET consumed = true WHERE id = $4 AND run_id = $1 AND NOT consumed AND "+fenced,
			req.RunID, req.Epoch, head, id)
	}
	last := head + int64(len(req.Events))
	set, uargs := runUpdateSQL(req.Update, 5)
	b.Queue("UPDATE runs SET last_seq = CASE WHEN $4::bigint < 0 THEN last_seq ELSE $4::bigint END"+set+" WHERE id = $1 AND "+fenced,
		append([]any{req.RunID, req.Epoch, head, last}, uargs...)...)
	// Every process hears of the append when it commits (feed.go).
	b.Queue(notifySQL, req.RunID, max(last, 0))

	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if !req.Durable {
		if _, err := res.Exec(); err != nil {
			return err
		}
	}
	var lastSeq, epoch int64
	err := res.QueryRow().Scan(&lastSeq, &epoch)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("append to run %s: %w", req.RunID, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	if epoch != req.Epoch {
		return fmt.Errorf("append to run %s (epoch %d, current %d): %w", req.RunID, req.Epoch, epoch, store.ErrLeaseLost)
	}
	if head >= 0 && lastSeq != head {
		return fmt.Errorf("append to run %s: seq %d after %d: %w", req.RunID, first, lastSeq, store.ErrConflict)
	}
	if len(req.Events) > 0 {
		if _, err := res.Exec(); err != nil {
			return fmt.Errorf("append to run %s: %w", req.RunID, err)
		}
	}
	if len(prompts) > 0 {
		if _, err := res.Exec(); err != nil {
			return fmt.Errorf("append to run %s: index prompt hashes: %w", req.RunID, err)
		}
	}
	for _, id := range req.ConsumeSignals {
		tag, err := res.Exec()
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("append to run %s: signal %d already consumed: %w", req.RunID, id, store.ErrConflict)
		}
	}
	if _, err := res.Exec(); err != nil {
		return err
	}
	if _, err := res.Exec(); err != nil {
		return fmt.Errorf("append to run %s: notify: %w", req.RunID, err)
	}
	return res.Close()
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
