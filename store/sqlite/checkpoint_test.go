package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	sqlitedrv "modernc.org/sqlite"
)

// Under appends that never pause, with readers reading all the while, the
// checkpointer copies the log into the database file and the log stays
// bounded: it starts again from its beginning instead of growing with what
// is written (a passive checkpointer alone let it grow to twice the
// database under steady load).
func TestCheckpointerKeepsTheLogBounded(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	dir := s.Dir()
	now := time.Now()
	r := createAndClaim(t, s, "r", "w", base)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 4 {
		readers.Go(func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				if _, err := s.PendingSignals(ctx, "r"); err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Events(ctx, "r", 0, 5); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	payload := []byte(fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", 16000)))
	const events = 3000 // about 50 MB of log, three times walAutoCheckpoint
	for seq := int64(1); seq <= events; seq += 10 {
		evs := make([]store.Event, 10)
		for i := range evs {
			evs[i] = store.Event{RunID: "r", Seq: seq + int64(i), Type: "tool_result", At: now, Payload: payload}
		}
		if err := s.Append(ctx, store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch, Events: evs, Durable: true}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	close(stop)
	readers.Wait()
	fi, err := os.Stat(filepath.Join(dir, "agentplane.db-wal"))
	if err != nil {
		t.Fatal(err)
	}
	db, err := os.Stat(filepath.Join(dir, "agentplane.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log %d KB, database %d KB, %d checkpoints copied %d frames", fi.Size()>>10, db.Size()>>10, s.stats.runs.Load(), s.stats.frames.Load())
	if s.stats.frames.Load() == 0 {
		t.Error("the checkpointer copied nothing")
	}
	// The writer checkpoints past walAutoCheckpoint pages; the log may hold
	// those and the batches written while the last checkpoint ran.
	if limit := int64(2 * walAutoCheckpoint * 4096); fi.Size() > limit {
		t.Errorf("the log is %d bytes after %d bytes of database: it grows with what is written (limit %d)", fi.Size(), db.Size(), limit)
	}
	evs, err := s.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != events {
		t.Fatalf("%d events, want %d", len(evs), events)
	}
}

// An open store commits with fdatasync(2) (see useFdatasync), and appends
// made that way read back.
func TestCommitsWithFdatasync(t *testing.T) {
	s := openTemp(t)
	if !sqlitedrv.FdatasyncEnabled() {
		t.Fatal("SQLite still commits with fsync(2)")
	}
	ctx := context.Background()
	if err := s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x", Mode: "async"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetRun(ctx, "r"); err != nil {
		t.Fatal(err)
	}
}
