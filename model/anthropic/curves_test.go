package anthropic_test

// The input-token and cost curves of seed 004's 25-step run, measured
// through the gateway's own accounting (model.Ledger) while the real
// Anthropic provider talks to the simulated Messages API, which charges
// cache writes and reads by the breakpoints the provider actually sent.
//
//	go test ./model/anthropic -run '^TestCostCurves$' -args -curves.out=FILE
//
// writes the markdown tables that scripts/bench-models.sh puts into
// docs/PERFORMANCE.md.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/model/anthropic"
	"github.com/agentplane/agentplane/model/anthropic/anthropictest"
)

var curvesOut = flag.String("curves.out", "", "write the cost-curve tables (markdown) to this file")

// Seed 004's shape: a fixed prefix P of 6,000 tokens (instructions, 20 tool
// definitions, the task) and Δ = 1,500 tokens a step (300 of model output,
// 1,200 of tool result), 25 steps.
const (
	steps        = 25
	toolCount    = 20
	toolTokens   = 200  // each definition
	systemTokens = 1800 // instructions
	taskTokens   = 200
	outTokens    = 300
	resultTokens = 1200
	noteTokens   = 1500 // a compacted note, as in the seed
	mainModel    = "claude-sonnet-5"
	smallModel   = "claude-haiku-5-5"
	usdToINR     = 88
)

var (
	// Seed 004's list prices (read 27 October 2026), in micro-USD per MTok.
	sonnet5  = model.Price{Currency: "USD", InputPerMTok: 2_000_000, OutputPerMTok: 10_000_000, CacheWritePerMTok: 2_500_000, CacheReadPerMTok: 200_000}
	haiku5_5 = model.Price{Currency: "USD", InputPerMTok: 100_000, OutputPerMTok: 500_000, CacheWritePerMTok: 125_000, CacheReadPerMTok: 10_000}
)

// fill pads s with filler words to exactly n bytes (n a multiple of 4, so
// that the simulator's ceil(bytes/4) is exact).
func fill(s string, n int) string {
	for len(s) < n {
		s += " data"
	}
	return s[:n]
}

func runPrefix(task string) (string, []model.ToolDef, string) {
	system := fill("You are the card-dispute assistant of the bank. Follow the policy.", systemTokens*4)
	var tools []model.ToolDef
	for i := range toolCount {
		name := fmt.Sprintf("tool_%03d", i) // 8 bytes
		schema := `{"type":"object"}`       // 17 bytes
		tools = append(tools, model.ToolDef{Name: name, Description: fill("Does one banking operation.", toolTokens*4-len(name)-len(schema)), InputSchema: json.RawMessage(schema)})
	}
	return system, tools, fill(task, taskTokens*4)
}

// simulated answers: the main model calls a tool for 24 steps and answers
// in text at step 25; the small model writes a faithful note of exactly
// noteTokens (it lists the identifiers it was asked to keep).
func simulated() func(*anthropictest.Call) anthropictest.Reply {
	var mu sync.Mutex
	mainCalls := 0
	return func(c *anthropictest.Call) anthropictest.Reply {
		if c.Req.Model == smallModel {
			prompt := c.LastUserText()
			_, ids, _ := strings.Cut(prompt, "exactly as written: ")
			ids, _, _ = strings.Cut(ids, "\n")
			note := fill("Progress: "+ids+".", noteTokens*4-len(model.NotePrefix))
			return anthropictest.Reply{Content: []anthropictest.Block{{Type: "text", Text: note}}}
		}
		mu.Lock()
		mainCalls++
		step := (mainCalls-1)%steps + 1
		mu.Unlock()
		if step == steps {
			return anthropictest.Reply{Content: []anthropictest.Block{{Type: "text", Text: fill("Dispute D-2026-55102 raised; refund of 12499 INR awaits approval.", outTokens*4)}}}
		}
		name := fmt.Sprintf("tool_%03d", step%toolCount)
		input := fmt.Sprintf(`{"q":"%s"}`, fill(fmt.Sprintf("lookup t_%03d", step), outTokens*4-len(name)-8))
		return anthropictest.Reply{StopReason: "tool_use", Content: []anthropictest.Block{
			{Type: "tool_use", ID: fmt.Sprintf("toolu_%02d", step), Name: name, Input: json.RawMessage(input)},
		}}
	}
}

