package simmodel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
)

// models.yaml names the simulated model as provider type sim.
func TestModelsYAMLProviderTypeSim(t *testing.T) {
	cfg, err := platform.ParseModelsConfig("models.yaml", []byte(`
providers:
  sim: {type: sim}
aliases:
  - {name: standard, provider: sim, model_id: sim-card-dispute, price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000}}
`))
	if err != nil {
		t.Fatal(err)
	}
	gw, _, err := cfg.Build("models.yaml", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := gw.Complete(context.Background(), "standard", &model.Request{
		Messages: []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: "Ticket T-40127: please look."}}}},
		Tools:    []model.ToolDef{{Name: "get_ticket", InputSchema: []byte(`{"type":"object"}`)}},
	}, model.Attribution{Tenant: "t", User: "u", Agent: "a", RunID: "r", Step: 1})
	if err != nil {
		t.Fatal(err)
	}
	calls := res.Response.ToolCalls()
	if len(calls) != 1 || calls[0].Name != "get_ticket" || string(calls[0].Input) != `{"ticket_id":"T-40127"}` || res.ModelID != "sim-card-dispute" || !res.CostKnown || res.Cost.Micros <= 0 {
		t.Fatalf("answer %+v, calls %+v", res, calls)
	}
	// Fields of other provider types are refused.
	cfg, _ = platform.ParseModelsConfig("models.yaml", []byte("providers: {sim: {type: sim, script: turns.yaml}}\naliases: []\n"))
	if _, _, err := cfg.Build("models.yaml", nil, nil); err == nil || !strings.Contains(err.Error(), `do not apply to type "sim"`) {
		t.Fatalf("stray field: %v", err)
	}
}
