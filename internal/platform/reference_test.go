package platform_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcphost/referencetest"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

const referenceTurns = `
turns:
  - text: "echoing"
    tool_calls: [{name: echo, args: {message: "hello from agentplane"}}]
  - text: "adding"
    tool_calls: [{name: get_sum, args: {a: 20, b: 22}}]
  - text: "done"
`

const referenceAgent = `
agent: reference-agent
version: 1
description: Calls the MCP reference server.
model: {alias: reasoning-standard}
instructions: Echo, then add.
tools:
  - connector: everything
    allow: [echo, get_sum]
budgets: {max_steps: 10, max_input_tokens: 100000, max_cost_usd: 1, max_wall_clock: 10m}
`

// TestReferenceServerThroughTheBroker connects the official reference
// server-everything (from npm, over Streamable HTTP forced onto loopback)
// as a tenant's connector, reviews its listing with an overlay for every
// tool, and runs a scripted agent that calls its echo and get-sum through
// the broker: the calls are recorded with their idempotency keys, the
// trace rebuilds every prompt byte for byte, and a live replay runs the
// read-only echo again while get-sum, reviewed as having external side
// effects, is answered from the recording.
func TestReferenceServerThroughTheBroker(t *testing.T) {
	url := referencetest.EverythingHTTP(t)
	ctx := context.Background()
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"models.yaml": notesModels, "turns.yaml": referenceTurns, "agent.yaml": referenceAgent})
	p, err := platform.Open(ctx, platform.Options{DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml"),
		MCP: platform.MCPOptions{AllowLoopback: true}}) // test-only: the server is on loopback
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	hp := strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/mcp")
	spec := fmt.Sprintf("name: everything\ntransport: http\nendpoint: %s\nallow: [%q]\n", url, hp)
	overlay := func(tool, name, effects string) string {
		return fmt.Sprintf("---\ntool: %s\nname: %s\nrisk: low\ntier: 2\ntimeout_ms: 20000\nside_effects: %s\n", tool, name, effects)
	}
	if _, err := p.AddConnector(ctx, "bank", []byte(spec), []byte(overlay("echo", "echo", "none"))); err != nil {
		t.Fatal(err)
	}
	// The reviewer reads the listing and writes an overlay for every tool
	// (a tool without one is refused at review): get-sum is marked as
	// having external side effects so that the replay below must not call
	// it again.
	_, live, err := p.DiffConnector(ctx, "bank", "everything", "priya")
	if err != nil {
		t.Fatal(err)
	}
	var ov strings.Builder
	seen := map[string]bool{}
	for _, d := range live.Tools {
		seen[d.Name] = true
		name, effects := strings.ReplaceAll(d.Name, "-", "_"), "none"
		if d.Name == "get-sum" {
			effects = "external"
		}
		ov.WriteString(overlay(d.Name, name, effects))
	}
	if !seen["echo"] || !seen["get-sum"] {
		t.Fatalf("server-everything lists no echo or get-sum: %v", seen)
	}
	if _, err := p.ReviewConnector(ctx, platform.ReviewRequest{Tenant: "bank", Name: "everything", Reviewer: "priya",
		Overlays: []byte(ov.String()), ExpectHash: live.Hash()}); err != nil {
		t.Fatal(err)
	}
	if err := applyNotesAgent(t, p, dir); err != nil {
		t.Fatal(err)
	}

	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "reference-agent@1", Task: "Echo, then add 20 and 22.", Tenant: "bank", User: "priya"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.Embedded.Execute(ctx, r.ID)
	if err != nil || got.Status != store.StatusCompleted {
		t.Fatalf("run %s: %v %v", r.ID, got, err)
	}
	results := toolResults(t, p, r.ID)
	if len(results) != 2 || results[0].key != r.ID+":1:0" || !strings.Contains(results[0].output, "hello from agentplane") ||
		results[1].key != r.ID+":2:0" || !strings.Contains(results[1].output, "42") || results[0].status != trace.StatusOK || results[1].status != trace.StatusOK {
		t.Fatalf("recorded calls = %+v", results)
	}
	rr := verifyAndReplay(t, p, r.ID, 3)
	replayed := toolResults(t, p, rr)
	if len(replayed) != 2 || replayed[0].replayed != "live" && replayed[0].replayed != "" ||
		!strings.Contains(replayed[0].output, "hello from agentplane") {
		t.Fatalf("the read-only echo in the live replay: %+v", replayed)
	}
	if replayed[1].replayed != trace.ReplayedRecorded || replayed[1].output != results[1].output {
		t.Fatalf("get-sum (external side effects) in the live replay: %+v, want it answered from the recording", replayed[1])
	}
	if rep, err := trace.Verify(ctx, trace.SourceFor(p.Store, "bank"), rr); err != nil || !rep.OK() {
		t.Fatalf("trace verify of the replay: %+v %v", rep, err)
	}
}

// verifyAndReplay checks that trace verify rebuilds the run's prompts
// (prompts of them), then replays it live from step 1 to completion and
// returns the replay's id.
func verifyAndReplay(t *testing.T, p *platform.Platform, runID string, prompts int) string {
	t.Helper()
	ctx := context.Background()
	rep, err := trace.Verify(ctx, trace.SourceFor(p.Store, "bank"), runID)
	if err != nil || !rep.OK() || rep.Prompts != prompts {
		t.Fatalf("trace verify: %+v %v", rep, err)
	}
	rr, err := p.Runs.Replay(ctx, runs.ReplayRequest{Of: runID, FromStep: 1, Mode: trace.ReplayLive})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := p.Embedded.Execute(ctx, rr.ID); err != nil || got.Status != store.StatusCompleted {
		t.Fatalf("replay: %v %v", got, err)
	}
	return rr.ID
}

type recordedCall struct {
	key, status, output, replayed string
}

// toolResults lists a run's tool calls as recorded: the attempt's key, the
// result's status, output and replay source.
func toolResults(t *testing.T, p *platform.Platform, runID string) []recordedCall {
	t.Helper()
	ctx := context.Background()
	evs, err := p.Store.Events(ctx, runID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []recordedCall
	keys := map[[2]int]string{}
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			if err := json.Unmarshal(ev.Payload, &a); err != nil {
				t.Fatal(err)
			}
			keys[[2]int{ev.Step, a.Index}] = a.IdempotencyKey
		case trace.EvToolResult:
			var res trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &res); err != nil {
				t.Fatal(err)
			}
			c, err := trace.Load(ctx, p.Store.Blobs("bank"), res.Output)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, recordedCall{key: keys[[2]int{ev.Step, res.Index}], status: res.Status, output: string(c), replayed: res.Replayed})
		}
	}
	return out
}
