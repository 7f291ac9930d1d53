package loop_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/trace"
)

func TestTamperDetection(t *testing.T) {
	script := `
turns:
  - tool_calls: [{name: big, args: {size: 30000}}]
  - tool_calls: [{name: echo, args: {text: "two"}}]
  - text: done
`
	cases := []struct {
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
			evs, _ := f.p.Store.Events(context.Background(), runID, 0, 0)
			res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]
			sum, _ := res.Output.Sum()
			p := f.p.Store.BlobPath(sum)
			data, _ := os.ReadFile(p)
			data[100] ^= 1
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}, "does not match its hash"},
		{"missing blob", func(t *testing.T, db *sql.DB, f *fixture, runID string) {
			evs, _ := f.p.Store.Events(context.Background(), runID, 0, 0)
			res := payloads[trace.ToolResult](t, evs, trace.EvToolResult)[0]
			sum, _ := res.Output.Sum()
			os.Remove(f.p.Store.BlobPath(sum))
		}, "not found"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureOptions{script: script})
			run, _ := f.run("t")
			ctx := context.Background()
			if rep, err := trace.Verify(ctx, f.p.Store, run.ID); err != nil || !rep.OK() {
				t.Fatalf("untouched run does not verify: %+v %v", rep, err)
			}
			db, err := sql.Open("sqlite", "file:"+filepath.Join(f.dir, "agentplane.db")+"?_pragma=busy_timeout(5000)")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			tc.tamper(t, db, f, run.ID)
			rep, err := trace.Verify(ctx, f.p.Store, run.ID)
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() {
				t.Fatal("tampering went undetected")
			}
			var all []string
			for _, p := range rep.Problems {
				all = append(all, p.Detail)
			}
			if !strings.Contains(strings.Join(all, "; "), tc.want) {
				t.Fatalf("problems %q do not mention %q", all, tc.want)
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
