package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Blobs implements store.Blobs with the blob store the Store was opened
// with: payloads are kept outside the database, per tenant, sealed under
// Options.BlobKey when one was given.
func (s *Store) Blobs(tenant string) store.BlobStore {
	if s.sealed != nil {
		return s.sealed.Blobs(tenant)
	}
	return s.blobs.Blobs(tenant)
}

// RemoveBlob implements store.RetentionStore.
func (s *Store) RemoveBlob(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error {
	if s.sealed == nil {
		return errors.New("this store keeps blobs unsealed (no blob key): open it with one to purge or erase payloads")
	}
	return s.sealed.Remove(ctx, tenant, sum, size, reason, at, notPutAfter)
}
