package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
)

// otherAgentYAML is the demo agent under another name, for tenant B to own.
func otherAgentYAML(t testing.TB, dir, name string, version int) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "demo", "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "agent: card-dispute-assistant", "agent: "+name, 1)
	s = strings.Replace(s, "version: 1", "version: "+strconv.Itoa(version), 1)
	// Long instructions go to the blob store, which the blob route needs.
	return strings.Replace(s, "instructions: |\n", "instructions: |\n  "+strings.Repeat("This agent belongs to its tenant alone. ", 120)+"\n", 1)
}

// TestTenantIsolation enumerates every route of the API. Tenant B owns a
// waiting run with a pending approval, an ended run, an agent, a webhook and
// a delivery; tenant A, holding every scope, tries to read, stream, cancel,
// approve, replay or list each of them and must get 404 (or, for lists, not
// see them), and B's objects must be unchanged. A positive control repeats
// each request as B to show the paths are right. A route added without a
// case here fails the test.
func TestTenantIsolation(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
	defer hook.Close()

	// Tenant B (gus at globex).
	if r := f.do(gus, "PUT", "/v1/webhook", map[string]any{"url": hook.URL + "/b"}); r.status != 200 {
		t.Fatalf("B's webhook: %s", r)
	}
	if r := f.do(gus, "POST", "/v1/agents/globex-bot/versions", otherAgentYAML(t, f.dir, "globex-bot", 1)); r.status != http.StatusCreated {
		t.Fatalf("B's agent: %s", r)
	}
	var started api.Run
	sr := f.do(gus, "POST", "/v1/runs", map[string]any{"agent": "globex-bot", "input": demoTask, "mode": "async"})
	sr.decode(t, &started)
	waitingRun := started.ID
	ap := f.waitPending(gus, waitingRun, "issue_refund")
	endedRun := f.startAsync(gus)
	f.waitPending(gus, endedRun, "issue_refund")
	if r := f.do(gus, "POST", "/v1/runs/"+endedRun+":cancel", nil); r.status != http.StatusAccepted {
		t.Fatalf("cancel B's run: %s", r)
	}
	f.waitStatus(gus, endedRun, store.StatusCancelled)
	var delivery string
	for deadline := time.Now().Add(10 * time.Second); delivery == ""; {
		ds, err := f.p.Store.ListDeliveries(ctx, otherTenant, endedRun, 1)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 1 {
			delivery = ds[0].ID
		} else if time.Now().After(deadline) {
			t.Fatal("no webhook delivery for B's ended run")
		} else {
			time.Sleep(20 * time.Millisecond)
		}
	}
	evs, err := f.p.Store.Events(ctx, waitingRun, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	blob := ""
	for _, ev := range evs {
		if m := regexp.MustCompile(`"blob":"([0-9a-f]{64})"`).FindSubmatch(ev.Payload); m != nil {
			blob = string(m[1])
			break
		}
	}
	if blob == "" {
		t.Fatal("B's run refers to no blob; the blob route needs one")
	}
	modelCall := int64(0)
	for _, ev := range evs {
		if ev.Type == "model_call" {
			modelCall = ev.Seq
			break
		}
	}
	if modelCall == 0 {
		t.Fatal("B's run has no model call; the prompt route needs one")
	}
	// Tenant A has its own webhook.
	if r := f.do(priya, "PUT", "/v1/webhook", map[string]any{"url": hook.URL + "/a"}); r.status != 200 {
		t.Fatalf("A's webhook: %s", r)
	}
	bHook, _ := f.p.Store.GetWebhook(ctx, otherTenant)
	// Tenant B's MCP connector (its server is never reached: the fixture's
	// address policy refuses loopback, so B's own diff and review get 502).
	bConnector := map[string]any{"connector": map[string]any{"name": "globex-crm", "transport": "http", "endpoint": "http://127.0.0.1:9/mcp",
		"allow": []string{"127.0.0.1:9"}}, "overlays": ""}
	// Connectors are administered with tenant:admin: those cases use admin
	// keys of each tenant.
	adminA, adminB := "Bearer "+f.adminKey(bankTenant, meera), "Bearer "+f.adminKey(otherTenant, gus)
	if r := f.do(gus, "POST", "/v1/connectors", bConnector, "Authorization", adminB); r.status != http.StatusCreated {
		t.Fatalf("B's connector: %s", r)
	}

	notFound := func(t *testing.T, r *response) {
		t.Helper()
		if r.status != http.StatusNotFound {
			t.Fatalf("as tenant A: %s, want 404", r)
		}
		if strings.Contains(string(r.body), waitingRun) || strings.Contains(string(r.body), "globex") {
			t.Fatalf("the 404 names B's object: %s", r)
		}
	}
	hides := func(t *testing.T, r *response) {
		t.Helper()
		if r.status != http.StatusOK {
			t.Fatalf("as tenant A: %s, want 200", r)
		}
		for _, s := range []string{waitingRun, endedRun, "globex", ap.ID, delivery, "/b\""} {
			if strings.Contains(string(r.body), s) {
				t.Fatalf("tenant A sees %q of tenant B: %s", s, r)
			}
		}
	}
	type isoCase struct {
		path string
		body any
		hdr  []string
		asA  func(t *testing.T, r *response)
		// control is what B gets for the same request (default: not 404).
		control int
		// admin sends each tenant's tenant:admin key.
		admin bool
	}
	cases := map[string]isoCase{
		"GET /v1/openapi.json": {path: "/v1/openapi.json", asA: func(t *testing.T, r *response) {
			if r.status != 200 || strings.Contains(string(r.body), "globex") {
				t.Fatalf("openapi: %d", r.status)
			}
		}},
		"POST /v1/runs":         {path: "/v1/runs", body: map[string]any{"agent": "globex-bot", "input": "x", "mode": "async"}, asA: notFound},
		"GET /v1/runs":          {path: "/v1/runs", asA: hides},
		"GET /v1/runs/{run_id}": {path: "/v1/runs/" + waitingRun, asA: notFound},
		"GET /v1/runs/{run_id}/events": {path: "/v1/runs/" + waitingRun + "/events", asA: func(t *testing.T, r *response) {
			notFound(t, r)
			sse := f.do(priya, "GET", "/v1/runs/"+waitingRun+"/events", nil, "Accept", "text/event-stream", "Last-Event-ID", "0")
			notFound(t, sse)
		}},
		"GET /v1/runs/{run_id}/blobs/{sha256}": {path: "/v1/runs/" + waitingRun + "/blobs/" + blob, asA: notFound},
		"GET /v1/runs/{run_id}/prompt":         {path: "/v1/runs/" + waitingRun + "/prompt?seq=" + strconv.FormatInt(modelCall, 10), asA: notFound},
		"GET /v1/agents/{agent}/metrics":       {path: "/v1/agents/globex-bot/metrics", asA: notFound},
		// A session is always the credential's own; with a header
		// credential there is no session to read or end (404 for both).
		"POST /v1/session": {path: "/v1/session", asA: func(t *testing.T, r *response) {
			var sn api.Session
			if r.status != http.StatusCreated {
				t.Fatalf("sign in as A: %s", r)
			}
			r.decode(t, &sn)
			if sn.Tenant != bankTenant || sn.User != meera {
				t.Fatalf("A's session = %+v", sn)
			}
		}},
		"GET /v1/session":    {path: "/v1/session", asA: notFound, control: http.StatusNotFound},
		"DELETE /v1/session": {path: "/v1/session", asA: notFound, control: http.StatusNotFound},
		"POST /v1/runs/{run_id}/messages": {path: "/v1/runs/" + waitingRun + "/messages", body: map[string]any{"text": "hi"}, asA: func(t *testing.T, r *response) {
			notFound(t, r)
			if sigs, _ := f.p.Store.PendingSignals(ctx, waitingRun); len(sigs) != 0 {
				t.Fatalf("A's message reached B's run: %d signals", len(sigs))
			}
		}},
		"POST /v1/runs/{run_id}:cancel": {path: "/v1/runs/" + waitingRun + ":cancel", asA: func(t *testing.T, r *response) {
			notFound(t, r)
			if sigs, _ := f.p.Store.PendingSignals(ctx, waitingRun); len(sigs) != 0 {
				t.Fatalf("A's cancel reached B's run")
			}
		}},
		"POST /v1/runs/{run_id}:replay":   {path: "/v1/runs/" + endedRun + ":replay", body: map[string]any{"from_step": 1}, asA: notFound},
		"GET /v1/approvals":               {path: "/v1/approvals", asA: hides},
		"GET /v1/approvals/{approval_id}": {path: "/v1/approvals/" + ap.ID, asA: notFound},
		"POST /v1/approvals/{approval_id}:decide": {path: "/v1/approvals/" + ap.ID + ":decide", body: map[string]any{"decision": "approve"},
			asA: func(t *testing.T, r *response) {
				notFound(t, r)
				if sigs, _ := f.p.Store.PendingSignals(ctx, waitingRun); len(sigs) != 0 {
					t.Fatalf("A's decision reached B's run")
				}
			}, control: http.StatusForbidden}, // gus requested it
		"GET /v1/agents":         {path: "/v1/agents", asA: hides},
		"GET /v1/agents/{agent}": {path: "/v1/agents/globex-bot", asA: notFound},
		"POST /v1/agents/{agent}/versions": {path: "/v1/agents/globex-bot/versions", body: otherAgentYAML(t, f.dir, "globex-bot", 2), asA: func(t *testing.T, r *response) {
			notFound(t, r)
			if vs, _ := f.p.Store.ListAgentVersions(ctx, "globex-bot"); len(vs) != 1 {
				t.Fatalf("A added a version to B's agent")
			}
		}},
		"GET /v1/agents/{agent}/versions/{version}": {path: "/v1/agents/globex-bot/versions/1", asA: notFound},
		"POST /v1/agents/{agent}/versions/{version}:retire": {path: "/v1/agents/globex-bot/versions/1:retire", asA: func(t *testing.T, r *response) {
			notFound(t, r)
			if v, _ := f.p.Store.GetAgentVersion(ctx, "globex-bot", 1); v == nil || !v.RetiredAt.IsZero() {
				t.Fatalf("A retired B's agent version")
			}
		}},
		"PUT /v1/agents/{agent}/aliases/{alias}": {path: "/v1/agents/globex-bot/aliases/prod", body: map[string]any{"version": 1}, asA: func(t *testing.T, r *response) {
			notFound(t, r)
			if _, err := f.p.Store.GetAlias(ctx, "globex-bot", "prod"); err == nil {
				t.Fatalf("A set an alias of B's agent")
			}
		}},
		"GET /v1/webhook": {path: "/v1/webhook", asA: hides},
		"PUT /v1/webhook": {path: "/v1/webhook", body: map[string]any{"url": hook.URL + "/a2"}, asA: func(t *testing.T, r *response) {
			hides(t, r)
			if w, _ := f.p.Store.GetWebhook(ctx, otherTenant); w.URL != bHook.URL || w.Secret != bHook.Secret {
				t.Fatalf("A's PUT changed B's webhook")
			}
		}},
		"DELETE /v1/webhook": {path: "/v1/webhook", asA: func(t *testing.T, r *response) {
			if r.status != http.StatusNoContent {
				t.Fatalf("A deletes its own webhook: %s", r)
			}
			if _, err := f.p.Store.GetWebhook(ctx, otherTenant); err != nil {
				t.Fatalf("A's DELETE removed B's webhook: %v", err)
			}
		}, control: http.StatusNoContent},
		"GET /v1/webhook/deliveries": {path: "/v1/webhook/deliveries?run_id=" + endedRun, asA: func(t *testing.T, r *response) {
			hides(t, r)
			hides(t, f.do(priya, "GET", "/v1/webhook/deliveries", nil))
		}},
		"GET /v1/webhook/deliveries/{delivery_id}": {path: "/v1/webhook/deliveries/" + delivery, asA: notFound},
		"POST /v1/erasures":                        {path: "/v1/erasures", body: map[string]any{"run_id": endedRun}, asA: notFound, control: http.StatusOK, admin: true},
		"PUT /v1/tenant/settings": {path: "/v1/tenant/settings", body: map[string]any{"link_domains": []string{"a.example"}, "require_alias": true},
			asA: func(t *testing.T, r *response) {
				// Settings are always the caller's own tenant's; without
				// tenant:admin they cannot be changed at all.
				if r.status != http.StatusForbidden {
					t.Fatalf("settings without tenant:admin: %s, want 403", r)
				}
				if _, err := f.p.Store.GetTenantSettings(ctx, otherTenant); err == nil {
					t.Fatalf("A's PUT stored settings for B")
				}
			}, control: http.StatusForbidden},
		"GET /v1/connectors":             {path: "/v1/connectors", asA: hides},
		"GET /v1/connectors/{connector}": {path: "/v1/connectors/globex-crm", asA: notFound},
		"POST /v1/connectors": {path: "/v1/connectors", body: bConnector, asA: func(t *testing.T, r *response) {
			if r.status != http.StatusConflict || strings.Contains(string(r.body), "127.0.0.1:9") {
				t.Fatalf("A registering B's connector name: %s, want 409 naming nothing of B's", r)
			}
		}, control: http.StatusCreated, admin: true},
		"DELETE /v1/connectors/{connector}":      {path: "/v1/connectors/globex-crm", asA: notFound, control: http.StatusNoContent, admin: true},
		"GET /v1/connectors/{connector}/diff":    {path: "/v1/connectors/globex-crm/diff", asA: notFound, control: http.StatusBadGateway, admin: true},
		"POST /v1/connectors/{connector}:review": {path: "/v1/connectors/globex-crm:review", body: map[string]any{"expect_hash": "00"}, asA: notFound, control: http.StatusBadGateway, admin: true},
		// B's connector has no OAuth: B's own attempts are refused (422).
		"POST /v1/connectors/{connector}/oauth:start": {path: "/v1/connectors/globex-crm/oauth:start", body: map[string]any{"redirect_uri": "http://127.0.0.1:1/cb"},
			asA: notFound, control: http.StatusUnprocessableEntity},
		"GET /v1/connectors/{connector}/oauth/callback": {path: "/v1/connectors/globex-crm/oauth/callback?state=s&code=c", asA: notFound, control: http.StatusUnprocessableEntity},
		"GET /v1/tenant": {path: "/v1/tenant", asA: func(t *testing.T, r *response) {
			hides(t, r)
			var tn api.Tenant
			r.decode(t, &tn)
			if tn.Tenant != bankTenant || tn.Usage.OpenRuns != 0 {
				t.Fatalf("tenant = %+v", tn)
			}
		}},
	}
	type matched struct {
		rt api.Route
		c  isoCase
	}
	var run []matched
	for _, rt := range api.Routes() {
		key := rt.Method + " " + rt.Pattern
		c, ok := cases[key]
		if !ok {
			t.Errorf("route %s has no tenant-isolation case: add one", key)
			continue
		}
		delete(cases, key)
		run = append(run, matched{rt, c})
	}
	for key := range cases {
		t.Errorf("case %s matches no route", key)
	}
	for _, m := range run {
		t.Run(m.rt.Method+" "+m.rt.Pattern, func(t *testing.T) {
			hdr := m.c.hdr
			if m.c.admin {
				hdr = append(hdr[:len(hdr):len(hdr)], "Authorization", adminA)
			}
			m.c.asA(t, f.do(meera, m.rt.Method, m.c.path, m.c.body, hdr...))
		})
	}
	// Positive controls, after every negative: the same requests as tenant
	// B reach B's objects, so the 404s above are not wrong paths. The cancel
	// goes last: it ends the run the other controls use.
	// The connector's removal and the erasure of B's ended run go last but
	// one: the other controls need the connector and the run's content.
	last := func(rt api.Route) int {
		switch {
		case strings.HasSuffix(rt.Pattern, ":cancel"):
			return 2
		case rt.Method == "DELETE" && strings.HasPrefix(rt.Pattern, "/v1/connectors/"), rt.Pattern == "/v1/erasures":
			return 1
		}
		return 0
	}
	sort.SliceStable(run, func(i, j int) bool { return last(run[i].rt) < last(run[j].rt) })
	for _, m := range run {
		hdr := m.c.hdr
		if m.c.admin {
			hdr = append(hdr[:len(hdr):len(hdr)], "Authorization", adminB)
		}
		r := f.do(gus, m.rt.Method, m.c.path, m.c.body, hdr...)
		want := m.c.control
		if (want == 0 && (r.status == http.StatusNotFound || r.status >= 500)) || (want != 0 && r.status != want) {
			t.Errorf("control: %s %s as tenant B: %s (want %d, or any non-404 below 500)", m.rt.Method, m.c.path, r, want)
		}
	}
}
