package postgres

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobdir"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/store/storetest"
)

// open opens dsn with a blob folder of its own in a temporary directory.
func open(t testing.TB, dsn string) *Store {
	t.Helper()
	return openBlobs(t, dsn, pgtest.Blobs(t))
}

func openBlobs(t testing.TB, dsn string, blobs store.Blobs) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{DSN: dsn, Blobs: blobs})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t *testing.T) store.Store { return open(t, pgtest.DSN(t)) })
}

func TestAPIConformance(t *testing.T) {
	storetest.ExerciseAPI(t, func(t *testing.T) storetest.APIStore { return open(t, pgtest.DSN(t)) })
}

func TestSessionConformance(t *testing.T) {
	storetest.ExerciseSessions(t, open(t, pgtest.DSN(t)))
}

// TestBlobConformance runs the whole blob suite, damaged copies included,
// through the Store's Blobs: what it delegates to keeps every tenant's
// blobs apart and detects tampering.
func TestBlobConformance(t *testing.T) {
	dsn := pgtest.DSN(t)
	storetest.ExerciseBlobs(t, func(t *testing.T) storetest.BlobBackend {
		d := pgtest.Blobs(t)
		return storetest.BlobBackend{Blobs: openBlobs(t, dsn, d), Overwrite: func(t *testing.T, tenant string, sum [32]byte, data []byte) {
			if err := os.WriteFile(d.Path(tenant, sum), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
}

// TestProcesses opens two pools on one database, as two agentplane
// processes would.
func TestProcesses(t *testing.T) {
	storetest.ExerciseProcesses(t, func(t *testing.T) (storetest.APIStore, storetest.APIStore) {
		dsn := pgtest.DSN(t)
		return open(t, dsn), open(t, dsn)
	})
}

// TestMigrationsUpAndDown applies every migration, takes each one down in
// turn and up again, and checks the recorded version and the tables at
// each step.
func TestMigrationsUpAndDown(t *testing.T) {
	ctx := t.Context()
	s := open(t, pgtest.DSN(t))
	n := len(upSteps())
	if v, err := s.SchemaVersion(ctx); err != nil || v != n {
		t.Fatalf("after Open: version %d, %v; want %d", v, err, n)
	}
	tables := func() int {
		var c int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'schema_migrations'").Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if tables() == 0 {
		t.Fatal("no tables after the up migrations")
	}
	for v := n - 1; v >= 0; v-- {
		if err := s.migrateTo(ctx, v); err != nil {
			t.Fatalf("down to %d: %v", v, err)
		}
		if got, _ := s.SchemaVersion(ctx); got != v {
			t.Fatalf("version after down = %d, want %d", got, v)
		}
	}
	if c := tables(); c != 0 {
		t.Fatalf("%d tables left after every down migration", c)
	}
	if err := s.migrateTo(ctx, n); err != nil {
		t.Fatalf("up again: %v", err)
	}
	// The schema works after the round trip.
	if err := s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Mode: "async"}); err != nil {
		t.Fatalf("CreateRun after down and up: %v", err)
	}
}

// TestPromptHashMigration takes step 0002 down and up again under a log
// written before it: down leaves no table or index of it, and up fills the
// prompt-hash index from the model_call events already stored, skipping
// payloads that name no sha256 (not JSON, not UTF-8, a number, a bad hex).
func TestPromptHashMigration(t *testing.T) {
	ctx := t.Context()
	s := open(t, pgtest.DSN(t))
	h := strings.Repeat("0f", 32)
	if err := s.CreateRun(ctx, &store.Run{ID: "old", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Mode: "async", CreatedAt: storetest.Base}); err != nil {
		t.Fatal(err)
	}
	r, err := s.ClaimRunByID(ctx, "old", "w", time.Minute, storetest.Base)
	if err != nil {
		t.Fatal(err)
	}
	var evs []store.Event
	var prev [32]byte
	for i, payload := range []string{
		`{"alias":"m","prompt_hash":"sha256:` + h + `"}`,
		`{"alias":"m","prompt_hash":"not-a-hash"}`,
		`{"alias":"m","prompt_hash":5}`,
		"not json",
		"\xff\xfe",
		`{"prompt_hash":"` + strings.Repeat("AB", 32) + `"}`,
	} {
		ev := store.Event{RunID: "old", Seq: int64(i + 1), Type: store.EventModelCall, Step: i, At: storetest.Base, Payload: []byte(payload), PrevHash: prev}
		ev.Hash = store.ChainHash(prev, &ev)
		prev = ev.Hash
		evs = append(evs, ev)
	}
	if err := s.Append(ctx, store.AppendRequest{RunID: "old", Epoch: r.LeaseEpoch, Events: evs, Durable: true}); err != nil {
		t.Fatal(err)
	}
	indexed := func() []string {
		t.Helper()
		rs, err := s.ListRuns(ctx, store.RunFilter{PromptHash: "sha256:" + h})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range rs {
			ids = append(ids, r.ID)
		}
		var n int
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM run_prompt_hashes").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Fatalf("%d prompt-hash rows, want 1: only the first payload names a sha256", n)
		}
		return ids
	}
	if got := indexed(); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("ListRuns(PromptHash) after the append = %v, want [old]", got)
	}
	exists := func(name string) bool {
		t.Helper()
		var ok bool
		if err := s.pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	step2 := []string{"connectors", "connectors_by_tenant", "run_prompt_hashes", "sessions", "sessions_expiry", "runs_by_tenant_created"}
	if err := s.migrateTo(ctx, 1); err != nil {
		t.Fatalf("down to 1: %v", err)
	}
	for _, name := range step2 {
		if exists(name) {
			t.Errorf("%s still exists after step 2 went down", name)
		}
	}
	if !exists("runs_by_tenant") {
		t.Error("runs_by_tenant not restored by step 2's down")
	}
	if err := s.migrateTo(ctx, 2); err != nil {
		t.Fatalf("up to 2: %v", err)
	}
	for _, name := range step2 {
		if !exists(name) {
			t.Errorf("%s missing after step 2 went up", name)
		}
	}
	if exists("runs_by_tenant") {
		t.Error("runs_by_tenant kept beside runs_by_tenant_created")
	}
	if got := indexed(); !slices.Equal(got, []string{"old"}) {
		t.Fatalf("ListRuns(PromptHash) after the migration's backfill = %v, want [old]", got)
	}
}

// TestNeedsBlobs: a store opened without a blob store is refused, saying
// what is missing, rather than failing at the first blob.
func TestNeedsBlobs(t *testing.T) {
	_, err := Open(t.Context(), Options{DSN: pgtest.DSN(t)})
	if err == nil || !strings.Contains(err.Error(), "Options.Blobs") {
		t.Fatalf("Open without Blobs: %v, want an error naming Options.Blobs", err)
	}
}

// TestRefusesNewerSchema: a database migrated by a newer agentplane is
// refused at Open, with a message that says what to do.
func TestRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	if _, err := s.pool.Exec(t.Context(), "INSERT INTO schema_migrations(version, applied_at) VALUES (999, 0)"); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), Options{DSN: dsn, Blobs: pgtest.Blobs(t)})
	if !errors.Is(err, ErrSchemaNewer) || !strings.Contains(err.Error(), "999") || !strings.Contains(err.Error(), "newer agentplane") {
		t.Fatalf("Open on a newer schema: %v, want ErrSchemaNewer naming version 999 and what to do", err)
	}
}

