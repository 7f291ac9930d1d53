package blobcrypt

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
)

// memKeys is an in-memory key table (the run stores keep theirs in SQL).
type memKeys struct {
	mu sync.Mutex
	m  map[string]store.BlobKey
}

func keyOf(tenant string, sum [32]byte) string { return fmt.Sprintf("%s/%x", tenant, sum) }

func (k *memKeys) PutBlobKey(_ context.Context, bk *store.BlobKey) (*store.BlobKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if old, ok := k.m[keyOf(bk.Tenant, bk.Sum)]; ok && old.Wrapped != nil {
		old.LastPut = bk.LastPut
		k.m[keyOf(bk.Tenant, bk.Sum)] = old
		return &old, nil
	}
	k.m[keyOf(bk.Tenant, bk.Sum)] = *bk
	out := *bk
	return &out, nil
}

func (k *memKeys) GetBlobKey(_ context.Context, tenant string, sum [32]byte) (*store.BlobKey, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	bk, ok := k.m[keyOf(tenant, sum)]
	if !ok {
		return nil, store.ErrNotFound
	}
	return &bk, nil
}

func (k *memKeys) RemoveBlobKey(_ context.Context, tenant string, sum [32]byte, _ int64, reason string, at, _ time.Time) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	bk := k.m[keyOf(tenant, sum)]
	bk.Wrapped, bk.Reason, bk.RemovedAt = nil, reason, at
	k.m[keyOf(tenant, sum)] = bk
	return nil
}

// Each tenant's key is derived once and kept: a view taken later, and one
// taken after the kept keys started over, still opens the tenant's own
// content, and never another tenant's data key (a kept key served to the
// wrong tenant would open it).
func TestTenantKeysKept(t *testing.T) {
	old := maxTenantKeys
	maxTenantKeys = 2
	t.Cleanup(func() { maxTenantKeys = old })
	back, err := blobdir.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	keys := &memKeys{m: map[string]store.BlobKey{}}
	master := make([]byte, 32)
	master[0] = 7
	s, err := New(Options{Backend: back, Keys: keys, MasterKey: master})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tenants := []string{"acme", "globex", "initech"} // one more than are kept
	sums := map[string][32]byte{}
	for _, tn := range tenants {
		sum, err := s.Blobs(tn).PutBlob(ctx, []byte("statement of "+tn))
		if err != nil {
			t.Fatal(err)
		}
		sums[tn] = sum
	}
	for round := 0; round < 2; round++ {
		for _, tn := range tenants {
			got, err := s.Blobs(tn).GetBlob(ctx, sums[tn])
			if err != nil || string(got) != "statement of "+tn {
				t.Fatalf("round %d: %s reads its own blob: %q, %v", round, tn, got, err)
			}
		}
	}
	if n := len(s.keks); n > maxTenantKeys {
		t.Fatalf("%d tenant keys kept, want at most %d", n, maxTenantKeys)
	}
	// globex's row holding acme's wrapped data key: only acme's tenant key
	// opens it, so globex's view must refuse it as corrupt.
	ak, err := keys.GetBlobKey(ctx, "acme", sums["acme"])
	if err != nil {
		t.Fatal(err)
	}
	stolen := *ak
	stolen.Tenant = "globex"
	keys.mu.Lock()
	keys.m[keyOf("globex", sums["acme"])] = stolen
	keys.mu.Unlock()
	for round := 0; round < 2; round++ {
		if got, err := s.Blobs("globex").GetBlob(ctx, sums["acme"]); !errors.Is(err, store.ErrCorrupt) {
			t.Fatalf("round %d: globex opened acme's data key: %q, %v; want ErrCorrupt", round, got, err)
		}
		s.Blobs("acme") // acme's key kept next to globex's
	}
}
