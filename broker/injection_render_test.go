package broker_test

import (
	"context"
	"errors"
	"github.com/agentplane/agentplane/runs"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
)

// scenePin has the fooled caller name an old version of the agent, as a
// ticket told it to, after the operator shipped a newer one and retired
// (or, with alias_only, the tenant requires aliases) the old.
type scenePin struct {
	// Ref is what the fooled caller asks for, e.g. "@1" or "@latest".
	Ref string `yaml:"ref"`
	// Retire retires version 1 once version 2 is the prod alias.
	Retire bool `yaml:"retire"`
	// AliasOnly makes the tenant require aliases of non-admins.
	AliasOnly bool `yaml:"alias_only"`
	// Refused is the error the pinned start must fail with: retired or
	// alias_required.
	Refused string `yaml:"refused"`
}

// pinOldVersion ships version 2 behind prod, applies the scenario's
// controls, checks that the pinned start is refused by the control the
// scenario names, and returns the reference a correct caller uses.
func pinOldVersion(t *testing.T, p *platform.Platform, def *agent.Definition, pin *scenePin, task, user string) string {
	t.Helper()
	ctx := context.Background()
	v2 := *def
	v2.Version = 2
	if _, err := p.Registry.Apply(ctx, &v2); err != nil {
		t.Fatal(err)
	}
	if err := p.Registry.SetAlias(ctx, def.Agent, agent.AliasProd, 2, 0, 0); err != nil {
		t.Fatal(err)
	}
	if pin.Retire {
		if _, err := p.Registry.Retire(ctx, def.Agent, 1); err != nil {
			t.Fatal(err)
		}
	}
	if pin.AliasOnly {
		if _, err := p.PutTenantSettings(ctx, store.TenantSettings{Tenant: tenant, RequireAlias: true}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]error{"retired": agent.ErrRetired, "alias_required": agent.ErrAliasRequired}[pin.Refused]
	if want == nil {
		t.Fatalf("pin.refused %q: want retired or alias_required", pin.Refused)
	}
	_, err := p.Runs.Start(ctx, runs.StartRequest{Agent: def.Agent + pin.Ref, Task: task, Tenant: tenant, User: user})
	if !errors.Is(err, want) {
		t.Fatalf("start on %s%s = %v, want it refused (%s)", def.Agent, pin.Ref, err, pin.Refused)
	}
	return def.Agent + "@" + agent.AliasProd
}

// checkRendered checks what showing the run's model text neutralises.
func checkRendered(t *testing.T, p *platform.Platform, run *store.Run, evs []store.Event, sc *scenario) {
	t.Helper()
	if len(sc.Expect.OutputFlags) == 0 && len(sc.Expect.RenderedAbsent) == 0 {
		return
	}
	pol, err := p.RenderPolicy(context.Background(), run.Tenant)
	if err != nil {
		t.Fatal(err)
	}
	if got := platform.OutputFlags(pol, evs).Names(); !slices.Equal(got, sc.Expect.OutputFlags) {
		t.Errorf("output flags = %v, want %v", got, sc.Expect.OutputFlags)
	}
	shown, _ := pol.Text(run.Result)
	for _, s := range sc.Expect.RenderedAbsent {
		if strings.Contains(shown, s) {
			t.Errorf("the rendered answer still holds %q: %s", s, shown)
		}
		if !strings.Contains(run.Result, s) {
			t.Errorf("the stored answer lost %q: the log must keep the model's bytes", s)
		}
	}
}
