package eval_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/eval"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/simmodel"
	cdworld "github.com/agentplane/agentplane/examples/carddispute/world"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/tool"
)

const evalsDir = "../examples/carddispute/evals"

// kit is what the tests share: the card-dispute set, its tools and models.
type kit struct {
	set   *eval.Set
	tools *tool.Set
	gw    *model.Gateway
	rates *model.Rates
}

var (
	kitOnce sync.Once
	theKit  kit
	kitErr  error
)

func loadKit(t testing.TB) *kit {
	t.Helper()
	kitOnce.Do(func() {
		theKit.set, kitErr = eval.LoadSet(filepath.Join(evalsDir, "card-dispute.yaml"), cdworld.World{})
		if kitErr != nil {
			return
		}
		data, err := os.ReadFile(theKit.set.Models)
		if err != nil {
			kitErr = err
			return
		}
		cfg, err := platform.ParseModelsConfig(theKit.set.Models, data)
		if err != nil {
			kitErr = err
			return
		}
		theKit.gw, theKit.rates, kitErr = cfg.BuildWith(theKit.set.Models, platform.BuildOptions{Types: map[string]func() model.Provider{
			simmodel.ProviderType: func() model.Provider { return simmodel.New(simmodel.Options{}) }}})
		if kitErr != nil {
			return
		}
		b, err := carddispute.ReadFile(carddispute.ToolsFile)
		if err != nil {
			kitErr = err
			return
		}
		ms, err := tool.ParseManifests("tools.yaml", b)
		if err != nil {
			kitErr = err
			return
		}
		theKit.tools, kitErr = tool.NewSet(ms...)
	})
	if kitErr != nil {
		t.Fatal(kitErr)
	}
	return &theKit
}

func loadAgent(t testing.TB, file string) *agent.Definition {
	t.Helper()
	d, err := agent.LoadDefinitionFile(filepath.Join(evalsDir, "agents", file))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (k *kit) run(t testing.TB, d *agent.Definition, set *eval.Set) *eval.Report {
	t.Helper()
	if set == nil {
		set = k.set
	}
	rep, err := eval.Run(context.Background(), eval.Options{Set: set, Agent: d, Tools: k.tools, Gateway: k.gw, Rates: k.rates,
		Parallel: 4, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// failures renders a report's failed tasks for a test log.
func failures(rep *eval.Report) string {
	var b strings.Builder
	for _, r := range rep.Results {
		if r.Passed() {
			continue
		}
		b.WriteString(r.Task.ID + ":")
		if r.Err != nil {
			b.WriteString(" error: " + r.Err.Error())
		}
		for _, f := range r.Failures {
			b.WriteString("\n    " + f)
		}
		b.WriteString("\n")
	}
	return b.String()
}
