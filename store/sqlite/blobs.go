package sqlite

import (
	"context"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
)

// Blobs implements store.Blobs with the blob store the store was opened
// with (Options.Blobs, or the blob folder of the data directory), sealed
// under Options.BlobKey when one was given.
func (s *Store) Blobs(tenant string) store.BlobStore {
	if s.sealed != nil {
		return s.sealed.Blobs(tenant)
	}
	return s.blobs.Blobs(tenant)
}

// BlobPath returns where tenant's blob lives on disk when the store keeps
// its blobs in a blob folder (for tamper tests and tooling): the sealed
// object of sealed content, or "" when it keeps them elsewhere.
func (s *Store) BlobPath(tenant string, sum [32]byte) string {
	d, ok := s.blobs.(*blobdir.Dir)
	if !ok {
		return ""
	}
	if s.sealed != nil {
		sum = s.sealed.Object(context.Background(), tenant, sum)
	}
	return d.Path(tenant, sum)
}

// RemoveBlob implements store.RetentionStore.
func (s *Store) RemoveBlob(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error {
	if s.sealed == nil {
		return errNotSealed
	}
	return s.sealed.Remove(ctx, tenant, sum, size, reason, at, notPutAfter)
}
