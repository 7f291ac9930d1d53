// Package pgtest gives tests a fresh PostgreSQL database each. It reads
// AGENTPLANE_TEST_POSTGRES, the DSN of a superuser on a test cluster
// (scripts/setup-postgres.sh starts one on loopback and exports it); a test
// without it is skipped, or fails when AGENTPLANE_TEST_STRICT=1. Blobs gives
// the blob store a PostgreSQL store is opened with.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store/blobdir"
)

// Env is the variable holding the superuser DSN.
const Env = "AGENTPLANE_TEST_POSTGRES"

// AdminDSN returns the superuser DSN, skipping (or failing, in strict
// mode) the test without one.
func AdminDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		msg := Env + " is not set: run `. scripts/setup-postgres.sh` (it starts PostgreSQL on 127.0.0.1 and exports it)"
		if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return dsn
}

// DSN creates a database of its own for the test and returns its DSN; the
// database is dropped when the test ends (after the test's own cleanups,
// which close its pools, have run).
func DSN(t testing.TB) string {
	t.Helper()
	admin := AdminDSN(t)
	var b [6]byte
	rand.Read(b[:])
	name := "agentplane_test_" + hex.EncodeToString(b[:])
	exec(t, admin, "CREATE DATABASE "+name)
	t.Cleanup(func() { exec(t, admin, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("%s: %v", Env, err)
	}
	u.Path = "/" + name
	return u.String()
}

func exec(t testing.TB, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect to the test cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// Blobs returns a blob folder in a temporary directory of the test: the
// store.Blobs to open a PostgreSQL store with (postgres.Options.Blobs),
// which keeps blobs outside the database.
func Blobs(t testing.TB) *blobdir.Dir {
	t.Helper()
	d, err := blobdir.Open(t.TempDir())
	if err != nil {
		t.Fatalf("blob folder: %v", err)
	}
	return d
}
