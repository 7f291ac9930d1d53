package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcphost/oauthtest"
)

type apiEchoIn struct {
	Text string `json:"text"`
}

// TestConnectorsAPI registers, diffs, reviews, shows and removes a
// connector over HTTP, against a Go SDK MCP server on loopback.
func TestConnectorsAPI(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "crm"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes.\u202e hidden"}, func(ctx context.Context, req *mcp.CallToolRequest, in apiEchoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
	})
	mcpSrv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
	t.Cleanup(mcpSrv.Close)
	hp := strings.TrimPrefix(mcpSrv.URL, "http://")

	st := apitest.Start(t, apitest.Options{Platform: func(o *platform.Options) { o.MCP.AllowLoopback = true }}) // test-only
	f := fixtureOf(t, st)

	admin := []string{"Authorization", "Bearer " + f.adminKey(apitest.BankTenant, priya)}
	if r := f.do(priya, "GET", "/v1/connectors/crm/diff", nil); r.status != http.StatusForbidden {
		t.Fatalf("diff without tenant:admin: %s", r)
	}
	add := map[string]any{"connector": map[string]any{"name": "crm", "transport": "http", "endpoint": mcpSrv.URL + "/mcp", "allow": []string{hp}},
		"overlays": "tool: echo\nrisk: low\ntier: 2\ntimeout_ms: 2000\nside_effects: none\n"}
	if r := f.do(priya, "POST", "/v1/connectors", map[string]any{"connector": map[string]any{"name": "crm", "transport": "http", "endpoint": mcpSrv.URL + "/mcp"}, "overlays": ""}, admin...); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("an endpoint outside the allowlist: %s", r)
	}
	r := f.do(priya, "POST", "/v1/connectors", add, admin...)
	var c api.Connector
	r.decode(t, &c)
	if r.status != http.StatusCreated || c.SnapshotHash != "" || len(c.Tools) != 0 {
		t.Fatalf("add: %s", r)
	}
	r = f.do(priya, "GET", "/v1/connectors/crm/diff", nil, admin...)
	var d api.ConnectorDiff
	r.decode(t, &d)
	if r.status != 200 || len(d.Changes) != 1 || d.Changes[0].Kind != "added" || d.Changes[0].Live.Description != "Echoes.\u202e hidden" {
		t.Fatalf("diff: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/connectors/crm:review", map[string]any{"expect_hash": strings.Repeat("0", 64)}, admin...); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("review of another listing: %s", r)
	}
	r = f.do(priya, "POST", "/v1/connectors/crm:review", map[string]any{"expect_hash": d.LiveHash}, admin...)
	r.decode(t, &c)
	if r.status != 200 || c.SnapshotHash != d.LiveHash || c.ReviewedBy != priya || len(c.Tools) != 1 || c.Tools[0].Name != "echo" {
		t.Fatalf("review: %s", r)
	}
	r = f.do(priya, "GET", "/v1/connectors", nil)
	var l api.ConnectorList
	r.decode(t, &l)
	if r.status != 200 || len(l.Connectors) != 1 || l.Connectors[0].SnapshotHash != d.LiveHash {
		t.Fatalf("list: %s", r)
	}
	if r := f.do(priya, "GET", "/v1/connectors/crm", nil); r.status != 200 {
		t.Fatalf("show: %s", r)
	}
	if r := f.do(priya, "DELETE", "/v1/connectors/crm", nil, admin...); r.status != http.StatusNoContent {
		t.Fatalf("delete: %s", r)
	}
	if r := f.do(priya, "GET", "/v1/connectors/crm", nil); r.status != http.StatusNotFound {
		t.Fatalf("after delete: %s", r)
	}
}

// TestConnectorOAuthAPI: a caller connects their own account to an oauth
// connector over HTTP (oauth:start, the browser at the authorization
// server, the callback as the same caller); the answer presented by
// another user completes nothing, and the reviewer's connected account
// lists the server.
func TestConnectorOAuthAPI(t *testing.T) {
	as := oauthtest.NewAuthServer(t, oauthtest.NewClock(time.Now()))
	crm := oauthtest.NewResourceServer(t, as, "crm")
	st := apitest.Start(t, apitest.Options{Platform: func(o *platform.Options) { o.MCP.AllowLoopback = true }}) // test-only
	f := fixtureOf(t, st)
	admin := []string{"Authorization", "Bearer " + f.adminKey(apitest.BankTenant, priya)}
	host := func(raw string) string { u, _ := url.Parse(raw); return u.Host }
	add := map[string]any{"connector": map[string]any{"name": "crm", "transport": "http", "endpoint": crm.URL, "auth": "oauth",
		"oauth": map[string]any{"client_id": "agentplane"}, "allow": []string{host(crm.URL), host(as.URL)}},
		"overlays": "tool: whoami\nrisk: low\ntier: 2\ntimeout_ms: 5000\nside_effects: none\nauth: {mode: on_behalf_of_user, scopes: ['crm:read']}\n"}
	var c api.Connector
	if r := f.do(priya, "POST", "/v1/connectors", add, admin...); r.status != http.StatusCreated {
		t.Fatalf("add: %s", r)
	} else if r.decode(t, &c); c.Connector.OAuth == nil || c.Connector.OAuth.ClientID != "agentplane" {
		t.Fatalf("add: %s", r)
	}
	if r := f.do(priya, "GET", "/v1/connectors/crm/diff", nil, admin...); r.status != http.StatusBadGateway || !strings.Contains(string(r.body), "connect your account") {
		t.Fatalf("diff before connecting: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/connectors/crm/oauth:start", map[string]any{"redirect_uri": "http://attacker.example/cb"}); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("an http redirect off loopback: %s", r)
	}
	r := f.do(priya, "POST", "/v1/connectors/crm/oauth:start", map[string]any{"redirect_uri": "http://127.0.0.1:1/v1/connectors/crm/oauth/callback"})
	var started api.OAuthStarted
	r.decode(t, &started)
	if r.status != 200 || !strings.HasPrefix(started.AuthorizationURL, as.URL+"/authorize?") {
		t.Fatalf("start: %s", r)
	}
	cb := oauthtest.Authorize(t, started.AuthorizationURL, priya)
	q := url.Values{"state": {cb.State}, "code": {cb.Code}, "iss": {cb.Iss}}
	if r := f.do(meera, "GET", "/v1/connectors/crm/oauth/callback?"+q.Encode(), nil); r.status != http.StatusUnprocessableEntity {
		t.Fatalf("priya's answer presented by meera: %s", r)
	}
	r = f.do(priya, "GET", "/v1/connectors/crm/oauth/callback?"+q.Encode(), nil)
	var done api.OAuthConnected
	r.decode(t, &done)
	if r.status != 200 || !done.Connected || done.User != priya {
		t.Fatalf("callback: %s", r)
	}
	if strings.Contains(string(r.body), cb.Code) {
		t.Fatal("the answer echoes the code")
	}
	if r := f.do(priya, "GET", "/v1/connectors/crm/diff", nil, admin...); r.status != 200 {
		t.Fatalf("diff as priya after connecting: %s", r)
	}
	for _, tok := range crm.Tokens() {
		if strings.Contains(string(r.body), tok) {
			t.Fatal("a token in an answer")
		}
	}
}
