package platform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcphost/oauthtest"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

const crmOverlay = `
tool: whoami
name: crm_whoami
risk: low
tier: 2
timeout_ms: 10000
side_effects: none
auth: {mode: on_behalf_of_user, scopes: ["crm:read"]}
`

const crmTurns = `
turns:
  - text: "asking"
    tool_calls: [{name: crm_whoami, args: {}}]
  - text: "done"
`

const crmAgent = `
agent: crm-agent
version: 1
description: Asks the CRM who the user is.
model: {alias: reasoning-standard}
instructions: Ask the CRM.
tools:
  - connector: crm
    allow: [crm_whoami]
budgets: {max_steps: 5, max_input_tokens: 100000, max_cost_usd: 1, max_wall_clock: 10m}
`

// TestOAuthConnectorRun: a connector with per-user OAuth registered,
// connected by its reviewer and a user, reviewed and granted by
// connector; a run as the user calls the server with the user's own token
// and a run as a user who never connected is told to connect. No token
// reaches the event log, the blobs or the secrets folder in plaintext.
func TestOAuthConnectorRun(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"models.yaml": notesModels, "turns.yaml": crmTurns, "agent.yaml": crmAgent})
	data := filepath.Join(dir, "data")
	p, err := platform.Open(ctx, platform.Options{DataDir: data, ModelsFile: filepath.Join(dir, "models.yaml"),
		MCP: platform.MCPOptions{AllowLoopback: true}}) // test-only: the servers are on loopback
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	as := oauthtest.NewAuthServer(t, oauthtest.NewClock(time.Now()))
	crm := oauthtest.NewResourceServer(t, as, "crm")
	hp := func(raw string) string { u, _ := url.Parse(raw); return u.Host }
	spec := fmt.Sprintf("name: crm\ntransport: http\nendpoint: %s\nauth: oauth\noauth: {client_id: agentplane}\nallow: [%q, %q]\n", crm.URL, hp(crm.URL), hp(as.URL))
	if _, err := p.AddConnector(ctx, "bank", []byte(spec), []byte(crmOverlay)); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"priya", "alice", "bob"} {
		pr, err := authz.New("bank", u, []string{"crm:read"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetUser(ctx, pr); err != nil {
			t.Fatal(err)
		}
	}
	// Listing the server needs a connected account: the reviewer's.
	if _, _, err := p.DiffConnector(ctx, "bank", "crm", "priya"); err == nil || !strings.Contains(err.Error(), "connect your account") {
		t.Fatalf("diff before priya connected: %v", err)
	}
	for _, u := range []string{"priya", "alice"} {
		authURL, err := p.ConnectAccount(ctx, "bank", u, "crm", "http://127.0.0.1:1/v1/connectors/crm/oauth/callback")
		if err != nil {
			t.Fatal(err)
		}
		if err := p.FinishConnect(ctx, "bank", u, "crm", oauthtest.Authorize(t, authURL, u)); err != nil {
			t.Fatal(err)
		}
	}
	_, live, err := p.DiffConnector(ctx, "bank", "crm", "priya")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ReviewConnector(ctx, platform.ReviewRequest{Tenant: "bank", Name: "crm", Reviewer: "priya", ExpectHash: live.Hash()}); err != nil {
		t.Fatal(err)
	}
	if err := applyNotesAgent(t, p, dir); err != nil {
		t.Fatal(err)
	}

	result := func(user string) (trace.ToolResult, string) {
		t.Helper()
		r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "crm-agent@1", Task: "Who am I at the CRM?", Tenant: "bank", User: user})
		if err != nil {
			t.Fatal(err)
		}
		got, err := p.Embedded.Execute(ctx, r.ID)
		if err != nil || got.Status != store.StatusCompleted {
			t.Fatalf("run as %s: %v %v", user, got, err)
		}
		evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
		for _, ev := range evs {
			if ev.Type == trace.EvToolResult {
				var res trace.ToolResult
				json.Unmarshal(ev.Payload, &res)
				c, _ := trace.Load(ctx, p.Store.Blobs("bank"), res.Output)
				return res, string(c)
			}
		}
		t.Fatalf("run as %s has no tool result", user)
		return trace.ToolResult{}, ""
	}
	if res, out := result("alice"); res.Status != trace.StatusOK || !strings.Contains(out, "crm says you are alice") {
		t.Errorf("alice's call: %s %s", res.Status, out)
	}
	if res, out := result("bob"); res.Status != trace.StatusDenied || !strings.Contains(out, "connect your account") || !strings.Contains(out, "connectors connect crm --tenant bank --as bob") {
		t.Errorf("bob's call: %s %s", res.Status, out)
	}
	for _, tok := range crm.Tokens() {
		if g, ok := as.Introspect(tok); !ok || g.Aud != crm.Resource {
			t.Errorf("the server was sent a token for %q", g.Aud)
		}
	}

	// No token in plaintext anywhere in the data directory (database,
	// blobs, sealed secrets).
	tokens := as.Tokens()
	if len(tokens) < 4 {
		t.Fatalf("%d tokens issued", len(tokens))
	}
	p.Close()
	err = filepath.WalkDir(data, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, tok := range tokens {
			if strings.Contains(string(b), tok) {
				t.Errorf("%s holds an OAuth token in plaintext", path)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
