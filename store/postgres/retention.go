package postgres

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

var _ store.RetentionStore = (*Store)(nil)

const blobKeyCols = store.BlobKeyColumns

func scanBlobKey(sc scanner) (*store.BlobKey, error) { return store.ScanBlobKey(sc.Scan) }

// PutBlobKey implements store.RetentionStore.
func (s *Store) PutBlobKey(ctx context.Context, k *store.BlobKey) (*store.BlobKey, error) {
	if k.Wrapped == nil {
		return nil, errors.New("put blob key: no wrapped key")
	}
	return scanBlobKey(s.queryRow(ctx, `INSERT INTO blob_keys(`+blobKeyCols+`) VALUES ($1,$2,$3,$4,$5,$6,$7,'',0)
		ON CONFLICT (tenant, sum) DO UPDATE SET
		  size = CASE WHEN blob_keys.wrapped IS NULL THEN excluded.size ELSE blob_keys.size END,
		  object = CASE WHEN blob_keys.wrapped IS NULL THEN excluded.object ELSE blob_keys.object END,
		  created_at = CASE WHEN blob_keys.wrapped IS NULL THEN excluded.created_at ELSE blob_keys.created_at END,
		  reason = CASE WHEN blob_keys.wrapped IS NULL THEN '' ELSE blob_keys.reason END,
		  removed_at = CASE WHEN blob_keys.wrapped IS NULL THEN 0 ELSE blob_keys.removed_at END,
		  wrapped = COALESCE(blob_keys.wrapped, excluded.wrapped),
		  last_put = GREATEST(blob_keys.last_put, excluded.last_put)
		RETURNING `+blobKeyCols,
		k.Tenant, k.Sum[:], k.Size, k.Wrapped, k.ObjectColumn(), micros(k.CreatedAt), micros(k.LastPut)))
}

// GetBlobKey implements store.RetentionStore.
func (s *Store) GetBlobKey(ctx context.Context, tenant string, sum [32]byte) (*store.BlobKey, error) {
	k, err := scanBlobKey(s.queryRow(ctx, "SELECT "+blobKeyCols+" FROM blob_keys WHERE tenant = $1 AND sum = $2", tenant, sum[:]))
	return k, notFound(err, fmt.Sprintf("blob key %x", sum[:6]))
}

// RemoveBlobKey implements store.RetentionStore. The row is locked, so a
// put racing the removal either lands before (and is seen) or after (and
// replaces the removed key with a new one).
func (s *Store) RemoveBlobKey(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var lastPut int64
		err := tx.QueryRow(ctx, "SELECT last_put FROM blob_keys WHERE tenant = $1 AND sum = $2 AND wrapped IS NOT NULL FOR UPDATE", tenant, sum[:]).Scan(&lastPut)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return err
		case lastPut > micros(notPutAfter):
			return fmt.Errorf("blob %x was put again since the purge began: %w", sum[:6], store.ErrConflict)
		}
		_, err = tx.Exec(ctx, `INSERT INTO blob_keys(`+blobKeyCols+`) VALUES ($1,$2,$3,NULL,'\x',$4,0,$5,$4)
			ON CONFLICT (tenant, sum) DO UPDATE SET wrapped = NULL,
			  reason = CASE WHEN blob_keys.wrapped IS NULL AND blob_keys.reason <> '' THEN blob_keys.reason ELSE excluded.reason END,
			  removed_at = CASE WHEN blob_keys.wrapped IS NULL AND blob_keys.removed_at <> 0 THEN blob_keys.removed_at ELSE excluded.removed_at END`,
			tenant, sum[:], size, micros(at), reason)
		return err
	})
}

// CheckBlobKey records check (blobcrypt.CheckValue of the master key) on
// the first call and refuses a different one afterwards: every process
// sharing the database must seal with the same key.
func (s *Store) CheckBlobKey(ctx context.Context, check []byte) error {
	var v []byte
	if err := s.queryRow(ctx, `INSERT INTO blob_key_check(id, value) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET value = blob_key_check.value RETURNING value`, check).Scan(&v); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(v, check) != 1 {
		return errors.New("the blob master key is not the one this database's blobs were sealed with: give every process the same key (AGENTPLANE_BLOB_KEY)")
	}
	return nil
}

// storedBlobKey returns the master key kept in the database, created by
// the first caller.
func (s *Store) storedBlobKey(ctx context.Context) ([]byte, error) {
	k := make([]byte, 32)
	rand.Read(k)
	var v []byte
	err := s.queryRow(ctx, `INSERT INTO blob_master_key(id, value) VALUES (1, $1)
		ON CONFLICT (id) DO UPDATE SET value = blob_master_key.value RETURNING value`, k).Scan(&v)
	return v, err
}

