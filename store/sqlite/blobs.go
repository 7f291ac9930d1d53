package sqlite

import (
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
)

// Blobs implements store.Blobs with the blob store the store was opened
// with: Options.Blobs, or the blob folder of the data directory.
func (s *Store) Blobs(tenant string) store.BlobStore { return s.blobs.Blobs(tenant) }

// BlobPath returns where tenant's blob lives on disk when the store keeps
// its blobs in a blob folder (for tamper tests and tooling), or "" when it
// keeps them elsewhere.
func (s *Store) BlobPath(tenant string, sum [32]byte) string {
	if d, ok := s.blobs.(*blobdir.Dir); ok {
		return d.Path(tenant, sum)
	}
	return ""
}
