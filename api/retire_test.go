package api_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
)

// adminKey stores a key for user holding every scope, tenant:admin included.
func (f *fixture) adminKey(tenant, user string) string {
	f.t.Helper()
	tok, rec, err := api.NewAPIKey(tenant, user, "admin", api.AllScopes, f.clock.Now())
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.p.Store.PutAPIKey(context.Background(), rec); err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// wantError fails unless r has the status and error code.
func wantError(t *testing.T, what string, r *response, status int, code string) {
	t.Helper()
	if r.status != status || !strings.Contains(string(r.body), `"`+code+`"`) {
		t.Fatalf("%s: %s, want %d %s", what, r, status, code)
	}
}

// TestClass10RetireOverHTTP is issue 15 class 10 over the API: a retired
// version starts no run by number or through an alias still pointing at
// it, no alias moves to it, and a tenant that requires aliases refuses
// version numbers and latest from callers without tenant:admin.
func TestClass10RetireOverHTTP(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.NoWorkers = true }})
	for v := 1; v <= 2; v++ {
		if r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions", otherAgentYAML(t, f.dir, "dispute-bot", v)); r.status != http.StatusCreated {
			t.Fatalf("v%d: %s", v, r)
		}
	}
	for alias, v := range map[string]int{"prod": 2, "legacy": 1} {
		if r := f.do(priya, "PUT", "/v1/agents/dispute-bot/aliases/"+alias, map[string]any{"version": v}); r.status != http.StatusOK {
			t.Fatalf("alias %s: %s", alias, r)
		}
	}
	run := func(key string, version any) *response {
		body := map[string]any{"agent": "dispute-bot", "input": "x", "mode": "async"}
		if version != nil {
			body["version"] = version
		}
		hdr := []string{}
		if key != "" {
			hdr = append(hdr, "Authorization", "Bearer "+key)
		}
		return f.do(priya, "POST", "/v1/runs", body, hdr...)
	}
	if r := run("", 1); r.status != http.StatusAccepted {
		t.Fatalf("run on version 1 before retiring: %s", r)
	}

	if r := f.do(gus, "POST", "/v1/agents/dispute-bot/versions/1:retire", nil); r.status != http.StatusNotFound {
		t.Fatalf("another tenant retires: %s", r)
	}
	var av api.AgentVersion
	r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions/1:retire", nil)
	r.decode(t, &av)
	if r.status != http.StatusOK || av.RetiredAt == nil || !slices.Equal(av.StillAliased, []string{"legacy"}) {
		t.Fatalf("retire: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/agents/dispute-bot/versions/9:retire", nil); r.status != http.StatusNotFound {
		t.Fatalf("retire a missing version: %s", r)
	}
	wantError(t, "run on retired version 1", run("", 1), http.StatusConflict, "agent_version_retired")
	wantError(t, "run through an alias of retired version 1", run("", "legacy"), http.StatusConflict, "agent_version_retired")
	wantError(t, "move an alias to retired version 1", f.do(priya, "PUT", "/v1/agents/dispute-bot/aliases/staging", map[string]any{"version": 1}),
		http.StatusConflict, "agent_version_retired")
	if r := run("", 2); r.status != http.StatusAccepted {
		t.Fatalf("run on live version 2: %s", r)
	}
	var ag api.Agent
	f.do(priya, "GET", "/v1/agents/dispute-bot", nil).decode(t, &ag)
	if !slices.Equal(ag.Retired, []int{1}) {
		t.Fatalf("agent = %+v, want version 1 listed as retired", ag)
	}
	var gv api.AgentVersion
	f.do(priya, "GET", "/v1/agents/dispute-bot/versions/1", nil).decode(t, &gv)
	if gv.RetiredAt == nil || !gv.RetiredAt.Equal(*av.RetiredAt) {
		t.Fatalf("version 1 = %+v, want retired at %v", gv, av.RetiredAt)
	}

	// The tenant starts requiring aliases. Only its admin may say so.
	settings := map[string]any{"require_alias": true, "link_domains": []string{"Example-Bank.in"}}
	wantError(t, "settings without tenant:admin", f.do(priya, "PUT", "/v1/tenant/settings", settings), http.StatusForbidden, "forbidden")
	admin := f.adminKey(bankTenant, meera)
	var ts api.TenantSettings
	r = f.do("", "PUT", "/v1/tenant/settings", settings, "Authorization", "Bearer "+admin)
	r.decode(t, &ts)
	if r.status != http.StatusOK || !ts.RequireAlias || !slices.Equal(ts.LinkDomains, []string{"example-bank.in"}) {
		t.Fatalf("settings: %s", r)
	}
	wantError(t, "bad link domain", f.do("", "PUT", "/v1/tenant/settings", map[string]any{"link_domains": []string{"https://x.example/"}},
		"Authorization", "Bearer "+admin), http.StatusUnprocessableEntity, "invalid_settings")
	var tn api.Tenant
	f.do(priya, "GET", "/v1/tenant", nil).decode(t, &tn)
	if !tn.Settings.RequireAlias || !slices.Equal(tn.Settings.LinkDomains, []string{"example-bank.in"}) {
		t.Fatalf("tenant = %+v", tn)
	}
	wantError(t, "pinned version without admin", run("", 2), http.StatusForbidden, "alias_required")
	wantError(t, "latest without admin", run("", "latest"), http.StatusForbidden, "alias_required")
	for _, v := range []any{nil, "prod"} {
		var got api.Run
		r := run("", v)
		r.decode(t, &got)
		if r.status != http.StatusAccepted || got.AgentVersion != 2 {
			t.Fatalf("run through the alias (version %v): %s", v, r)
		}
	}
	if r := run(admin, 2); r.status != http.StatusAccepted {
		t.Fatalf("an admin pins version 2: %s", r)
	}
	wantError(t, "an admin pins retired version 1", run(admin, 1), http.StatusConflict, "agent_version_retired")
}

// TestClass10RunInFlightFinishes: a run that was pinned to a version and
// waits for an approval when the version is retired finishes on it; a new
// run on the version is refused meanwhile.
func TestClass10RunInFlightFinishes(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	id := f.startAsync(priya)
	ap := f.waitPending(priya, id, "issue_refund")
	pinned := f.getRun(priya, id).AgentVersion
	if _, err := f.p.Registry.Retire(context.Background(), demoAgent, pinned); err != nil {
		t.Fatal(err)
	}
	wantError(t, "a new run on the retired version", f.do(priya, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask, "mode": "async"}),
		http.StatusConflict, "agent_version_retired")
	f.decide(meera, ap.ID, map[string]any{"decision": "approve"})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		run := f.waitStatus(priya, id, store.StatusWaiting, store.StatusCompleted, store.StatusCompletedPartial, store.StatusFailed)
		if run.Status == store.StatusCompleted {
			if run.AgentVersion != pinned {
				t.Fatalf("run finished on version %d, pinned %d", run.AgentVersion, pinned)
			}
			break
		}
		if run.Status != store.StatusWaiting {
			t.Fatalf("the run in flight ended %s after its version was retired: %q", run.Status, run.Output)
		}
		// The demo asks again before its e-mail; approve each as it comes.
		for _, a := range run.PendingApprovals {
			if a.Status == "pending" && a.ID != ap.ID {
				f.decide(meera, a.ID, map[string]any{"decision": "approve"})
				ap = a
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s still waiting after approvals", id)
		}
	}
}
