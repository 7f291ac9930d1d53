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
	if err := json.Unmarshal(mcJSON, &mc); err != nil {
		t.Fatal(err)
	}
	if mc.Response == nil || mc.Response.Usage != usage || mc.CostMicros != 55 || mc.Currency != "EUR" || !mc.CostKnown {
		t.Fatalf("model call decoded as %+v from %s", mc, mcJSON)
	}
	sb := &trace.SandboxInfo{Tier: 2, Lifecycle: "per_run", ProvisionMS: 77}
	trJSON, err := json.Marshal(trace.ToolResult{Index: 3, Tool: "echo", Status: trace.StatusOK, LatencyMS: 66, Sandbox: sb})
	if err != nil {
		t.Fatal(err)
	}
	var tr toolResult
	if err := json.Unmarshal(trJSON, &tr); err != nil {
		t.Fatal(err)
	}
	if tr.Index != 3 || tr.Tool != "echo" || tr.Status != trace.StatusOK || tr.LatencyMS != 66 || tr.Sandbox == nil || tr.Sandbox.Tier != 2 || tr.Sandbox.Lifecycle != "per_run" || tr.Sandbox.ProvisionMS != 77 {
		t.Fatalf("tool result decoded as %+v from %s", tr, trJSON)
	}
}
