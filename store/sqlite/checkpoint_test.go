package sqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
	sqlitedrv "modernc.org/sqlite"
)

// The writing connection never checkpoints (its commits do not stop to copy
// the log), the checkpointer copies the log into the database file while
// appends go on, and the log does not grow with what is written: rounds of
// appends leave it no bigger than about one round.
func TestCheckpointerKeepsTheLogBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := Open(ctx, Options{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var auto int
	if err := s.w.QueryRowContext(ctx, "PRAGMA wal_autocheckpoint").Scan(&auto); err != nil {
		t.Fatal(err)
	}
	if auto != 0 {
		t.Fatalf("the writing connection checkpoints every %d pages itself", auto)
	}
	now := time.Now()
	if err := s.CreateRun(ctx, &store.Run{ID: "r", Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x",
		Mode: "async", Status: store.StatusQueued, CreatedAt: now}); err != nil {
		t.Fatal(err)
	}
	r, err := s.ClaimRunByID(ctx, "r", "w", time.Minute, now)
	if err != nil {
		t.Fatal(err)
	}
	payload := []byte(fmt.Sprintf(`{"text":%q}`, strings.Repeat("x", 4000)))
	const perRound, rounds = 1500, 4 // about 6 MB of log a round
	seq := int64(0)
	walSize := func() int64 {
		fi, err := os.Stat(filepath.Join(dir, "agentplane.db-wal"))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	var first int64
	for round := range rounds {
		for range perRound / 10 {
			evs := make([]store.Event, 10)
			for i := range evs {
				seq++
				evs[i] = store.Event{RunID: "r", Seq: seq, Type: "tool_result", At: now, Payload: payload}
			}
			if err := s.Append(ctx, store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch, Events: evs}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Flush(ctx, "r"); err != nil {
			t.Fatal(err)
		}
		// Let the checkpointer catch up before the next round, as a pause
		// in the traffic would.
		want := s.stats.frames.Load() + 1
		for deadline := time.Now().Add(20 * time.Second); s.stats.frames.Load() < want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the checkpointer copied nothing in 20 s", round)
			}
		}
		if round == 0 {
			first = walSize()
		}
	}
	t.Logf("log: %d bytes after the first round, %d after the last", first, walSize())
	if last := walSize(); last > 2*first {
		t.Errorf("the log grew from %d bytes after the first round to %d after %d rounds: it is not reused", first, last, rounds)
	}
	evs, err := s.Events(ctx, "r", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != perRound*rounds {
		t.Fatalf("%d events, want %d", len(evs), perRound*rounds)
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
