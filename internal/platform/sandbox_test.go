package platform_test

import (
	"context"
	"encoding/json"
	"github.com/agentplane/agentplane/runs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

const pythonAgent = `
agent: analyst
version: 1
model: {alias: m}
instructions: Analyse data with Python.
tools: [{sandbox: python-analysis}]
budgets: {max_steps: 5, max_input_tokens: 1000000, max_cost_usd: 1, max_wall_clock: 5m}
`

const pythonTurns = `
turns:
  - tool_calls:
      - name: run_python
        args:
          code: "import json\nrows = [l.split(',') for l in open('t.csv').read().split()]\nseen = {}\ndup = [r[0] for r in rows if (r[1], r[2]) in seen or seen.setdefault((r[1], r[2]), r[0]) is None]\nprint(json.dumps(dup))"
          files: {t.csv: "txn_1,AIR,12499\ntxn_2,AIR,12499\ntxn_3,CAFE,318\n"}
  - text: "txn_2 duplicates txn_1"
`

func openPython(t *testing.T, sb platform.SandboxOptions) (*platform.Platform, string) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	for n, b := range map[string]string{"agent.yaml": pythonAgent, "turns.yaml": pythonTurns, "models.yaml": `
providers: {scripted: {type: scripted, script: turns.yaml}}
aliases: [{name: m, provider: scripted, model_id: s, price: {currency: USD, input_per_mtok: 1, output_per_mtok: 1, cache_write_per_mtok: 0, cache_read_per_mtok: 0}}]
`} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := platform.Open(ctx, platform.Options{DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml"), Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	writeFiles(t, dir, map[string]string{"run_python.yaml": "example:analysis/run_python.yaml"})
	applyExample(t, p, dir, "agent.yaml", "run_python.yaml")
	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "analyst", Task: "find duplicates", Tenant: "t", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	return p, r.ID
}

func pythonResult(t *testing.T, p *platform.Platform, runID string) trace.ToolResult {
	t.Helper()
	if _, err := p.Embedded.Execute(context.Background(), runID); err != nil {
		t.Fatal(err)
	}
	evs, _ := p.Store.Events(context.Background(), runID, 0, 0)
	for _, ev := range evs {
		if ev.Type == trace.EvToolResult {
			var r trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatal("no tool result")
	return trace.ToolResult{}
}

// Without a sandbox configured, a tier-3 tool fails closed with a clear
// error the model sees; nothing runs in-process.
func TestTier3FailsClosedWithoutSandbox(t *testing.T) {
	p, id := openPython(t, platform.SandboxOptions{})
	r := pythonResult(t, p, id)
	if r.Status != trace.StatusError || !strings.Contains(r.Output.Text, "tier 3") {
		t.Fatalf("result %s %s, want an error naming tier 3", r.Status, r.Output.Text)
	}
	if run, _ := p.Store.GetRun(context.Background(), id); run.Status != store.StatusCompleted {
		t.Fatalf("run %s", run.Status)
	}
}

// Through the whole platform: the loop, the broker, the manager and gVisor.
func TestRunPythonInGVisorThroughThePlatform(t *testing.T) {
	runsc := sandboxtest.Runsc(t)
	p, id := openPython(t, platform.SandboxOptions{Guest: sandboxtest.BuildGuest(t), Runsc: runsc, StateDir: sandboxtest.StateDir(t)})
	r := pythonResult(t, p, id)
	if r.Status != trace.StatusOK || !strings.Contains(r.Output.Text, "txn_2") || strings.Contains(r.Output.Text, "txn_3") {
		t.Fatalf("result %s: %s", r.Status, r.Output.Text)
	}
	if r.Sandbox == nil {
		t.Fatal("no boundary record on the tool result")
	}
	b, _ := json.Marshal(r.Sandbox)
	t.Logf("boundary: %s", b)
	if !strings.Contains(string(b), "gvisor") {
		t.Fatalf("boundary does not name the gVisor executor: %s", b)
	}
	// The run ended, so its sandbox is gone, and the log says who ended it.
	if left := p.Sandboxes.Sessions(); len(left) > 0 {
		t.Fatalf("sandboxes still live after the run ended: %v", left)
	}
	evs, _ := p.Store.Events(context.Background(), id, 0, 0)
	var td *trace.SandboxTeardowns
	for i, ev := range evs {
		if ev.Type == trace.EvSandboxEnd {
			td = new(trace.SandboxTeardowns)
			if err := json.Unmarshal(ev.Payload, td); err != nil {
				t.Fatal(err)
			}
			if evs[i+1].Type != trace.EvRunCompleted {
				t.Fatalf("sandbox_teardown is followed by %s, want the terminal event", evs[i+1].Type)
			}
		}
	}
	if td == nil || len(td.Sandboxes) != 1 || td.Sandboxes[0].ID != r.Sandbox.ID || td.Sandboxes[0].By != "caller" || td.Sandboxes[0].Err != "" {
		t.Fatalf("teardown record %+v, want sandbox %s destroyed by caller", td, r.Sandbox.ID)
	}
	// Re-running the code over the log needs no sandbox.
	if _, err := p.Engine.Verify(context.Background(), id); err != nil {
		t.Fatalf("verify: %v", err)
	}
}
