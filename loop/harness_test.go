package loop_test

import (
	"context"
	"github.com/agentplane/agentplane/runs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
)

// fixture is a platform on a temp data directory with test tools.
type fixture struct {
	t   *testing.T
	p   *platform.Platform
	dir string
}

const testModels = `
providers:
  scripted: {type: scripted, repeat: true}
aliases:
  - {name: test-model, provider: scripted, model_id: scripted-test, price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000, cache_write_per_mtok: 2500000, cache_read_per_mtok: 200000}}
  - {name: unpriced, provider: scripted, model_id: scripted-unpriced}
rates: {USD_INR: 88}
`

const testTools = `
name: echo
description: Returns its arguments.
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  additionalProperties: false
  required: [text]
  properties:
    text: {type: string, maxLength: 100000}
side_effects: none
untrusted_output: false
---
name: big
description: Returns a large document.
tier: 1
timeout_ms: 1000
input_schema: {type: object, properties: {size: {type: integer}}}
side_effects: none
---
name: read_handle
description: Reads a handle the run has seen.
tier: 1
timeout_ms: 1000
input_schema: {type: object, properties: {handle: {type: string}}}
side_effects: none
---
name: slow
description: Sleeps.
tier: 1
timeout_ms: 50
input_schema: {type: object}
side_effects: none
---
name: forbidden
description: A tool this agent is not granted.
tier: 1
timeout_ms: 1000
input_schema: {type: object}
side_effects: external
---
name: pay
description: Pays an amount; above 100 it needs a payer's approval.
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  additionalProperties: false
  required: [amount]
  properties: {amount: {type: number}}
approval: required_above
approval_threshold: {amount: 100}
approval_group: payers
side_effects: external
untrusted_output: false
---
name: mutate_echo
description: Echoes, declared as changing the world (its attempt is durable).
tier: 1
timeout_ms: 1000
input_schema: {type: object, properties: {text: {type: string}}}
side_effects: external
---
name: mutate
description: Changes the world (counts calls).
tier: 1
timeout_ms: 1000
input_schema: {type: object}
side_effects: external
`

func agentYAML(budgets string) string {
	if budgets == "" {
		budgets = "{max_steps: 20, max_input_tokens: 1000000, max_cost_usd: 10, max_wall_clock: 1h}"
	}
	return `
agent: tester
version: 1
model: {alias: test-model}
instructions: You are a test agent.
tools:
  - tool: echo
  - tool: big
  - tool: read_handle
  - tool: slow
  - tool: mutate
  - tool: mutate_echo
  - tool: pay
budgets: ` + budgets + "\n"
}

type fixtureOptions struct {
	budgets string
	script  string
	wrap    func(store.Store) store.Store
	clock   func() time.Time
	alias   string
	models  loop.Models
	dir     string
	// store is the run store: "" the data directory's SQLite, or a
	// postgres:// URL.
	store string
	// agentExtra is appended to the agent definition; small sets model.small.
	agentExtra string
	small      string
	// engine is platform.Options.Engine: "" the embedded engine, or a
	// temporal:// URL.
	engine string
}

func newFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	ctx := context.Background()
	dir := o.dir
	if dir == "" {
		dir = t.TempDir()
	}
	if o.script == "" {
		o.script = "turns: [{text: unused}]"
	}
	cfg, err := platform.ParseModelsConfig("models.yaml", []byte(testModels))
	if err != nil {
		t.Fatal(err)
	}
	s, err := scripted.Parse("turns.yaml", []byte(o.script))
	if err != nil {
		t.Fatal(err)
	}
	po := platform.Options{DataDir: dir, Store: o.store, Models: cfg, Script: s, WrapStore: o.wrap, Clock: o.clock, LeaseTTL: 5 * time.Second, Engine: o.engine,
		Directory: platform.StaticDirectory{"t1": {"bob": {"payers"}, "alice": {"payers"}, "carol": {"viewers"},
			"dave": {"auditors"}, "erin": {"payers", "auditors"}}}}
	if o.models != nil {
		po.Gateway = o.models
	}
	p, err := platform.Open(ctx, po)
	if err != nil {
		t.Fatal(err)
	}
	if o.dir == "" {
		t.Cleanup(func() { p.Close() })
	}
	for name, fn := range testFuncs {
		if err := p.Catalog.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	ms, err := tool.ParseManifests("tools.yaml", []byte(testTools))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyManifests(ctx, ms); err != nil {
		t.Fatal(err)
	}
	def := agentYAML(o.budgets) + o.agentExtra
	if o.small != "" {
		def = replaceOnce(def, "model: {alias: test-model}", "model: {alias: test-model, small: "+o.small+"}")
	}
	if o.alias != "" {
		def = replaceOnce(def, "alias: test-model", "alias: "+o.alias)
	}
	path := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(path, []byte(def), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := agent.LoadDefinitionFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Registry.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, p: p, dir: dir}
}

func replaceOnce(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	return s
}

// runB is run for benchmarks.
func (f *fixture) runB(b *testing.B, task string) (*store.Run, []store.Event) {
	b.Helper()
	ctx := context.Background()
	r, err := f.p.Runs.Start(ctx, runs.StartRequest{Agent: "tester@1", Task: task, Tenant: "t1", User: "alice"})
	if err != nil {
		b.Fatal(err)
	}
	got, err := f.p.Embedded.Execute(ctx, r.ID)
	if err != nil {
		b.Fatal(err)
	}
	evs, err := f.p.Store.Events(ctx, r.ID, 0, 0)
	if err != nil {
		b.Fatal(err)
	}
	return got, evs
}

// run starts and executes one run to its end.
func (f *fixture) run(task string) (*store.Run, []store.Event) {
	f.t.Helper()
	ctx := context.Background()
	r, err := f.p.Runs.Start(ctx, runs.StartRequest{Agent: "tester@1", Task: task, Tenant: "t1", User: "alice"})
	if err != nil {
		f.t.Fatal(err)
	}
	got, err := f.p.Embedded.Execute(ctx, r.ID)
	if err != nil {
		f.t.Fatalf("execute: %v", err)
	}
	evs, err := f.p.Store.Events(ctx, r.ID, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return got, evs
}

type modelRequest = model.Request

func startReq() runs.StartRequest {
	return runs.StartRequest{Agent: "tester@1", Task: "t", Tenant: "t1", User: "alice"}
}
