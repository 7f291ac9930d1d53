package platform_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/trace"
)

// TestLegacyBlobsAdopted: a data directory written before blobs were kept
// per tenant (blobs/<aa>/<62 hex>) opens with each blob moved into the
// tenant of the run whose log names it; another tenant still cannot read
// it, and a legacy blob no run names stays unadopted.
func TestLegacyBlobsAdopted(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	data := bytes.Repeat([]byte("a tool result from before tenant scoping; "), 200)
	sum := sha256.Sum256(data)
	orphan := []byte("no run names this")
	orphanSum := sha256.Sum256(orphan)
	at := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	if err := st.CreateRun(ctx, &store.Run{ID: "r1", Tenant: "acme", User: "u", Agent: "a", AgentVersion: 1, Mode: "async", Status: store.StatusQueued, CreatedAt: at}); err != nil {
		t.Fatal(err)
	}
	run, err := st.ClaimRunByID(ctx, "r1", "w", time.Minute, at)
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(trace.ToolResult{Tool: "t", Status: trace.StatusOK, Output: trace.Content{Blob: hex.EncodeToString(sum[:]), Size: int64(len(data))}})
	ev := store.Event{RunID: "r1", Seq: 1, Type: trace.EvToolResult, At: at, Payload: payload}
	ev.Hash = store.ChainHash(ev.PrevHash, &ev)
	if err := st.Append(ctx, store.AppendRequest{RunID: "r1", Epoch: run.LeaseEpoch, Events: []store.Event{ev}, Durable: true}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	legacy := func(sum [32]byte) string {
		h := hex.EncodeToString(sum[:])
		return filepath.Join(dir, "blobs", h[:2], h[2:])
	}
	for s, b := range map[[32]byte][]byte{sum: data, orphanSum: orphan} {
		if err := os.MkdirAll(filepath.Dir(legacy(s)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(legacy(s), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	p, err := platform.Open(ctx, platform.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if got, err := p.Store.Blobs("acme").GetBlob(ctx, sum); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("acme's adopted blob: %d bytes, %v", len(got), err)
	}
	if _, err := p.Store.Blobs("globex").GetBlob(ctx, sum); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant reads the adopted blob: %v", err)
	}
	if _, err := os.Stat(legacy(sum)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the adopted legacy file is still there: %v", err)
	}
	if _, err := os.Stat(legacy(orphanSum)); err != nil {
		t.Fatalf("the orphan legacy blob was touched: %v", err)
	}
	if _, err := p.Store.Blobs("acme").GetBlob(ctx, orphanSum); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("an unnamed legacy blob was given to a tenant: %v", err)
	}
}
