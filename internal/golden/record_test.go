package golden_test

// The recorder of the golden logs. It runs only when asked:
//
//	go test ./internal/golden -run TestRecordGolden -record-golden=v2
//
// and writes a NEW set under testdata/v2; it refuses to write into a set
// that exists. The normal test never records: the sets in testdata are the
// audit records of an older agentplane, frozen (docs/design/golden-logs.md).

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"github.com/agentplane/agentplane/runs"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/cli"
	"github.com/agentplane/agentplane/internal/golden"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/scripted"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

var recordGolden = flag.String("record-golden", "", "record the golden runs as a new set testdata/SET (never an existing one)")

// recordBase is the fixed clock's first reading; every reading after it is
// 100 ms later, so a re-recording by the same code gives the same times.
var recordBase = time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)

// stepClock is a deterministic clock: each reading advances it by 100 ms.
type stepClock struct{ n atomic.Int64 }

func (c *stepClock) Now() time.Time {
	return recordBase.Add(time.Duration(c.n.Add(1)) * 100 * time.Millisecond)
}

type recorder struct {
	t     *testing.T
	ctx   context.Context
	p     *platform.Platform
	clock *stepClock
}

type recordOptions struct {
	// script replaces the example's turns.yaml; repeat plays its last turn
	// for ever.
	script string
	repeat bool
	// gateway replaces the models file's gateway.
	gateway loop.Models
	// agentV2 edits agent.yaml into version 2 (applied after version 1).
	agentV2 func(string) string
	// history adds this many synthetic transactions to the customer's
	// card (bank generate, seed 2026): a year large enough to go to the
	// blob store and reach the model as a handle.
	history int
}

