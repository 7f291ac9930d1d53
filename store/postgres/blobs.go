package postgres

import (
	"context"
	"crypto/sha256"
	"fmt"

	"github.com/agentplane/agentplane/store"
)

// Blobs are kept in a bytea table for now; the run store and the blob
// store are chosen independently, so a deployment can put them elsewhere.

// PutBlob implements store.BlobStore. The bytes are written again when the
// blob exists, so a damaged row is replaced by the next put of the content.
func (s *Store) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	_, err := s.exec(ctx, "INSERT INTO blobs(hash, data) VALUES ($1, $2) ON CONFLICT(hash) DO UPDATE SET data = excluded.data",
		sum[:], blob(data))
	return sum, err
}

// GetBlob implements store.BlobStore; bytes that do not hash to sum are
// refused with store.ErrCorrupt.
func (s *Store) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	var data []byte
	err := s.queryRow(ctx, "SELECT data FROM blobs WHERE hash = $1", sum[:]).Scan(&data)
	if err != nil {
		return nil, notFound(err, fmt.Sprintf("blob %x", sum))
	}
	if sha256.Sum256(data) != sum {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	return data, nil
}

// BlobSize implements store.BlobStore.
func (s *Store) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	var n int64
	err := s.queryRow(ctx, "SELECT octet_length(data) FROM blobs WHERE hash = $1", sum[:]).Scan(&n)
	return n, notFound(err, fmt.Sprintf("blob %x", sum))
}
