package platform_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/agentplane/agentplane/runs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// A run bound to the ticket's customer cannot touch another customer, even
// though its user may; the binding is recorded in run_started and survives
// into replays' decisions; a binding that contradicts the user's own is
// refused at start.
func TestRunBindings(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	turns := `
turns:
  - tool_calls:
      - {name: get_customer_profile, args: {customer_id: c_90001}}
      - {name: get_customer_profile, args: {customer_id: c_88213}}
  - text: done
`
	writeFiles(t, dir, map[string]string{"turns.yaml": turns,
		"tools.yaml": "example:tools.yaml", "agent.yaml": "example:agent.yaml", "models.yaml": "example:models.yaml"})
	p, err := platform.Open(ctx, platform.Options{Tools: []catalog.Registrar{openBank(t, filepath.Join(dir, "data"))}, DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	const tenant, staff, agentUser = "example-bank", "priya@example-bank.in", "asha-desk@example-bank.in"
	provisionCardDispute(t, p, tenant, map[string][]string{staff: {"card-ops-agents"}})
	d := applyExample(t, p, dir, "agent.yaml", "tools.yaml")
	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: d.Agent, Task: "look up the ticket's customer", Tenant: tenant, User: staff,
		Bindings: map[string]string{"customer_id": "c_88213"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Embedded.Execute(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
	var started trace.RunStarted
	var results []trace.ToolResult
	var attempts []trace.ToolAttempt
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvRunStarted:
			_ = json.Unmarshal(ev.Payload, &started)
		case trace.EvToolResult:
			var res trace.ToolResult
			_ = json.Unmarshal(ev.Payload, &res)
			results = append(results, res)
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			_ = json.Unmarshal(ev.Payload, &a)
			attempts = append(attempts, a)
		}
	}
	if started.Bindings["customer_id"] != "c_88213" {
		t.Fatalf("run_started bindings %v", started.Bindings)
	}
	if len(attempts) != 2 || attempts[0].Decision.Allowed || attempts[0].Decision.Control != "authz" ||
		!strings.Contains(attempts[0].Decision.Reason, "this run may only act on customer_id c_88213") {
		t.Fatalf("the other customer's lookup: %+v", attempts)
	}
	if !attempts[1].Decision.Allowed || results[1].Status != trace.StatusOK || !strings.Contains(results[1].Output.Text, "Asha") {
		t.Fatalf("the bound customer's lookup: %+v %s %s", attempts[1].Decision, results[1].Status, results[1].Output.Text)
	}
	if run, _ := p.Store.GetRun(ctx, r.ID); run.Status != store.StatusCompleted || run.Bindings["customer_id"] != "c_88213" {
		t.Fatalf("run %s %v", run.Status, run.Bindings)
	}

	// A user bound to one customer cannot start a run bound to another.
	if err := authz.Put(ctx, p.Store, mustPrincipal(t, tenant, agentUser, "c_90001")); err != nil {
		t.Fatal(err)
	}
	_, err = p.Runs.Start(ctx, runs.StartRequest{Agent: d.Agent, Task: "x", Tenant: tenant, User: agentUser,
		Bindings: map[string]string{"customer_id": "c_88213"}})
	if !errors.Is(err, runs.ErrBadBindings) || !strings.Contains(err.Error(), `may only act on customer_id "c_90001"`) {
		t.Fatalf("contradicting binding: %v", err)
	}
	for _, bad := range []map[string]string{{"customer id": "x"}, {"customer_id": ""}, {"customer_id": "a\nb"}} {
		if _, err := p.Runs.Start(ctx, runs.StartRequest{Agent: d.Agent, Task: "x", Tenant: tenant, User: staff, Bindings: bad}); !errors.Is(err, runs.ErrBadBindings) {
			t.Errorf("binding %q: %v, want refused", bad, err)
		}
	}
}

func mustPrincipal(t *testing.T, tenant, user, customer string) *authz.Principal {
	t.Helper()
	pr, err := authz.New(tenant, user, []string{"customers:read"}, nil, map[string]string{"customer_id": customer})
	if err != nil {
		t.Fatal(err)
	}
	return pr
}
