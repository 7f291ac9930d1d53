package loop_test

import (
	"context"
	"database/sql"
	"errors"
	"github.com/agentplane/agentplane/runs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// tamperScript makes a run with a blob (the big result), a small result
// ("two") and, in tamperWaitScript, a payment that waits for approval.
const tamperScript = `
turns:
  - tool_calls: [{name: big, args: {size: 30000}}]
  - tool_calls: [{name: echo, args: {text: "two"}}]
  - text: done
`

const tamperWaitScript = `
turns:
  - tool_calls: [{name: big, args: {size: 30000}}]
  - tool_calls: [{name: echo, args: {text: "two"}}]
  - tool_calls: [{name: pay, args: {amount: 500}}]
  - text: done
`

// tamperings are the ways a log is damaged in these tests, with what
// trace verify says about each.
var tamperings = []struct {
	name   string
	tamper func(t *testing.T, db *sql.DB, f *fixture, runID string)
	want   string
}{
	{"edited payload", func(t *testing.T, db *sql.DB, f *fixture, runID string) {
		exec(t, db, `UPDATE events SET payload = replace(payload, 'two', 'TWO') WHERE run_id = ? AND type = 'tool_result' AND seq > 8`, runID)
	}, "tampered"},
	{"deleted event", func(t *testing.T, db *sql.DB, f *fixture, runID string) {
		exec(t, db, `DELETE FROM events WHERE run_id = ? AND seq = 5`, runID)
	}, "sequence gap"},
	{"rewritten chain", func(t *testing.T, db *sql.DB, f *fixture, runID string) {
		// Replace an event's hash too: the next event's link breaks.
		exec(t, db, `UPDATE events SET hash = zeroblob(32) WHERE run_id = ? AND seq = 3`, runID)
	}, "link broken"},
	{"edited blob", func(t *testing.T, db *sql.DB, f *fixture, runID string) {
		p := bigBlobPath(t, f, runID)
		data, _ := os.ReadFile(p)
		data[100] ^= 1
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}, "does not match its hash"},
	{"missing blob", func(t *testing.T, db *sql.DB, f *fixture, runID string) {
		if err := os.Remove(bigBlobPath(t, f, runID)); err != nil {
			t.Fatal(err)
		}
	}, "not found"},
}

// bigBlobPath is where the big tool's result is stored.
func bigBlobPath(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	evs, _ := f.p.Store.Events(context.Background(), runID, 0, 0)
	res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]
	sum, err := res.Output.Sum()
	if err != nil {
		t.Fatal(err)
	}
	return f.p.Store.BlobPath(sum)
}

func openDB(t *testing.T, f *fixture) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(f.dir, "agentplane.db")+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// verifyProblems runs trace verify and returns what it reports.
func verifyProblems(t *testing.T, f *fixture, runID string) string {
	t.Helper()
	rep, err := trace.Verify(context.Background(), f.p.Store, runID)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for _, p := range rep.Problems {
		all = append(all, p.Detail)
	}
	return strings.Join(all, "; ")
}

func TestTamperDetection(t *testing.T) {
	for _, tc := range tamperings {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{script: tamperScript})
			run, _ := f.run("t")
			if p := verifyProblems(t, f, run.ID); p != "" {
				t.Fatalf("untouched run does not verify: %s", p)
			}
			tc.tamper(t, openDB(t, f), f, run.ID)
			p := verifyProblems(t, f, run.ID)
			if p == "" {
				t.Fatal("tampering went undetected")
			}
			if !strings.Contains(p, tc.want) {
				t.Fatalf("problems %q do not mention %q", p, tc.want)
			}
		})
	}
}

// TestTamperedLogFailsClosed (issue 15, class 4): a run waiting for
// approval whose log was damaged meanwhile is not resumed when the approval
// arrives. The engine checks the chain and every blob before the loop sees
// the log; the run fails with the damage as its recorded reason, nothing is
// appended to the damaged log, and the approved payment never happens.
func TestTamperedLogFailsClosed(t *testing.T) {
	for _, tc := range tamperings {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{script: tamperWaitScript})
			run, id := startWaiting(t, f)
			ctx := context.Background()
			tc.tamper(t, openDB(t, f), f, run.ID)
			before, _ := f.p.Store.Events(ctx, run.ID, 0, 0)
			if err := f.p.Runs.Decide(ctx, runs.DecideRequest{ApprovalID: id, Tenant: "t1", Decider: "bob", Decision: "approve"}); err != nil {
				t.Fatal(err)
			}
			got, after := resume(t, f, run.ID)
			if got.Status != store.StatusFailed || !strings.Contains(got.Result, "damaged") {
				t.Fatalf("status %s, result %q; want failed with the damage as reason", got.Status, got.Result)
			}
			if p := paidIn(run.ID); len(p) != 0 {
				t.Fatalf("a damaged run was resumed and paid %v", p)
			}
			if len(after) != len(before) {
				t.Fatalf("the damaged log grew from %d to %d events", len(before), len(after))
			}
			if _, err := f.p.Embedded.Execute(ctx, run.ID); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("a failed-closed run is still runnable: %v", err)
			}
			if p := verifyProblems(t, f, run.ID); !strings.Contains(p, tc.want) {
				t.Fatalf("trace verify says %q, want %q", p, tc.want)
			}
		})
	}
}

func exec(t *testing.T, db *sql.DB, q string, args ...any) {
	t.Helper()
	res, err := db.Exec(q, args...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("%s changed nothing", q)
	}
}
