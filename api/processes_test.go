package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
)

// TestTwoProcesses runs two API processes on one store (two handles on one
// SQLite data directory; two pools on one PostgreSQL database) and sends
// the requests that used to be decided in a process's memory to both at
// once: one Idempotency-Key names one run on every answer, and of racing
// decisions on one approval exactly one is accepted (the others are 409)
// and the bank refunds once.
func TestTwoProcesses(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) { testTwoProcesses(t, fixtureOptions{}) })
	t.Run("postgres", func(t *testing.T) {
		dsn := pgtest.DSN(t)
		testTwoProcesses(t, fixtureOptions{platform: func(o *platform.Options) { o.Store = dsn }})
	})
}

func testTwoProcesses(t *testing.T, fo fixtureOptions) {
	first := apitest.Start(t, fo.apitest())
	second := apitest.Join(t, first, fo.apitest())
	procs := []*fixture{fixtureOf(t, first), fixtureOf(t, second)}
	const callers = 8
	// send makes callers requests at once, alternating between the
	// processes, and returns each answer's status and body.
	send := func(user, method, path string, body func(i int) string, hdr ...string) ([]int, []string) {
		statuses, bodies := make([]int, callers), make([]string, callers)
		var wg sync.WaitGroup
		for i := range callers {
			wg.Go(func() {
				req, err := http.NewRequest(method, procs[i%2].http.URL+path, strings.NewReader(body(i)))
				if err != nil {
					bodies[i] = err.Error()
					return
				}
				req.Header.Set("Authorization", "Bearer "+first.Keys[user])
				req.Header.Set("Content-Type", "application/json")
				for j := 0; j+1 < len(hdr); j += 2 {
					req.Header.Set(hdr[j], hdr[j+1])
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					bodies[i] = err.Error()
					return
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				statuses[i], bodies[i] = resp.StatusCode, string(b)
			})
		}
		wg.Wait()
		return statuses, bodies
	}

	runBody := fmt.Sprintf(`{"agent":%q,"input":%q,"mode":"async"}`, demoAgent, demoTask)
	statuses, bodies := send(priya, "POST", "/v1/runs", func(int) string { return runBody }, "Idempotency-Key", "two-processes")
	var id string
	for i := range callers {
		var run api.Run
		if statuses[i] != http.StatusAccepted || json.Unmarshal([]byte(bodies[i]), &run) != nil || run.ID == "" {
			t.Fatalf("caller %d (process %d): %d %s, want 202 with the run", i, i%2+1, statuses[i], bodies[i])
		}
		if id == "" {
			id = run.ID
		}
		if run.ID != id {
			t.Fatalf("one Idempotency-Key named runs %s and %s", id, run.ID)
		}
	}
	runs, err := first.Platform.Store.ListRuns(context.Background(), store.RunFilter{Tenant: bankTenant})
	if err != nil || len(runs) != 1 {
		t.Fatalf("the tenant has %d runs (%v), want 1", len(runs), err)
	}

	ap := procs[1].waitPending(priya, id, "issue_refund")
	statuses, bodies = send(meera, "POST", "/v1/approvals/"+ap.ID+":decide", func(i int) string {
		if i%2 == 0 {
			return `{"decision":"approve"}`
		}
		return `{"decision":"reject"}`
	})
	accepted, approved := 0, false
	for i := range callers {
		switch {
		case statuses[i] == http.StatusAccepted:
			accepted++
			approved = i%2 == 0
		case statuses[i] == http.StatusConflict && strings.Contains(bodies[i], "approval_not_pending"):
		default:
			t.Fatalf("decision %d (process %d): %d %s, want 202 or 409 approval_not_pending", i, i%2+1, statuses[i], bodies[i])
		}
	}
	if accepted != 1 {
		t.Fatalf("%d of %d racing decisions were accepted, want exactly 1", accepted, callers)
	}
	// The run goes on with the decision that was accepted, and only that;
	// whatever it asks next (the email to the customer) is approved
	// through the other process.
	wantRefunds := 0
	if approved {
		wantRefunds = 1
	}
	var run api.Run
	decided := map[string]bool{ap.ID: true}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		run = procs[0].waitStatus(priya, id, store.StatusWaiting, store.StatusCompleted, store.StatusCompletedPartial, store.StatusFailed)
		if store.Terminal(run.Status) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still waits after 60s: %+v", id, run.PendingApprovals)
		}
		for _, a := range run.PendingApprovals {
			if !decided[a.ID] {
				decided[a.ID] = true
				procs[1].decide(meera, a.ID, map[string]any{"decision": "approve"})
			}
		}
	}
	ct, err := bankOf(first.Platform).CountersForRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ct.RefundsIssued != wantRefunds {
		t.Fatalf("approved=%v, run %s: bank issued %d refunds, want %d", approved, run.Status, ct.RefundsIssued, wantRefunds)
	}
}
