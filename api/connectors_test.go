package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
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
	f := &fixture{t: t, dir: st.Dir, p: st.Platform, srv: st.API, http: st.HTTP, clock: st.Clock, keys: st.Keys}

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
