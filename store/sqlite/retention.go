package sqlite

import (
	"context"
	"crypto/subtle"
	"database/sql"
	"errors"
	"fmt"
	"time"

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
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO blob_keys(`+blobKeyCols+`) VALUES (?,?,?,?,?,?,?,'',0)
		ON CONFLICT(tenant, sum) DO UPDATE SET
		  size = CASE WHEN wrapped IS NULL THEN excluded.size ELSE size END,
		  object = CASE WHEN wrapped IS NULL THEN excluded.object ELSE object END,
		  created_at = CASE WHEN wrapped IS NULL THEN excluded.created_at ELSE created_at END,
		  reason = CASE WHEN wrapped IS NULL THEN '' ELSE reason END,
		  removed_at = CASE WHEN wrapped IS NULL THEN 0 ELSE removed_at END,
		  wrapped = COALESCE(wrapped, excluded.wrapped),
		  last_put = MAX(last_put, excluded.last_put)`,
		k.Tenant, k.Sum[:], k.Size, k.Wrapped, k.ObjectColumn(), micros(k.CreatedAt), micros(k.LastPut)); err != nil {
		return nil, classify(err)
	}
	got, err := scanBlobKey(tx.QueryRowContext(ctx, "SELECT "+blobKeyCols+" FROM blob_keys WHERE tenant = ? AND sum = ?", k.Tenant, k.Sum[:]))
	if err != nil {
		return nil, err
	}
	return got, classify(tx.Commit())
}

// GetBlobKey implements store.RetentionStore.
func (s *Store) GetBlobKey(ctx context.Context, tenant string, sum [32]byte) (*store.BlobKey, error) {
	k, err := scanBlobKey(s.r.QueryRowContext(ctx, "SELECT "+blobKeyCols+" FROM blob_keys WHERE tenant = ? AND sum = ?", tenant, sum[:]))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("blob key %x: %w", sum[:6], store.ErrNotFound)
	}
	return k, err
}

// RemoveBlobKey implements store.RetentionStore.
func (s *Store) RemoveBlobKey(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var lastPut int64
	err = tx.QueryRowContext(ctx, "SELECT last_put FROM blob_keys WHERE tenant = ? AND sum = ? AND wrapped IS NOT NULL", tenant, sum[:]).Scan(&lastPut)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return classify(err)
	case lastPut > micros(notPutAfter):
		return fmt.Errorf("blob %x was put again since the purge began: %w", sum[:6], store.ErrConflict)
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO blob_keys(`+blobKeyCols+`) VALUES (?,?,?,NULL,x'',?,0,?,?)
		ON CONFLICT(tenant, sum) DO UPDATE SET wrapped = NULL,
		  reason = CASE WHEN blob_keys.wrapped IS NULL AND blob_keys.reason != '' THEN blob_keys.reason ELSE excluded.reason END,
		  removed_at = CASE WHEN blob_keys.wrapped IS NULL AND blob_keys.removed_at != 0 THEN blob_keys.removed_at ELSE excluded.removed_at END`,
		tenant, sum[:], size, micros(at), reason, micros(at)); err != nil {
		return classify(err)
	}
	return classify(tx.Commit())
}

// CheckBlobKey records check (blobcrypt.CheckValue of the master key) on
// the first call and refuses a different one afterwards.
func (s *Store) CheckBlobKey(ctx context.Context, check []byte) error {
	if _, err := s.w.ExecContext(ctx, "INSERT INTO blob_key_check(id, value) VALUES (1, ?) ON CONFLICT(id) DO NOTHING", check); err != nil {
		return err
	}
	var v []byte
	if err := s.r.QueryRowContext(ctx, "SELECT value FROM blob_key_check WHERE id = 1").Scan(&v); err != nil {
		return err
	}
	if subtle.ConstantTimeCompare(v, check) != 1 {
		return errBlobKeyMismatch
	}
	return nil
}

// errNotSealed: removing payloads needs the store opened with a blob key
// (only then can a removed payload be told from a lost one).
var errNotSealed = errors.New("this store keeps blobs unsealed (no blob key): open it with one to purge or erase payloads")

var errBlobKeyMismatch = errors.New("the blob master key is not the one this store's blobs were sealed with: give every process the same key (AGENTPLANE_BLOB_KEY or DATA/blob.key)")

// MarkPayloadsRemoved implements store.RetentionStore.
func (s *Store) MarkPayloadsRemoved(ctx context.Context, runID, reason string, at time.Time) error {
	_, err := s.w.ExecContext(ctx, `INSERT INTO run_payloads_removed(run_id, reason, at) VALUES (?,?,?)
		ON CONFLICT(run_id) DO UPDATE SET reason = CASE WHEN excluded.reason = 'erased' THEN 'erased' ELSE reason END,
		at = CASE WHEN excluded.reason = 'erased' THEN excluded.at ELSE at END`, runID, reason, micros(at))
	return err
}