type scenario struct {
	name     string
	cache    bool
	policy   *model.CompactionPolicy
	warmRuns int // runs before the measured one (same version, other tasks)
}

type stepRow struct {
	prompt int64 // total input tokens of the step's call
	usage  model.Usage
	cost   int64 // micro-USD
}

type runResult struct {
	rows       []stepRow
	compaction *model.Compaction
	compStep   int
	main       model.Usage
	mainCost   int64
	smallCost  int64
	records    int
}

// runScenario plays a 25-step run (after sc.warmRuns earlier ones) through
// the gateway, and returns the measured run's per-step rows from the
// gateway's ledger.
func runScenario(t testing.TB, sc scenario) runResult {
	srv := anthropictest.NewServer(anthropictest.Options{Reply: simulated()})
	defer srv.Close()
	prov, err := anthropic.New(anthropic.Options{APIKey: "sk-sim", BaseURL: srv.URL, DisableCache: !sc.cache})
	if err != nil {
		t.Fatal(err)
	}
	ledger := &model.Ledger{}
	g, err := model.NewGateway(model.GatewayOptions{
		Providers: map[string]model.Provider{"anthropic": prov},
		Aliases: []model.AliasConfig{
			{Name: "reasoning-standard", Provider: "anthropic", ModelID: mainModel, Price: &sonnet5, MaxTokens: 1024},
			{Name: "reasoning-small", Provider: "anthropic", ModelID: smallModel, Price: &haiku5_5, MaxTokens: 2048},
		},
		Meter: ledger,
	})
	if err != nil {
		t.Fatal(err)
	}
	var res runResult
	for run := 0; run <= sc.warmRuns; run++ {
		res = playRun(t, g, sc, fmt.Sprintf("run-%d", run), fmt.Sprintf("Task %d: ticket T-40127, customer c_88213, two charges of 12,499 INR.", run))
	}
	runID := fmt.Sprintf("run-%d", sc.warmRuns)
	for _, r := range ledger.Records() {
		if r.Attribution.RunID != runID {
			continue
		}
		res.records++
		if r.Alias == "reasoning-small" {
			res.smallCost += r.Cost.Micros
			continue
		}
		res.rows = append(res.rows, stepRow{prompt: r.Usage.TotalInput(), usage: r.Usage, cost: r.Cost.Micros})
		res.main.InputTokens += r.Usage.InputTokens
		res.main.CacheCreationTokens += r.Usage.CacheCreationTokens
		res.main.CacheReadTokens += r.Usage.CacheReadTokens
		res.main.OutputTokens += r.Usage.OutputTokens
		res.mainCost += r.Cost.Micros
	}
	return res
}

// playRun is a simulated agent loop: the transcript is the task, then per
// step the model's answer and the tool results; before each call the
// compaction policy is checked and, when due, the compactor runs.
func playRun(t testing.TB, g *model.Gateway, sc scenario, runID, task string) runResult {
	ctx := context.Background()
	system, tools, taskText := runPrefix(task)
	msgs := []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: taskText}}}}
	var res runResult
	compactor := &model.Compactor{Models: g, Alias: "reasoning-small"}
	done := 0
	for step := 1; step <= steps; step++ {
		req := &model.Request{System: system, Tools: tools, Messages: msgs}
		if sc.policy != nil && sc.policy.Due(msgs, model.EstimateTokens(req)) {
			head, old, recent, _ := model.SplitSteps(msgs, sc.policy.KeepSteps)
			c, err := compactor.Compact(ctx, model.CompactInput{PreviousNote: model.PreviousNote(head), Steps: old, FirstStep: done + 1}, model.Attribution{RunID: runID, Step: step})
			if err != nil {
				t.Fatal(err)
			}
			msgs = model.ApplyCompaction(head, c.Note, recent)
			res.compaction, res.compStep = c, step
			req.Messages = msgs
		}
		r, err := g.Complete(ctx, "reasoning-standard", req, model.Attribution{Tenant: "bank", Agent: "card-dispute-assistant", AgentVersion: 7, RunID: runID, Step: step})
		if err != nil {
			t.Fatal(err)
		}
		msgs = append(msgs, model.Message{Role: model.RoleAssistant, Content: r.Response.Content})
		calls := r.Response.ToolCalls()
		if len(calls) == 0 {
			if step != steps {
				t.Fatalf("run ended at step %d", step)
			}
			break
		}
		var results []model.Part
		for _, c := range calls {
			results = append(results, model.Part{Type: model.PartToolResult, ToolUseID: c.ToolUseID,
				Text: fill(fmt.Sprintf("result of step %d: ticket T-40127 customer c_88213 txn t_%03d amount 12499 status ok.", step, step), resultTokens*4)})
		}
		msgs = append(msgs, model.Message{Role: model.RoleUser, Content: results})
		done = step
	}
	return res
}

