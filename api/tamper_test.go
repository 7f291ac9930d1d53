package api_test

import (
	"context"
	"database/sql"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
)

// TestTamperedWaitingRunFailsClosed (issue 15, class 4), through the API
// and against the demo bank: a run waiting for the refund's approval has its
// log damaged (an edited tool result, a zeroed event hash, a flipped byte
// of a blob); the supervisor approves; the run fails closed with the damage
// as the output the API shows, and the bank has issued no refund and sent
// no e-mail.
func TestTamperedWaitingRunFailsClosed(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, f *fixture, db *sql.DB, runID string)
	}{
		{"edited tool result", func(t *testing.T, f *fixture, db *sql.DB, runID string) {
			// The customer's e-mail address the model read is now someone else's.
			mustExec(t, db, `UPDATE events SET payload = CAST(replace(CAST(payload AS TEXT), 'asha.rao@mail.example', 'asha.rao@evil.example') AS BLOB) WHERE run_id = ? AND type = 'tool_result' AND instr(CAST(payload AS TEXT), 'asha.rao@mail.example') > 0`, runID)
		}},
		{"zeroed hash", func(t *testing.T, f *fixture, db *sql.DB, runID string) {
			mustExec(t, db, `UPDATE events SET hash = zeroblob(32) WHERE run_id = ? AND seq = 2`, runID)
		}},
		{"flipped blob byte", func(t *testing.T, f *fixture, db *sql.DB, runID string) {
			sum, err := hex.DecodeString(runBlobs(t, f, runID)[0])
			if err != nil {
				t.Fatal(err)
			}
			p := f.p.Store.(*sqlite.Store).BlobPath(bankTenant, [32]byte(sum)) // the sealed object
			if p == "" {
				t.Fatal("the fixture's blobs are not in a folder")
			}
			data, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			data[len(data)/2] ^= 1
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{})
			ctx := context.Background()
			// An agent with long instructions, so the run has a blob.
			if r := f.do(priya, "POST", "/v1/agents/long-bot/versions", otherAgentYAML(t, f.dir, "long-bot", 1)); r.status != http.StatusCreated {
				t.Fatalf("agent: %s", r)
			}
			r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": "long-bot", "input": demoTask, "mode": "async"})
			if r.status != http.StatusAccepted {
				t.Fatalf("start: %s", r)
			}
			var run api.Run
			r.decode(t, &run)
			ap := f.waitPending(priya, run.ID, "issue_refund")
			db, err := sql.Open("sqlite", "file:"+filepath.Join(f.dir, "agentplane.db")+"?_pragma=busy_timeout(5000)")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			tc.tamper(t, f, db, run.ID)
			f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
			// Wait until the run ends or moves on to another approval.
			var got api.Run
			for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				got = f.getRun(priya, run.ID)
				moved := got.Status == store.StatusWaiting && len(got.PendingApprovals) > 0 && got.PendingApprovals[0].ID != ap.ID
				if store.Terminal(got.Status) || moved {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("run is %s after 30s", got.Status)
				}
			}
			c, err := bankOf(f.p).Counters(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if c.RefundsIssued != 0 || c.RefundedPaise != 0 || c.EmailsSent != 0 {
				t.Fatalf("a damaged run was acted on: bank %+v", c)
			}
			if got.Status != store.StatusFailed || !strings.Contains(got.Output, "damaged") {
				t.Fatalf("the API shows %s with output %q, want failed with the damage", got.Status, got.Output)
			}
		})
	}
}

func mustExec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	res, err := db.Exec(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("%s changed nothing", q)
	}
}
