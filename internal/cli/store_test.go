package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store/postgres"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
)

// TestStoreFlagAndConfig: --store names a PostgreSQL database, so does the
// store key of DATA/api.yaml, and an unreachable one fails the command
// without printing the DSN's password.
func TestStoreFlagAndConfig(t *testing.T) {
	t.Parallel()
	code, _, stderr := runCLI(t, "runs", "--data", t.TempDir(),
		"--store", "postgres://agent:s3cr3t-pw@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	if code != 1 || !strings.Contains(stderr, "unavailable") || strings.Contains(stderr, "s3cr3t-pw") {
		t.Fatalf("unreachable store: exit %d, stderr %q; want 1, unavailable, no password", code, stderr)
	}
	code, _, stderr = runCLI(t, "runs", "--data", t.TempDir(), "--store", "mysql://x")
	if code != 1 || !strings.Contains(stderr, "postgres://") {
		t.Fatalf("unknown store: exit %d, stderr %q; want 1 naming what is accepted", code, stderr)
	}

	dsn := pgtest.DSN(t)
	data := t.TempDir()
	if code, out, stderr := runCLI(t, "apikey", "create", "--data", data, "--store", dsn, "--tenant", "acme", "--user", "ann"); code != 0 {
		t.Fatalf("apikey create --store: exit %d\n%s%s", code, out, stderr)
	}
	// The config-file form: DATA/api.yaml names the store.
	data2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(data2, "api.yaml"), []byte("store: "+dsn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(t, "apikey", "create", "--data", data2, "--tenant", "acme", "--user", "bob"); code != 0 {
		t.Fatalf("apikey create with store in api.yaml: exit %d\n%s%s", code, out, stderr)
	}
	s, err := postgres.Open(t.Context(), postgres.Options{DSN: dsn, Blobs: pgtest.Blobs(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	keys, err := s.ListAPIKeys(t.Context(), "acme")
	if err != nil || len(keys) != 2 || keys[0].User != "ann" || keys[1].User != "bob" {
		t.Fatalf("keys in PostgreSQL = %d (%v), want ann's and bob's", len(keys), err)
	}
	if _, err := os.Stat(filepath.Join(data, "agentplane.db")); err == nil {
		t.Fatal("--store postgres:// still created the embedded database")
	}
}