func usd(micros int64) string { return fmt.Sprintf("$%.4f", float64(micros)/1e6) }
func inr(micros int64) string { return fmt.Sprintf("₹%.1f", float64(micros)*usdToINR/1e6) }

func pct(a, base int64) string {
	return fmt.Sprintf("%.1f%%", 100*(1-float64(a)/float64(base)))
}

var scenarios = []scenario{
	{name: "no caching"},
	{name: "prompt caching", cache: true},
	{name: "prompt caching, later run of the same version (warm prefix)", cache: true, warmRuns: 1},
	{name: "compaction (seed: steps 1–15 into a note before step 16)", policy: &model.CompactionPolicy{EverySteps: 15}},
	{name: "compaction keeping the last 3 steps verbatim", policy: &model.CompactionPolicy{EverySteps: 15, KeepSteps: 3}},
	{name: "prompt caching + compaction (seed)", cache: true, policy: &model.CompactionPolicy{EverySteps: 15}},
}

func TestCostCurves(t *testing.T) {
	results := make([]runResult, len(scenarios))
	for i, sc := range scenarios {
		results[i] = runScenario(t, sc)
		if n := len(results[i].rows); n != steps {
			t.Fatalf("%s: %d main-model calls in the ledger, want %d", sc.name, n, steps)
		}
	}
	base, cached, warm, seedCompact, keep3, both := results[0], results[1], results[2], results[3], results[4], results[5]

	// Seed 004: 25 × 6,000 + 1,500 × 300 = 600,000 input tokens, 42,000 tokens
	// the last prompt; $1.275 without caching.
	if base.main.TotalInput() != 600_000 || base.rows[steps-1].prompt != 42_000 || base.main.OutputTokens != 7_500 || base.mainCost != 1_275_000 {
		t.Errorf("no caching: input %d, last prompt %d, output %d, cost %s; seed: 600,000 / 42,000 / 7,500 / $1.2750",
			base.main.TotalInput(), base.rows[steps-1].prompt, base.main.OutputTokens, usd(base.mainCost))
	}
	// With caching each token is written once (P + 24Δ = 42,000) and read
	// on every later step (558,000): $0.2916, 77% less.
	if cached.main.TotalInput() != 600_000 || cached.main.CacheCreationTokens != 42_000 || cached.main.CacheReadTokens != 558_000 || cached.main.InputTokens != 0 || cached.mainCost != 291_600 {
		t.Errorf("caching: %+v cost %s; seed: 42,000 written, 558,000 read, $0.2916", cached.main, usd(cached.mainCost))
	}
	if saving := 1 - float64(cached.mainCost)/float64(base.mainCost); saving < 0.765 || saving > 0.775 {
		t.Errorf("caching saves %.1f%%, seed: about 77%%", 100*saving)
	}
	// A later run of the same version reads the instructions and tools
	// from the cache on its very first call.
	if r := warm.rows[0].usage; r.CacheReadTokens != int64(systemTokens+toolCount*toolTokens) {
		t.Errorf("warm first call %+v: want the %d-token instructions+tools prefix read from the cache", r, systemTokens+toolCount*toolTokens)
	}
	// Compacting steps 1–15 into 1,500 tokens: 21,000 tokens at step 25,
	// 390,000 in all, 35% less.
	if seedCompact.main.TotalInput() != 390_000 || seedCompact.rows[steps-1].prompt != 21_000 || seedCompact.compStep != 16 {
		t.Errorf("compaction: input %d, last prompt %d, compacted before step %d; seed: 390,000 / 21,000 / 16",
			seedCompact.main.TotalInput(), seedCompact.rows[steps-1].prompt, seedCompact.compStep)
	}
	if len(seedCompact.compaction.Restored) != 0 {
		t.Errorf("the simulated note needed repairs: %q", seedCompact.compaction.Restored)
	}
	if keep3.main.TotalInput() >= base.main.TotalInput() || keep3.main.TotalInput() <= seedCompact.main.TotalInput() {
		t.Errorf("keeping 3 steps: %d input tokens, want between %d and %d", keep3.main.TotalInput(), seedCompact.main.TotalInput(), base.main.TotalInput())
	}
	if both.mainCost >= cached.mainCost || both.mainCost+both.smallCost >= cached.mainCost {
		t.Errorf("caching + compaction %s (+ note %s), want below caching alone %s", usd(both.mainCost), usd(both.smallCost), usd(cached.mainCost))
	}

	if *curvesOut == "" {
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Seed 004's 25-step background run: a fixed prefix of %d tokens (instructions, %d tool definitions, the task), then %d tokens a step (%d of model output, %d of tool result); Claude Sonnet 5 list prices ($2 / $10 per MTok input / output, $2.50 cache write, $0.20 cache read), compaction notes by Claude Haiku 5.5 ($0.10 / $0.50), ₹%d to the dollar. Every figure is the gateway's own accounting (`model.Ledger`) of calls that the real Anthropic provider (the official SDK) made to `anthropictest`, a simulated Messages API that charges cache writes and reads by the `cache_control` breakpoints it received.\n\n",
		systemTokens+toolCount*toolTokens+taskTokens, toolCount, outTokens+resultTokens, outTokens, resultTokens, usdToINR)
	b.WriteString("| scenario | input tokens | uncached | cache writes | cache reads | output | last prompt | cost | vs no caching |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for i, sc := range scenarios {
		r := results[i]
		cost := usd(r.mainCost) + " (" + inr(r.mainCost) + ")"
		if r.smallCost > 0 {
			cost += fmt.Sprintf(" + note %s", usd(r.smallCost))
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %d | %d | %s | %s |\n", sc.name, r.main.TotalInput(), r.main.InputTokens,
			r.main.CacheCreationTokens, r.main.CacheReadTokens, r.main.OutputTokens, r.rows[steps-1].prompt, cost, pct(r.mainCost+r.smallCost, base.mainCost))
	}
	fmt.Fprintf(&b, "\nSeed 004 expects 600,000 input tokens and about $1.28 (₹112) without caching, 42,000 written + 558,000 read and about $0.29 (₹26, 77%% less) with it, and 390,000 input tokens (35%% fewer) with compaction; the rows above reproduce those figures. Input-token reduction from compaction: %s (seed schedule), %s (keeping the last 3 steps verbatim, as the loop should).\n\n",
		pct(seedCompact.main.TotalInput(), base.main.TotalInput()), pct(keep3.main.TotalInput(), base.main.TotalInput()))
	b.WriteString("Per-step curve (prompt tokens sent, and cumulative cost):\n\n")
	b.WriteString("| step | prompt, no caching | cumulative cost | prompt, caching (written / read) | cumulative cost | prompt, compaction | prompt, caching + compaction (written / read) | cumulative cost |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var c0, c1, c5 int64
	for s := range steps {
		c0 += base.rows[s].cost
		c1 += cached.rows[s].cost
		c5 += both.rows[s].cost
		if s == both.compStep-1 {
			c5 += both.smallCost
		}
		cu, bu := cached.rows[s].usage, both.rows[s].usage
		fmt.Fprintf(&b, "| %d | %d | %s | %d (%d / %d) | %s | %d | %d (%d / %d) | %s |\n", s+1,
			base.rows[s].prompt, usd(c0), cached.rows[s].prompt, cu.CacheCreationTokens, cu.CacheReadTokens, usd(c1),
			seedCompact.rows[s].prompt, both.rows[s].prompt, bu.CacheCreationTokens, bu.CacheReadTokens, usd(c5))
	}
	fmt.Fprintf(&b, "\nCompaction changes the prompt after the task, so the step-%d call reads only the prefix that step 1 cached (instructions, tools, task: %d tokens) and pays a cache write for the note; the cached steps 1–15 are no longer a prefix of anything. That is the seed's trap, and the reason to compact rarely. The note call's cost is added to the cumulative column at that step.\n",
		both.compStep, both.rows[both.compStep-1].usage.CacheReadTokens)
	if err := os.WriteFile(*curvesOut, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkRun25 plays the whole simulated run per iteration: gateway,
// provider (the SDK's request encoding and response decoding, HTTP on
// loopback) and the simulator's own parsing and cache hashing of every
// request. Its time is dominated by the simulator; the metrics that matter
// are the tokens and dollars per run.
func BenchmarkRun25(b *testing.B) {
	for _, bc := range []struct {
		name string
		sc   scenario
	}{{"nocache", scenarios[0]}, {"cache", scenarios[1]}, {"cache+compaction", scenarios[5]}} {
		b.Run(bc.name, func(b *testing.B) {
			var r runResult
			for b.Loop() {
				r = runScenario(b, bc.sc)
			}
			b.ReportMetric(float64(r.main.TotalInput()), "input_tokens/run")
			b.ReportMetric(float64(r.mainCost+r.smallCost)/1e6, "usd/run")
		})
	}
}

// lastPrompt is step 25's request: 42,000 tokens, about 168 KB.
func lastPrompt() *model.Request {
	system, tools, task := runPrefix("Task: ticket T-40127.")
	msgs := []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: task}}}}
	for s := 1; s < steps; s++ {
		id := fmt.Sprintf("toolu_%02d", s)
		msgs = append(msgs,
			model.Message{Role: model.RoleAssistant, Content: []model.Part{{Type: model.PartToolUse, ToolUseID: id, Name: "tool_001", Input: json.RawMessage(fmt.Sprintf(`{"q":"%s"}`, fill("x", outTokens*4-16)))}}},
			model.Message{Role: model.RoleUser, Content: []model.Part{{Type: model.PartToolResult, ToolUseID: id, Text: fill("result", resultTokens*4)}}})
	}
	return &model.Request{Model: mainModel, System: system, Tools: tools, Messages: msgs, MaxTokens: 1024}
}

