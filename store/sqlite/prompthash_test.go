package sqlite

import (
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store"
)

// Logs written before migration 0008 have their prompt hashes filled in by
// the migration itself, from the model_call events already stored.
func TestPromptHashBackfill(t *testing.T) {
	s := openTemp(t)
	ctx := t.Context()
	h := strings.Repeat("0f", 32)
	r := createAndClaim(t, s, "old", "A", base)
	evs := events("old", 0, [32]byte{}, 3, store.EventModelCall)
	evs[1].Payload = []byte(`{"alias":"m","prompt_hash":"sha256:` + h + `"}`)
	evs[2].Payload = []byte(`{"alias":"m","prompt_hash":"not-a-hash"}`)
	rechain(evs)
	if err := s.Append(ctx, store.AppendRequest{RunID: "old", Epoch: r.LeaseEpoch, Events: evs, Durable: true}); err != nil {
		t.Fatal(err)
	}
	// Back to the schema before the migration: no index at all.
	if _, err := s.w.ExecContext(ctx, "DROP TABLE run_prompt_hashes"); err != nil {
		t.Fatal(err)
	}
	body, err := migrations.ReadFile("migrations/0008_prompt_hashes.sql")
	if err != nil {
		t.Fatal(err)
	}
	for _, stmt := range strings.Split(string(body), ";") {
		if strings.TrimSpace(stmt) != "" {
			if _, err := s.w.ExecContext(ctx, stmt); err != nil {
				t.Fatalf("migration: %v", err)
			}
		}
	}
	rs, err := s.ListRuns(ctx, store.RunFilter{PromptHash: h})
	if err != nil || len(rs) != 1 || rs[0].ID != "old" {
		t.Fatalf("ListRuns(PromptHash) after backfill = %v, %v; want [old]", rs, err)
	}
	var n int
	if err := s.w.QueryRowContext(ctx, "SELECT count(*) FROM run_prompt_hashes").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d index rows (%v), want 1: the malformed hash names nothing", n, err)
	}
}

// rechain recomputes the hash chain of evs after a payload change.
func rechain(evs []store.Event) {
	var prev [32]byte
	for i := range evs {
		evs[i].PrevHash = prev
		evs[i].Hash = store.ChainHash(prev, &evs[i])
		prev = evs[i].Hash
	}
}
