package postgres

import "github.com/agentplane/agentplane/store"

// Blobs implements store.Blobs with the blob store the Store was opened
// with: payloads are kept outside the database, per tenant.
func (s *Store) Blobs(tenant string) store.BlobStore { return s.blobs.Blobs(tenant) }