// BenchmarkGatewayOverhead is the gateway's own cost per call (alias
// resolution, the budget pre-check with its token estimate of the whole
// prompt, pricing, validation, logging, metering) for step 25's prompt,
// over a provider that answers at once.
func BenchmarkGatewayOverhead(b *testing.B) {
	resp := &model.Response{Content: []model.Part{{Type: model.PartText, Text: "done"}}, StopReason: model.StopEndTurn, Usage: model.Usage{CacheReadTokens: 40_500, CacheCreationTokens: 1_500, OutputTokens: 300}}
	p := model.ProviderFunc(func(context.Context, *model.Request) (*model.Response, error) { r := *resp; return &r, nil })
	rates, _ := model.NewRates(model.Rate{From: "USD", To: "INR", Micros: 88_000_000})
	g, err := model.NewGateway(model.GatewayOptions{
		Providers: map[string]model.Provider{"p": p},
		Aliases:   []model.AliasConfig{{Name: "reasoning-standard", Provider: "p", ModelID: mainModel, Price: &sonnet5}},
		Rates:     rates,
		Meter:     discardMeter{},
	})
	if err != nil {
		b.Fatal(err)
	}
	req := lastPrompt()
	a := model.Attribution{RunID: "r", Budget: model.Budget{MaxInputTokens: 1_500_000, UsedInputTokens: 558_000, MaxCost: model.Money{Micros: 150_000_000, Currency: "INR"}, UsedCost: model.Money{Micros: 24_000_000, Currency: "INR"}}}
	for b.Loop() {
		if _, err := g.Complete(context.Background(), "reasoning-standard", req, a); err != nil {
			b.Fatal(err)
		}
	}
}

type discardMeter struct{}

func (discardMeter) Record(context.Context, model.CallRecord) {}

// BenchmarkProviderWire is one Messages call of step 25's prompt through
// the provider: the SDK's encoding of the 168 KB body, HTTP on loopback to a
// server that reads it and answers a canned message, and decoding.
func BenchmarkProviderWire(b *testing.B) {
	srv := anthropictest.NewServer(anthropictest.Options{Reply: func(*anthropictest.Call) anthropictest.Reply {
		return anthropictest.Reply{Body: `{"id":"msg_1","type":"message","role":"assistant","model":"claude-sonnet-5","content":[{"type":"text","text":"done"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":300,"cache_creation_input_tokens":1500,"cache_read_input_tokens":40500}}`}
	}})
	defer srv.Close()
	p, err := anthropic.New(anthropic.Options{APIKey: "sk-sim", BaseURL: srv.URL})
	if err != nil {
		b.Fatal(err)
	}
	req := lastPrompt()
	for b.Loop() {
		if _, err := p.Complete(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
