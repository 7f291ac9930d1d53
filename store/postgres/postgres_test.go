package postgres

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/store/storetest"
)

func open(t testing.TB, dsn string) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{DSN: dsn})
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

// TestRefusesNewerSchema: a database migrated by a newer agentplane is
// refused at Open, with a message that says what to do.
func TestRefusesNewerSchema(t *testing.T) {
	dsn := pgtest.DSN(t)
	s := open(t, dsn)
	if _, err := s.pool.Exec(t.Context(), "INSERT INTO schema_migrations(version, applied_at) VALUES (999, 0)"); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), Options{DSN: dsn})
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
	_, err = Open(t.Context(), Options{DSN: "postgres://agent:s3cr3t-pw@127.0.0.1:1/db?sslmode=disable&connect_timeout=2"})
	if !errors.Is(err, store.ErrUnavailable) || strings.Contains(err.Error(), "s3cr3t-pw") {
		t.Fatalf("Open of an unreachable server: %v; want ErrUnavailable without the password", err)
	}
	_, err = Open(t.Context(), Options{DSN: "postgres://agent:s3cr3t-pw@127.0.0.1:1/db?sslmode=bogus"})
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
