package runmetrics

import (
	"encoding/json"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/trace"
)

// The narrow decodings read what the full trace types hold: a renamed
// field in trace would otherwise silently zero a metric.
func TestNarrowDecode(t *testing.T) {
	usage := model.Usage{InputTokens: 11, OutputTokens: 22, CacheReadTokens: 33, CacheCreationTokens: 44}
	mcJSON, err := json.Marshal(trace.ModelCall{Alias: "a", PromptHash: "h", CostMicros: 55, Currency: "EUR", CostKnown: true,
		Response: &model.Response{Usage: usage, Content: []model.Part{{Type: model.PartText, Text: "long text"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var mc modelCall
	if err := mc.decode(mcJSON); err != nil {
		t.Fatal(err)
	}
	if mc.Response == nil || mc.Response.Usage != usage || mc.CostMicros != 55 || mc.Currency != "EUR" || !mc.CostKnown {
		t.Fatalf("model call decoded as %+v from %s", mc, mcJSON)
	}
	failed, err := json.Marshal(trace.ModelCall{Alias: "a", Error: "refused"})
	if err != nil {
		t.Fatal(err)
	}
	mc = modelCall{}
	if err := mc.decode(failed); err != nil || mc.Response != nil {
		t.Fatalf("a call without a response decoded as %+v (%v) from %s", mc, err, failed)
	}
	if err := mc.decode([]byte(`{"response":{"usage":{"input_tokens":"many"}}}`)); err == nil {
		t.Fatal("a usage of the wrong type was decoded")
	}
	sb := &trace.SandboxInfo{Tier: 2, Lifecycle: "per_run", ProvisionMS: 77}
	trJSON, err := json.Marshal(trace.ToolResult{Index: 3, Tool: "echo", Status: trace.StatusOK, LatencyMS: 66, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	var tr toolResult
	if err := tr.decode(trJSON); err != nil {
		t.Fatal(err)
	}
	if tr.Index != 3 || tr.Tool != "echo" || tr.Status != trace.StatusOK || tr.LatencyMS != 66 || tr.Sandbox == nil || tr.Sandbox.Tier != 2 || tr.Sandbox.Lifecycle != "per_run" || tr.Sandbox.ProvisionMS != 77 {
		t.Fatalf("tool result decoded as %+v from %s", tr, trJSON)
	}
	atJSON, err := json.Marshal(trace.ToolAttempt{CallID: "c", Index: 4, Tool: "run_python", Tier: 3, Args: trace.Content{Text: `{"code":"print(1)"}`}})
	if err != nil {
		t.Fatal(err)
	}
	var at toolAttempt
	if err := at.decode(atJSON); err != nil || at.Index != 4 || at.Tier != 3 {
		t.Fatalf("tool attempt decoded as %+v (%v) from %s", at, err, atJSON)
	}
	if err := at.decode([]byte(`{"index":4,"tier":3`)); err == nil {
		t.Fatal("a truncated attempt was decoded")
	}
}