// TestUnavailable: a store whose database cannot be reached answers
// store.ErrUnavailable, and no message carries the DSN's password.
func TestUnavailable(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	s.Close() // every later call finds the pool closed
	_, err := s.GetRun(t.Context(), "r")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("GetRun on a closed pool: %v, want ErrUnavailable", err)
	}
	err = s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: 1, Durable: true, Events: []store.Event{{RunID: "r", Seq: 1}}})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Append on a closed pool: %v, want ErrUnavailable", err)
	}
	// Nothing listens on port 1 of loopback.
	_, err = Open(t.Context(), Options{DSN: "postgres://agent:s3cr3t-pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=2", Blobs: pgtest.Blobs(t)})
	if !errors.Is(err, store.ErrUnavailable) || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("Open of an unreachable server: %v; want ErrUnavailable without the password", err)
	}
	_, err = Open(t.Context(), Options{DSN: "postgres://agent:s3cr3t-pw@127.0.0.1:1/db?sslmode=bogus", Blobs: pgtest.Blobs(t)})
	if err == nil || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("Open of a malformed DSN: %v; want an error without the password", err)
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:pw@h:5432/db?sslmode=disable": "postgres://u:xxxxx@h:5432/db?sslmode=disable",
		"postgres://u@h/db?password=pw":             "postgres://u@h/db?password=xxxxx",
		"postgres://h/db":                           "postgres://h/db",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