// newRecorder opens a platform on a fresh data directory with the
// card-dispute example applied the way `agentplane demo` applies it.
func newRecorder(t *testing.T, o recordOptions) *recorder {
	t.Helper()
	ctx := context.Background()
	read := func(name string) []byte {
		b, err := carddispute.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	models := string(read(carddispute.ModelsFile))
	if o.repeat {
		models = strings.Replace(models, "{type: scripted, script: turns.yaml}", "{type: scripted, script: turns.yaml, repeat: true}", 1)
	}
	cfg, err := platform.ParseModelsConfig(carddispute.ModelsFile, []byte(models))
	if err != nil {
		t.Fatal(err)
	}
	turns := read(carddispute.TurnsFile)
	if o.script != "" {
		turns = []byte(o.script)
	}
	script, err := scripted.Parse(carddispute.TurnsFile, turns)
	if err != nil {
		t.Fatal(err)
	}
	clock := &stepClock{}
	// The gateway is built here so that it reads the fixed clock too (its
	// latencies are recorded); no API key is looked up.
	gw, rates := o.gateway, (*model.Rates)(nil)
	if gw == nil {
		g, r, err := cfg.BuildWith(carddispute.ModelsFile, platform.BuildOptions{Script: script, Now: clock.Now,
			Getenv:   func(string) string { return "" },
			ReadFile: func(name string) ([]byte, error) { return carddispute.ReadFile(filepath.Base(name)) }})
		if err != nil {
			t.Fatal(err)
		}
		gw, rates = g, r
	}
	dataDir := t.TempDir()
	b, err := bank.Open(filepath.Join(dataDir, "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := platform.Open(ctx, platform.Options{DataDir: dataDir, Gateway: gw, Rates: rates, Clock: clock.Now, LeaseTTL: time.Hour,
		Tools: []catalog.Registrar{b}, WrapStore: func(s store.Store) store.Store { return createdAt{s, clock.Now} }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ms, err := tool.ParseManifests(carddispute.ToolsFile, read(carddispute.ToolsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Provision(ctx, cli.DemoTenant, map[string][]string{
		cli.DemoUser: {"card-ops-agents"}, cli.DemoSupervisor: {"card-ops-supervisors", "card-ops-agents"}}, ms); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyManifests(ctx, ms); err != nil {
		t.Fatal(err)
	}
	def := string(read(carddispute.AgentFile))
	versions := []string{def}
	if o.agentV2 != nil {
		v2 := o.agentV2(strings.Replace(def, "\nversion: 1\n", "\nversion: 2\n", 1))
		versions = append(versions, v2)
	}
	for i, src := range versions {
		d, err := agent.ParseDefinition(fmt.Sprintf("agent-v%d.yaml", i+1), []byte(src), nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Registry.Apply(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Registry.SetAlias(ctx, "card-dispute-assistant", "prod", 1, 0, 0); err != nil {
		t.Fatal(err)
	}
	if o.history > 0 {
		if err := b.GenerateTransactions(ctx, bank.CustomerID, o.history, 2026); err != nil {
			t.Fatal(err)
		}
	}
	return &recorder{t: t, ctx: ctx, p: p, clock: clock}
}

// start queues a run as runs.Service.Start does, under a fixed id; the
// store it goes through (createdAt) stamps it with the fixed clock, where
// the store would take its wall clock, which would make every event time
// of a recording differ.
func (r *recorder) start(id, agentRef string) {
	r.t.Helper()
	d, version, err := r.p.Registry.Resolve(r.ctx, agentRef, id, agent.ResolveOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.p.Engine.Start(r.ctx, engine.StartRequest{RunID: id, Tenant: cli.DemoTenant, User: cli.DemoUser, Agent: d.Agent,
		AgentVersion: version, AgentHash: d.Hash(), Task: cli.DemoTask, Mode: "stream", Currency: d.Budgets.Currency,
		Bindings: map[string]string{"customer_id": bank.CustomerID}}); err != nil {
		r.t.Fatal(err)
	}
}

// replay queues a replay as runs.Service.Replay does (linked to its
// original, on the original's version), created at the fixed clock's time.
func (r *recorder) replay(id string, info trace.ReplayInfo) {
	r.t.Helper()
	orig, err := r.p.Store.GetRun(r.ctx, info.Of)
	if err != nil {
		r.t.Fatal(err)
	}
	d, err := r.p.Registry.Get(r.ctx, orig.Agent, orig.AgentVersion)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.p.Engine.Start(r.ctx, engine.StartRequest{RunID: id, Tenant: orig.Tenant, User: orig.User, Agent: orig.Agent,
		AgentVersion: orig.AgentVersion, AgentHash: d.Hash(), Task: orig.Task, Mode: orig.Mode, Currency: orig.Currency,
		Bindings: orig.Bindings, Replay: &engine.Replay{Info: info}}); err != nil {
		r.t.Fatal(err)
	}
}

// createdAt stamps every run it creates with the recording's fixed clock.
type createdAt struct {
	store.Store
	now func() time.Time
}

func (c createdAt) CreateRun(ctx context.Context, r *store.Run) error {
	r.CreatedAt = c.now()
	return c.Store.CreateRun(ctx, r)
}

// decision answers one pending approval.
type decision func(a runs.PendingApproval) runs.DecideRequest

func approve(a runs.PendingApproval) runs.DecideRequest {
	return runs.DecideRequest{ApprovalID: a.Request.ApprovalID, Tenant: cli.DemoTenant, Decider: cli.DemoSupervisor,
		Decision: "approve", Comment: "duplicate charge confirmed against the statement"}
}

// execute drives a run to its end, answering its approvals with decide
// (as `agentplane demo` does as the supervisor).
func (r *recorder) execute(id string, decide decision) *store.Run {
	r.t.Helper()
	for i := 0; ; i++ {
		run, err := r.p.Embedded.Execute(r.ctx, id)
		if err != nil {
			r.t.Fatalf("execute %s: %v", id, err)
		}
		if run.Status != store.StatusWaiting {
			return run
		}
		if i > 10 {
			r.t.Fatalf("run %s keeps waiting", id)
		}
		pend, err := r.p.Runs.PendingApprovals(r.ctx, cli.DemoTenant)
		if err != nil || len(pend) == 0 {
			r.t.Fatalf("run %s waits, but not for an approval (%v)", id, err)
		}
		for _, a := range pend {
			if err := r.p.Runs.Decide(r.ctx, decide(a)); err != nil {
				r.t.Fatal(err)
			}
		}
	}
}

// stepModel plays the example's turns by step rather than by the number of
// assistant messages (compaction shortens the transcript the scripted
// provider counts), and answers the small alias with a progress note.
type stepModel struct{ turns *scripted.Script }

func (m stepModel) Complete(_ context.Context, alias string, req *model.Request, a model.Attribution) (*model.CallResult, error) {
	var content []model.Part
	turn := a.Step - 1
	switch {
	case alias == "reasoning-small":
		content = []model.Part{{Type: model.PartText, Text: "Progress so far: read ticket T-40127 of customer c_88213 (it carries an instruction aimed at an AI agent, not followed); txn_1001 and txn_1002 are identical Rs 12,499 Skyline Airways charges on 2026-10-03."}}
	case req.ForbidToolCalls || turn >= len(m.turns.Turns):
		content = []model.Part{{Type: model.PartText, Text: m.turns.Final}}
	default:
		t := m.turns.Turns[turn]
		if t.Text != "" {
			content = append(content, model.Part{Type: model.PartText, Text: t.Text})
		}
		for i, c := range t.ToolCalls {
			content = append(content, model.Part{Type: model.PartToolUse, ToolUseID: fmt.Sprintf("toolu_%02d_%d", turn, i), Name: c.Name, Input: c.Args})
		}
	}
	stop := model.StopEndTurn
	for _, p := range content {
		if p.Type == model.PartToolUse {
			stop = model.StopToolUse
		}
	}
	usage := model.Usage{InputTokens: model.EstimateTokens(req), OutputTokens: model.EstimateContentTokens(content)}
	resp := &model.Response{Model: "scripted-by-step", Content: content, StopReason: stop, Usage: usage}
	// Priced in the budget's currency: 176 and 880 micro-rupees a token.
	cost := model.Money{Micros: usage.InputTokens*176 + usage.OutputTokens*880, Currency: "INR"}
	return &model.CallResult{Response: resp, Usage: usage, Cost: cost, CostKnown: true, Alias: alias, ModelID: "scripted-by-step"}, nil
}

// loopScript reads the ticket, then asks for the same year of
// transactions for ever: the same tool, arguments and (large) result each
// time.
const loopScript = `
final: "unused"
turns:
  - text: "I'll read the ticket."
    tool_calls: [{name: get_ticket, args: {ticket_id: T-40127}}]
  - text: "Let me look at the year's transactions again."
    tool_calls: [{name: get_card_transactions, args: {customer_id: c_88213, from: "2025-11-01", to: "2026-10-31", limit: 300}}]
`

// scenario is one golden fixture: how to record it.
type scenario struct {
	name, description string
	opts              recordOptions
	record            func(r *recorder) []string // the run ids to freeze
}

var scenarios = []scenario{
	{
		name:        "approvals",
		description: "The card-dispute demo run: both approvals (the refund above 10,000 INR, the e-mail out of a tainted run) approved by the supervisor; completed.",
		record: func(r *recorder) []string {
			r.start("run_golden_approvals", "card-dispute-assistant@prod")
			r.execute("run_golden_approvals", approve)
			return []string{"run_golden_approvals"}
		},
	},
	{
		name:        "edited",
		description: "The card-dispute run with the refund approval edited by the supervisor (new reason; the broker re-checks the edited call) and the e-mail approved; completed.",
		record: func(r *recorder) []string {
			r.start("run_golden_edited", "card-dispute-assistant@prod")
			r.execute("run_golden_edited", func(a runs.PendingApproval) runs.DecideRequest {
				if a.Request.Tool != bank.ToolIssueRefund {
					return approve(a)
				}
				return runs.DecideRequest{ApprovalID: a.Request.ApprovalID, Tenant: cli.DemoTenant, Decider: cli.DemoSupervisor,
					Decision: "edit", Comment: "reason reworded for the statement",
					Args: json.RawMessage(`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":12499,"reason":"Supervisor-edited: duplicate of txn_1001, PNR K7QX2M"}`)}
			})
			return []string{"run_golden_edited"}
		},
	},
	{
		name:        "replay",
		description: "A live replay from step 4 of a completed card-dispute run (the original is included): steps 1-3 served from the original's log, the model asked again from step 4, side-effecting calls answered from the recording.",
		record: func(r *recorder) []string {
			r.start("run_golden_original", "card-dispute-assistant@prod")
			r.execute("run_golden_original", approve)
			r.replay("run_golden_replay", trace.ReplayInfo{Of: "run_golden_original", FromStep: 4, Mode: trace.ReplayLive})
			r.execute("run_golden_replay", approve)
			return []string{"run_golden_replay"}
		},
	},
	{
		name:        "compacted",
		description: "The card-dispute run on agent version 2, which compacts older steps into a progress note every 3 steps keeping 2 (model answering by step); both approvals approved; completed.",
		opts: recordOptions{
			agentV2: func(def string) string {
				return def + "context: {compact_every_steps: 3, keep_recent_steps: 2}\n"
			},
		},
		record: func(r *recorder) []string {
			r.start("run_golden_compacted", "card-dispute-assistant@2")
			r.execute("run_golden_compacted", approve)
			return []string{"run_golden_compacted"}
		},
	},
	{
		name:        "budget",
		description: "The card-dispute run on agent version 2, whose step budget is 3: the bound stops it before step 4, the model gets one last call without tools; completed_partial.",
		opts: recordOptions{
			agentV2: func(def string) string {
				return strings.Replace(def, "budgets: { max_steps: 40,", "budgets: { max_steps: 3,", 1)
			},
		},
		record: func(r *recorder) []string {
			r.start("run_golden_budget", "card-dispute-assistant@2")
			r.execute("run_golden_budget", approve)
			return []string{"run_golden_budget"}
		},
	},
	{
		name:        "loopdetect",
		description: "A card-dispute run whose model asks for the same year of transactions (300, too large for the context: a blob the model sees as a handle) again and again: a note at the third identical call, stopped at the fifth; failed.",
		opts:        recordOptions{script: loopScript, repeat: true, history: 300},
		record: func(r *recorder) []string {
			r.start("run_golden_loop", "card-dispute-assistant@prod")
			r.execute("run_golden_loop", approve)
			return []string{"run_golden_loop"}
		},
	},
}

func TestRecordGolden(t *testing.T) {
	if *recordGolden == "" {
		t.Skip("records a new golden set only with -record-golden=SET")
	}
	set := filepath.Join("testdata", *recordGolden)
	commit := "unknown"
	if out, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		commit = strings.TrimSpace(string(out))
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			o := sc.opts
			if sc.name == "compacted" {
				s, err := scripted.Parse(carddispute.TurnsFile, mustRead(t, carddispute.TurnsFile))
				if err != nil {
					t.Fatal(err)
				}
				o.gateway = stepModel{turns: s}
			}
			r := newRecorder(t, o)
			ids := sc.record(r)
			fx, err := golden.Export(r.ctx, r.p.Store, sc.name, sc.description, commit, ids...)
			if err != nil {
				t.Fatal(err)
			}
			// The fixture must stand on its own: import it elsewhere and
			// verify it before it is written.
			st, err := sqlite.Open(r.ctx, sqlite.Options{Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			if err := golden.Import(r.ctx, st, fx); err != nil {
				t.Fatal(err)
			}
			for _, run := range fx.Runs {
				rep, err := trace.Verify(r.ctx, st, run.Row.ID)
				if err != nil || !rep.OK() {
					t.Fatalf("recorded run %s does not verify: %+v %v", run.Row.ID, rep, err)
				}
			}
			if err := golden.Write(filepath.Join(set, sc.name), fx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := carddispute.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
