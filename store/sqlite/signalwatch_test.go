package sqlite

import (
	"context"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// PendingSignals answers "none" from its cache only while nothing can have
// changed: a signal sent through the same store is seen at once, one sent
// through another handle on the database (another process) at the next
// group commit, and with a stale version every call queries.
func TestPendingSignalsCache(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1, err := Open(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s1.Close()
	s2, err := Open(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	s1.sigw.mu.Lock()
	s1.sigw.freshness = time.Hour // the cache's rules, not its clock
	s1.sigw.mu.Unlock()
	now := time.Now()
	var epoch int64
	for _, id := range []string{"r", "other", "quiet"} {
		if err := s1.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x",
			Mode: "async", Status: store.StatusQueued, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
	}
	r, err := s1.ClaimRunByID(ctx, "r", "w", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	epoch = r.LeaseEpoch
	seq := int64(0)
	commit := func() { // a group commit of s1's writer
		t.Helper()
		seq++
		if err := s1.Append(ctx, store.AppendRequest{RunID: "r", Epoch: epoch, Durable: true,
			Events: []store.Event{{RunID: "r", Seq: seq, Type: "step_started", At: now, Payload: []byte(`{}`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	queries := func() int64 {
		s1.sigw.mu.Lock()
		defer s1.sigw.mu.Unlock()
		return s1.sigw.queries
	}
	pending := func(id string) int {
		t.Helper()
		sigs, err := s1.PendingSignals(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return len(sigs)
	}

	commit()
	if n := pending("r"); n != 0 {
		t.Fatalf("%d pending, want none", n)
	}
	before := queries()
	for range 3 {
		if n := pending("r"); n != 0 {
			t.Fatalf("%d pending, want none", n)
		}
	}
	if q := queries() - before; q != 0 {
		t.Fatalf("%d queries for answers already known", q)
	}

	// Sent through this store: seen at once.
	if err := s1.SendSignal(ctx, &store.Signal{RunID: "r", Kind: "user_message", Payload: []byte(`{"n":1}`)}); err != nil {
		t.Fatal(err)
	}
	if n := pending("r"); n != 1 {
		t.Fatalf("after a signal sent through the store: %d pending, want 1", n)
	}

	// Sent by another process: seen once this store's writer has committed.
	if n := pending("other"); n != 0 {
		t.Fatalf("other: %d pending, want none", n)
	}
	if err := s2.SendSignal(ctx, &store.Signal{RunID: "other", Kind: "user_message", Payload: []byte(`{"n":2}`)}); err != nil {
		t.Fatal(err)
	}
	commit()
	if n := pending("other"); n != 1 {
		t.Fatalf("after another process's signal and a commit: %d pending, want 1", n)
	}

	// A stale version is not trusted: every call queries.
	s1.sigw.mu.Lock()
	s1.sigw.freshness = 0
	s1.sigw.mu.Unlock()
	before = queries()
	for range 3 {
		pending("r")
	}
	if q := queries() - before; q != 3 {
		t.Fatalf("%d queries with a stale version, want 3", q)
	}
	// And then a signal from elsewhere is seen without any commit here.
	sg := &store.Signal{RunID: "r", Kind: "user_message", Payload: []byte(`{"n":3}`)}
	if err := s2.SendSignal(ctx, sg); err != nil {
		t.Fatal(err)
	}
	if n := pending("r"); n != 2 {
		t.Fatalf("with a stale version: %d pending, want 2", n)
	}

	// A stale version is read again by a reader: a run known to have none
	// is answered without its query, and a signal stored elsewhere
	// meanwhile is seen, with no commit of this store's writer.
	stale := func() {
		s1.sigw.mu.Lock()
		s1.sigw.freshness, s1.sigw.seen = time.Hour, time.Time{}
		s1.sigw.mu.Unlock()
	}
	stale()
	if n := pending("quiet"); n != 0 {
		t.Fatalf("quiet: %d pending, want none", n)
	}
	stale()
	before = queries()
	if n := pending("quiet"); n != 0 {
		t.Fatalf("quiet: %d pending, want none", n)
	}
	if q := queries() - before; q != 0 {
		t.Fatalf("%d queries after the version was read again unchanged", q)
	}
	if err := s2.SendSignal(ctx, &store.Signal{RunID: "quiet", Kind: "user_message", Payload: []byte(`{"n":4}`)}); err != nil {
		t.Fatal(err)
	}
	stale()
	if n := pending("quiet"); n != 1 {
		t.Fatalf("quiet after another process's signal: %d pending, want 1", n)
	}
}