var testBlobKey = []byte("0123456789abcdef0123456789abcdef")

// TestSealedConformance runs the whole suite, the blob suite with damaged
// sealed objects included, and the retention suite on a store whose blobs
// are sealed.
func TestSealedConformance(t *testing.T) {
	openSealed := func(t *testing.T) (*Store, *blobdir.Dir) {
		d := pgtest.Blobs(t)
		s, err := Open(t.Context(), Options{DSN: pgtest.DSN(t), Blobs: d, BlobKey: testBlobKey})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { s.Close() })
		return s, d
	}
	storetest.Exercise(t, func(t *testing.T) store.Store { s, _ := openSealed(t); return s })
	storetest.ExerciseBlobs(t, func(t *testing.T) storetest.BlobBackend {
		s, d := openSealed(t)
		return storetest.BlobBackend{Blobs: s, Overwrite: func(t *testing.T, tenant string, sum [32]byte, data []byte) {
			if err := os.WriteFile(d.Path(tenant, s.sealed.Object(t.Context(), tenant, sum)), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}}
	})
	storetest.ExerciseRetention(t, func(t *testing.T) storetest.SealedStore {
		s, d := openSealed(t)
		return storetest.SealedStore{Store: s, Backend: d}
	})
}

// TestBlobKeyMismatchRefused: a database whose blobs were sealed under one
// master key refuses a process opened with another.
func TestBlobKeyMismatchRefused(t *testing.T) {
	dsn := pgtest.DSN(t)
	s, err := Open(t.Context(), Options{DSN: dsn, Blobs: pgtest.Blobs(t), BlobKey: testBlobKey})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err = Open(t.Context(), Options{DSN: dsn, Blobs: pgtest.Blobs(t), BlobKey: []byte("another key, also thirty-two b..")})
	if err == nil || !strings.Contains(err.Error(), "not the one") {
		t.Fatalf("Open with another blob key: err = %v, want a refusal naming the key", err)
	}
}

// TestStoredBlobKeyShared: processes given no key seal under the one the
// first kept in the database, so each reads what the other sealed.
func TestStoredBlobKeyShared(t *testing.T) {
	dsn, d := pgtest.DSN(t), pgtest.Blobs(t)
	a := openWith(t, Options{DSN: dsn, Blobs: d, StoredBlobKey: true})
	b := openWith(t, Options{DSN: dsn, Blobs: d, StoredBlobKey: true})
	sum, err := a.Blobs("acme").PutBlob(t.Context(), []byte("sealed by a"))
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Blobs("acme").GetBlob(t.Context(), sum); err != nil || string(got) != "sealed by a" {
		t.Fatalf("b reads a's blob: %q, %v", got, err)
	}
	if raw, err := d.Blobs("acme").GetBlob(t.Context(), a.sealed.Object(t.Context(), "acme", sum)); err != nil || strings.Contains(string(raw), "sealed by a") {
		t.Fatalf("the blob folder holds %q (%v), want ciphertext", raw, err)
	}
}

func openWith(t *testing.T, o Options) *Store {
	t.Helper()
	s, err := Open(t.Context(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
