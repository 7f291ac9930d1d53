package simmodel_test

import (
	"context"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/examples/carddispute/simmodel"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
)

// models.yaml names the simulated model as provider type carddispute-sim,
// which a program adds to the built-in types (platform.BuildOptions.Types).
func TestModelsYAMLProviderTypeSim(t *testing.T) {
	types := map[string]func() model.Provider{simmodel.ProviderType: func() model.Provider { return simmodel.New(simmodel.Options{}) }}
	cfg, err := platform.ParseModelsConfig("models.yaml", []byte(`
providers:
  sim: {type: carddispute-sim}
aliases:
  - {name: standard, provider: sim, model_id: sim-card-dispute, price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000}}
`))
	if err != nil {
		t.Fatal(err)
	}
	gw, _, err := cfg.BuildWith("models.yaml", platform.BuildOptions{Types: types})
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
	cfg, _ = platform.ParseModelsConfig("models.yaml", []byte("providers: {sim: {type: carddispute-sim, script: turns.yaml}}\naliases: []\n"))
	if _, _, err := cfg.BuildWith("models.yaml", platform.BuildOptions{Types: types}); err == nil || !strings.Contains(err.Error(), `do not apply to type "carddispute-sim"`) {
		t.Fatalf("stray field: %v", err)
	}
	// Without the type added, the configuration is refused.
	cfg, _ = platform.ParseModelsConfig("models.yaml", []byte("providers: {sim: {type: carddispute-sim}}\naliases: []\n"))
	if _, _, err := cfg.Build("models.yaml", nil, nil); err == nil || !strings.Contains(err.Error(), `unknown type "carddispute-sim"`) {
		t.Fatalf("unknown type: %v", err)
	}
}