// MarkPayloadsRemoved implements store.RetentionStore.
func (s *Store) MarkPayloadsRemoved(ctx context.Context, runID, reason string, at time.Time) error {
	_, err := s.exec(ctx, `INSERT INTO run_payloads_removed(run_id, reason, at) VALUES ($1,$2,$3)
		ON CONFLICT (run_id) DO UPDATE SET
		  reason = CASE WHEN excluded.reason = 'erased' THEN 'erased' ELSE run_payloads_removed.reason END,
		  at = CASE WHEN excluded.reason = 'erased' THEN excluded.at ELSE run_payloads_removed.at END`, runID, reason, micros(at))
	return err
}

// PayloadsRemoved implements store.RetentionStore.
func (s *Store) PayloadsRemoved(ctx context.Context, runID string) (string, time.Time, error) {
	var (
		reason string
		at     int64
	)
	err := s.queryRow(ctx, "SELECT reason, at FROM run_payloads_removed WHERE run_id = $1", runID).Scan(&reason, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return reason, fromMicros(at), err
}

// EraseRun implements store.RetentionStore. The old row versions stay in
// the table's files until VACUUM reclaims them (docs/design/retention.md).
func (s *Store) EraseRun(ctx context.Context, e *store.Erasure, scrub func(*store.Event) []byte) error {
	// A terminal run's log never grows: it may be read before the
	// transaction that checks the run is terminal.
	evs, err := s.Events(ctx, e.RunID, 0, 0)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var (
			status  string
			lastSeq int64
		)
		if err := tx.QueryRow(ctx, "SELECT status, last_seq FROM runs WHERE id = $1 FOR UPDATE", e.RunID).Scan(&status, &lastSeq); err != nil {
			return notFound(err, "run "+e.RunID)
		}
		if err := store.CheckErasable(e.RunID, status, lastSeq, evs); err != nil {
			return err
		}
		b := &pgx.Batch{}
		for i := range evs {
			b.Queue("UPDATE events SET payload = $1 WHERE run_id = $2 AND seq = $3", scrub(&evs[i]), e.RunID, evs[i].Seq)
		}
		e.Events = len(evs)
		b.Queue("UPDATE runs SET task = '', result = '' WHERE id = $1", e.RunID)
		b.Queue("DELETE FROM signals WHERE run_id = $1", e.RunID)
		b.Queue("DELETE FROM run_prompt_hashes WHERE run_id = $1", e.RunID)
		b.Queue(`UPDATE webhook_deliveries SET payload = '\x7b7d' WHERE run_id = $1`, e.RunID)
		b.Queue(`INSERT INTO erasures(id, tenant, run_id, user_id, requested_by, reason, at, events, blobs) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)`,
			e.ID, e.Tenant, e.RunID, e.User, e.RequestedBy, e.Reason, micros(e.At), e.Events, e.Blobs)
		return tx.SendBatch(ctx, b).Close()
	})
}

// Erasures implements store.RetentionStore.
func (s *Store) Erasures(ctx context.Context, runID string) ([]*store.Erasure, error) {
	return queryAll(ctx, s.pool, `SELECT id, tenant, run_id, user_id, requested_by, reason, at, events, blobs
		FROM erasures WHERE run_id = $1 ORDER BY at, id`, []any{runID}, func(sc scanner) (*store.Erasure, error) {
		var e store.Erasure
		var at int64
		err := sc.Scan(&e.ID, &e.Tenant, &e.RunID, &e.User, &e.RequestedBy, &e.Reason, &at, &e.Events, &e.Blobs)
		e.At = fromMicros(at)
		return &e, err
	})
}

// DeleteRun implements store.RetentionStore.
func (s *Store) DeleteRun(ctx context.Context, runID string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		var status string
		if err := tx.QueryRow(ctx, "SELECT status FROM runs WHERE id = $1 FOR UPDATE", runID).Scan(&status); err != nil {
			return notFound(err, "run "+runID)
		}
		if !store.Terminal(status) {
			return fmt.Errorf("run %s is %s: only an ended run is deleted: %w", runID, status, store.ErrConflict)
		}
		b := &pgx.Batch{}
		for _, q := range []string{
			"DELETE FROM events WHERE run_id = $1",
			"DELETE FROM signals WHERE run_id = $1",
			"DELETE FROM run_prompt_hashes WHERE run_id = $1",
			"DELETE FROM run_payloads_removed WHERE run_id = $1",
			"DELETE FROM erasures WHERE run_id = $1",
			"DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE run_id = $1)",
			"DELETE FROM webhook_deliveries WHERE run_id = $1",
			"DELETE FROM idempotency_keys WHERE run_id = $1",
			"DELETE FROM runs WHERE id = $1",
		} {
			b.Queue(q, runID)
		}
		return tx.SendBatch(ctx, b).Close()
	})
}
