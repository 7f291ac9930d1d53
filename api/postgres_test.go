package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
)

// TestOnPostgres drives the demo through its approvals with the platform
// on PostgreSQL, then closes the store's pool under the running server:
// every request that needs the store answers 503 with Retry-After and a
// message that says nothing of the driver, never a 4xx.
func TestOnPostgres(t *testing.T) {
	dsn := pgtest.DSN(t)
	f := newFixture(t, fixtureOptions{platform: func(o *platform.Options) { o.Store = dsn }})
	id := f.startAsync(priya)
	ap := f.waitPending(priya, id, "issue_refund")
	f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
	if r := f.do(meera, "POST", "/v1/approvals/"+ap.ID+":decide", map[string]any{"decision": "reject"}); r.status != http.StatusConflict {
		t.Fatalf("a second decision on PostgreSQL: %s, want 409", r)
	}
	email := f.waitPending(priya, id, "send_email")
	f.decide(meera, email.ID, map[string]any{"decision": "approve"})
	f.waitStatus(priya, id, store.StatusCompleted)
	ct, err := bankOf(f.p).CountersForRun(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if ct.RefundsIssued != 1 {
		t.Fatalf("bank: %+v, want one refund", ct)
	}

	f.p.Store.Close() // the database is gone from under the server
	for _, req := range []struct{ method, path string }{
		{"GET", "/v1/runs/" + id},
		{"GET", "/v1/runs/" + id + "/events"},
		{"GET", "/v1/approvals"},
	} {
		r := f.do(priya, req.method, req.path, nil)
		body := string(r.body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" || !strings.Contains(body, "store_unavailable") {
			t.Fatalf("%s %s with the store closed: %s (Retry-After %q), want 503 store_unavailable with Retry-After",
				req.method, req.path, r, r.header.Get("Retry-After"))
		}
		for _, driver := range []string{"pool", "pgx", "postgres", "closed", "127.0.0.1"} {
			if strings.Contains(strings.ToLower(body), driver) {
				t.Fatalf("%s %s: the answer %s carries driver text %q", req.method, req.path, body, driver)
			}
		}
	}
}