// PayloadsRemoved implements store.RetentionStore.
func (s *Store) PayloadsRemoved(ctx context.Context, runID string) (string, time.Time, error) {
	var (
		reason string
		at     int64
	)
	err := s.r.QueryRowContext(ctx, "SELECT reason, at FROM run_payloads_removed WHERE run_id = ?", runID).Scan(&reason, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return "", time.Time{}, nil
	}
	return reason, fromMicros(at), err
}

// EraseRun implements store.RetentionStore. The database is checkpointed
// afterwards and written with secure_delete, so the erased payloads do not
// linger in free pages or the write-ahead log.
func (s *Store) EraseRun(ctx context.Context, e *store.Erasure, scrub func(*store.Event) []byte) error {
	// A terminal run's log never grows, so it may be read before the
	// transaction that checks the run is terminal.
	evs, err := s.Events(ctx, e.RunID, 0, 0)
	if err != nil {
		return err
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var (
		status  string
		lastSeq int64
	)
	if err := tx.QueryRowContext(ctx, "SELECT status, last_seq FROM runs WHERE id = ?", e.RunID).Scan(&status, &lastSeq); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", e.RunID, store.ErrNotFound)
		}
		return classify(err)
	}
	if err := store.CheckErasable(e.RunID, status, lastSeq, evs); err != nil {
		return err
	}
	for i := range evs {
		if _, err := tx.ExecContext(ctx, "UPDATE events SET payload = ? WHERE run_id = ? AND seq = ?", scrub(&evs[i]), e.RunID, evs[i].Seq); err != nil {
			return classify(err)
		}
	}
	e.Events = len(evs)
	for _, q := range []string{
		"UPDATE runs SET task = '', result = '' WHERE id = ?",
		"DELETE FROM signals WHERE run_id = ?",
		"DELETE FROM run_prompt_hashes WHERE run_id = ?",
		"UPDATE webhook_deliveries SET payload = x'7b7d' WHERE run_id = ?",
	} {
		if _, err := tx.ExecContext(ctx, q, e.RunID); err != nil {
			return classify(err)
		}
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO erasures(id, tenant, run_id, user_id, requested_by, reason, at, events, blobs) VALUES (?,?,?,?,?,?,?,?,?)`,
		e.ID, e.Tenant, e.RunID, e.User, e.RequestedBy, e.Reason, micros(e.At), e.Events, e.Blobs); err != nil {
		return classify(err)
	}
	if err := classify(tx.Commit()); err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)")
	return err
}

// Erasures implements store.RetentionStore.
func (s *Store) Erasures(ctx context.Context, runID string) ([]*store.Erasure, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT id, tenant, run_id, user_id, requested_by, reason, at, events, blobs
		FROM erasures WHERE run_id = ? ORDER BY at, id`, runID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.Erasure
	for rows.Next() {
		var e store.Erasure
		var at int64
		if err := rows.Scan(&e.ID, &e.Tenant, &e.RunID, &e.User, &e.RequestedBy, &e.Reason, &at, &e.Events, &e.Blobs); err != nil {
			return nil, err
		}
		e.At = fromMicros(at)
		out = append(out, &e)
	}
	return out, rows.Err()
}

// DeleteRun implements store.RetentionStore.
func (s *Store) DeleteRun(ctx context.Context, runID string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var status string
	if err := tx.QueryRowContext(ctx, "SELECT status FROM runs WHERE id = ?", runID).Scan(&status); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("run %s: %w", runID, store.ErrNotFound)
		}
		return classify(err)
	}
	if !store.Terminal(status) {
		return fmt.Errorf("run %s is %s: only an ended run is deleted: %w", runID, status, store.ErrConflict)
	}
	for _, q := range []string{
		"DELETE FROM events WHERE run_id = ?",
		"DELETE FROM signals WHERE run_id = ?",
		"DELETE FROM run_prompt_hashes WHERE run_id = ?",
		"DELETE FROM run_payloads_removed WHERE run_id = ?",
		"DELETE FROM erasures WHERE run_id = ?",
		"DELETE FROM webhook_attempts WHERE delivery_id IN (SELECT id FROM webhook_deliveries WHERE run_id = ?)",
		"DELETE FROM webhook_deliveries WHERE run_id = ?",
		"DELETE FROM idempotency_keys WHERE run_id = ?",
		"DELETE FROM runs WHERE id = ?",
	} {
		if _, err := tx.ExecContext(ctx, q, runID); err != nil {
			return fmt.Errorf("delete run %s: %w", runID, classify(err))
		}
	}
	return classify(tx.Commit())
}
