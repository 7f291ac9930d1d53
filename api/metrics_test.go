package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
)

const metricsToken = "operator-token-0123456789abcdef"

// GET /metrics needs the operator's token: no credential, a tenant's key
// (even with tenant:admin) and a wrong token are refused; the token gets
// the metrics the workers' runs produced, labelled by tenant, agent and
// version, never by run.
func TestMetricsNeedTheOperatorsToken(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.MetricsToken = metricsToken }})
	id := f.startAsync(priya)
	f.waitStatus(priya, id, store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCompletedPartial)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := f.p.Telemetry.Tail.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	admin := apiKeyWith(t, f, []string{api.ScopeAdmin, api.ScopeRunsRead})
	for name, auth := range map[string]string{"none": "", "tenant key": "Bearer " + f.keys[priya], "tenant admin": "Bearer " + admin,
		"wrong token": "Bearer " + metricsToken + "x", "basic": "Basic " + metricsToken} {
		if r := f.do("", "GET", "/metrics", nil, "Authorization", auth); r.status != http.StatusUnauthorized {
			t.Errorf("%s: %s, want 401", name, r)
		}
	}
	r := f.do("", "GET", "/metrics", nil, "Authorization", "Bearer "+metricsToken)
	if r.status != http.StatusOK {
		t.Fatalf("operator: %s", r)
	}
	body := string(r.body)
	for _, want := range []string{
		`agentplane_runs_started_total{agent="` + demoAgent + `",tenant="` + bankTenant + `",version="`,
		`agentplane_steps_total{agent="` + demoAgent + `"`,
		`agentplane_model_tokens_total{agent="` + demoAgent + `",tenant="` + bankTenant + `",type="output",version="`,
		`agentplane_tool_call_duration_seconds_bucket{tier="1",tool="`,
		`agentplane_otel_spans_dropped_total{reason="queue_full"} 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if strings.Contains(body, id) {
		t.Error("a run id is a metric label")
	}
	if r := f.do("", "POST", "/metrics", nil, "Authorization", "Bearer "+metricsToken); r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s", r)
	}
}

// Without a token configured, /metrics is off.
func TestMetricsOffWithoutAToken(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	if r := f.do(priya, "GET", "/metrics", nil); r.status != http.StatusNotFound {
		t.Fatalf("%s, want 404", r)
	}
}

// apiKeyWith stores a key of priya's with scopes and returns its token.
func apiKeyWith(t *testing.T, f *fixture, scopes []string) string {
	t.Helper()
	tok, rec, err := api.NewAPIKey(bankTenant, priya, "metrics test", scopes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Store.PutAPIKey(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return tok
}

// GET /v1/runs?prompt_hash= lists the caller's tenant's runs that sent
// that prompt, and refuses what is not a prompt hash.
func TestListRunsByPromptHash(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	a, b := f.startAsync(priya), f.startAsync(priya)
	other := f.startAsync(gus)
	done := []string{store.StatusWaiting, store.StatusCompleted, store.StatusFailed, store.StatusCompletedPartial}
	for _, id := range []string{a, b} {
		f.waitStatus(priya, id, done...)
	}
	f.waitStatus(gus, other, done...)
	evs, err := f.p.Store.Events(context.Background(), a, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var hash string
	for _, ev := range evs {
		if ev.Type == store.EventModelCall {
			var mc struct {
				PromptHash string `json:"prompt_hash"`
			}
			if err := json.Unmarshal(ev.Payload, &mc); err != nil {
				t.Fatal(err)
			}
			hash = mc.PromptHash
			break
		}
	}
	if hash == "" {
		t.Fatal("no model call in the run")
	}
	r := f.do(priya, "GET", "/v1/runs?prompt_hash="+url.QueryEscape(hash), nil)
	if r.status != http.StatusOK {
		t.Fatal(r)
	}
	var list api.RunList
	r.decode(t, &list)
	var ids []string
	for _, run := range list.Runs {
		ids = append(ids, run.ID)
	}
	if !slices.Contains(ids, a) || !slices.Contains(ids, b) || slices.Contains(ids, other) {
		t.Fatalf("prompt_hash lists %v; want %s and %s, not the other tenant's %s", ids, a, b, other)
	}
	// The other tenant's identical prompt is not visible to priya, nor hers to gus.
	r = f.do(gus, "GET", "/v1/runs?prompt_hash="+strings.TrimPrefix(hash, "sha256:"), nil)
	r.decode(t, &list)
	for _, run := range list.Runs {
		if run.ID == a || run.ID == b {
			t.Fatalf("gus sees priya's run %s", run.ID)
		}
	}
	if r := f.do(priya, "GET", "/v1/runs?prompt_hash=abc", nil); r.status != http.StatusBadRequest {
		t.Fatalf("a malformed hash: %s, want 400", r)
	}
}
