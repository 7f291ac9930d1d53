package sqlite

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"

	"github.com/agentplane/agentplane/store/storetest"
)

func TestAPIConformance(t *testing.T) {
	storetest.ExerciseAPI(t, func(t *testing.T) storetest.APIStore { return openTemp(t) })
}

func TestSessionConformance(t *testing.T) {
	storetest.ExerciseSessions(t, openTemp(t))
}

// TestProcesses opens the data directory twice, as two agentplane
// processes on one host would: SQLite's locks (WAL, BEGIN IMMEDIATE) decide
// between them.
func TestProcesses(t *testing.T) {
	storetest.ExerciseProcesses(t, func(t *testing.T) (storetest.APIStore, storetest.APIStore) {
		dir := t.TempDir()
		a, b := open(t, dir), open(t, dir)
		t.Cleanup(func() {
			if err := errors.Join(a.Close(), b.Close()); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return a, b
	})
}

// TestRefusesNewerSchema: a data directory written by a newer agentplane
// is refused at Open, saying what to do.
func TestRefusesNewerSchema(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	if _, err := s.w.Exec("PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	_, err := Open(t.Context(), Options{Dir: dir})
	if !errors.Is(err, ErrSchemaNewer) || !strings.Contains(err.Error(), "999") || !strings.Contains(err.Error(), "newer agentplane") {
		t.Fatalf("Open on a newer schema: %v, want ErrSchemaNewer naming version 999 and what to do", err)
	}
}

// TestRefusesDamagedDatabase: a database whose pages were overwritten fails
// the integrity check, and Open refuses to serve from it.
func TestRefusesDamagedDatabase(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	for i := range 200 {
		storetestRun(t, s, fmt.Sprintf("run-%03d", i))
	}
	s.Close()
	path := filepath.Join(dir, "agentplane.db")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const page = 4096
	if len(data) < 6*page {
		t.Fatalf("database is only %d bytes", len(data))
	}
	// Scribble over pages 3 to 5 (the header and schema page stay intact).
	for i := 2 * page; i < 5*page; i++ {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Open(t.Context(), Options{Dir: dir})
	if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "backup") {
		t.Fatalf("Open on a damaged database: %v, want ErrDamaged saying to restore a backup", err)
	}
}

func storetestRun(t *testing.T, s *Store, id string) {
	t.Helper()
	if err := s.CreateRun(t.Context(), &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1,
		Task: strings.Repeat("x", 200), Mode: "async"}); err != nil {
		t.Fatal(err)
	}
}

// TestLockedIsUnavailable: while another process holds the write lock past
// the busy timeout, a write fails with store.ErrUnavailable (the API's 503),
// and succeeds once the lock is gone.
func TestLockedIsUnavailable(t *testing.T) {
	dir := t.TempDir()
	s := openWith(t, Options{Dir: dir, BusyTimeout: 200 * time.Millisecond})
	defer s.Close()
	other, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "agentplane.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	run := &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}
	if err := s.CreateRun(t.Context(), run); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("CreateRun while another process holds the lock: %v, want ErrUnavailable", err)
	}
	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := s.CreateRun(t.Context(), run); err != nil {
		t.Fatalf("CreateRun after the lock is gone: %v", err)
	}
}
