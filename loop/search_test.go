package loop_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/toolsearch"
	"github.com/agentplane/agentplane/toolsearch/toolsearchtest"
	"github.com/agentplane/agentplane/trace"
)

const searchScript = `
turns:
  - text: "Let me find a tool for refunds."
    tool_calls:
      - {name: search_tools, args: {query: "refund a card transaction"}}
  - text: "Refunding."
    tool_calls:
      - {name: cards_refund_transaction, args: {txn_id: t_1, amount_inr: "500"}}
  - text: "Done."
`

const searcherAgent = `
agent: searcher
version: 1
model: {alias: test-model}
instructions: You resolve card disputes.
tools:
  - connector: bank
    search: true
    allow: [cards_list_transactions]
  - tool: echo
budgets: {max_steps: 10, max_input_tokens: 1000000, max_cost_usd: 10, max_wall_clock: 1h}
`

// catalogueManifests turns the synthetic catalogue into tier-1 manifests of
// connector bank. Tools of the cards domain act for the user with scope
// cards:read, except the refund, which needs cards:refund; tools that
// change something have external side effects.
func catalogueManifests(t *testing.T, extra string) []*tool.Manifest {
	t.Helper()
	var src strings.Builder
	for _, c := range toolsearchtest.Catalogue() {
		side := "external"
		for _, v := range []string{"_get_", "_list_", "_search_", "_export_", "_download_"} {
			if strings.Contains(c.Name, v) {
				side = "none"
			}
		}
		desc, _ := json.Marshal(c.Description)
		fmt.Fprintf(&src, "---\nname: %s\nconnector: bank\ndescription: %s\ntier: 1\ntimeout_ms: 1000\nside_effects: %s\ninput_schema: %s\n", c.Name, desc, side, c.InputSchema)
		switch {
		case c.Name == "cards_refund_transaction":
			src.WriteString("auth: {mode: on_behalf_of_user, scopes: [cards:refund]}\n")
		case c.Domain == "cards":
			src.WriteString("auth: {mode: on_behalf_of_user, scopes: [cards:read]}\n")
		}
	}
	src.WriteString(extra)
	ms, err := tool.ParseManifests("catalogue.yaml", []byte(src.String()))
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// searchFixture is a platform whose agent searcher is granted the 400-tool
// connector bank with search, all reviewed but cards_get_transaction.
func searchFixture(t *testing.T, script string) (*fixture, map[string]int) {
	t.Helper()
	ctx := context.Background()
	f := newFixture(t, fixtureOptions{script: script})
	calls := map[string]int{}
	ms := catalogueManifests(t, "")
	for _, m := range ms {
		name := m.Name
		if err := f.p.Catalog.Register(name, func(_ context.Context, c tool.Call) (tool.Result, error) {
			calls[name]++
			return tool.JSONResult(map[string]string{"tool": name, "status": "done"})
		}); err != nil {
			t.Fatal(err)
		}
		if name != "cards_get_transaction" {
			if err := f.p.Catalog.Review(m); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := f.p.ApplyManifests(ctx, ms); err != nil {
		t.Fatal(err)
	}
	d, err := agent.ParseDefinition("searcher.yaml", []byte(searcherAgent), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.Registry.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Secrets.Put(ctx, testTenant, "bank", []byte("a-test-secret-of-the-bank-connector")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*authz.Principal{
		{Tenant: testTenant, User: "alice", Scopes: []string{"cards:read"}},
		{Tenant: testTenant, User: "bob", Scopes: []string{"cards:read", "cards:refund"}},
	} {
		if err := authz.Put(ctx, f.p.Store, p); err != nil {
			t.Fatal(err)
		}
	}
	return f, calls
}

func (f *fixture) runAs(user string) (*store.Run, []store.Event) {
	f.t.Helper()
	ctx := context.Background()
	r, err := f.p.Runs.Start(ctx, runs.StartRequest{Agent: "searcher@1", Task: "A customer was charged twice; refund the duplicate.", Tenant: testTenant, User: user})
	if err != nil {
		f.t.Fatal(err)
	}
	return f.finish(r.ID)
}

func (f *fixture) finish(id string) (*store.Run, []store.Event) {
	f.t.Helper()
	ctx := context.Background()
	got, err := f.p.Embedded.Execute(ctx, id)
	if err != nil {
		f.t.Fatalf("execute: %v", err)
	}
	evs, err := f.p.Store.Events(ctx, id, 0, 0)
	if err != nil {
		f.t.Fatal(err)
	}
	return got, evs
}

// requests rebuilds every model request of a run from its log (what
// trace verify checks against the recorded hashes).
func (f *fixture) requests(evs []store.Event) ([]*model.Request, []string) {
	f.t.Helper()
	var reqs []*model.Request
	var hashes []string
	err := trace.Prompts(context.Background(), f.source(), evs, func(_ *store.Event, mc *trace.ModelCall, req *model.Request) error {
		reqs, hashes = append(reqs, req), append(hashes, mc.PromptHash)
		return nil
	})
	if err != nil {
		f.t.Fatal(err)
	}
	return reqs, hashes
}

func loadedEvents(t *testing.T, evs []store.Event) []trace.ToolsLoaded {
	t.Helper()
	var out []trace.ToolsLoaded
	for _, ev := range evs {
		if ev.Type == trace.EvToolsLoaded {
			var tl trace.ToolsLoaded
			if err := json.Unmarshal(ev.Payload, &tl); err != nil {
				t.Fatal(err)
			}
			out = append(out, tl)
		}
	}
	return out
}

func toolNames(defs []model.ToolDef) []string {
	var out []string
	for _, d := range defs {
		out = append(out, d.Name)
	}
	return out
}

func TestToolSearch(t *testing.T) {
	ctx := context.Background()
	f, calls := searchFixture(t, searchScript)

	run, evs := f.runAs("bob")
	if run.Status != store.StatusCompleted {
		t.Fatalf("run %s: %s", run.Status, run.Result)
	}
	var rs trace.RunStarted
	if err := json.Unmarshal(evs[0].Payload, &rs); err != nil {
		t.Fatal(err)
	}
	// The catalogue pinned at the start: every reviewed tool of the
	// connector but the always-on one; the unreviewed one is not there.
	if len(rs.Searchable) != 398 || slices.ContainsFunc(rs.Searchable, func(r trace.ToolRef) bool {
		return r.Name == "cards_get_transaction" || r.Name == "cards_list_transactions" || !r.Reviewed
	}) {
		t.Fatalf("searchable: %d tools", len(rs.Searchable))
	}

	// One search, recorded: the refund first for a user who may refund.
	tls := loadedEvents(t, evs)
	if len(tls) != 1 {
		t.Fatalf("%d tools_loaded events", len(tls))
	}
	tl := tls[0]
	if len(tl.Hits) != toolsearch.DefaultLimit || tl.Hits[0].Name != "cards_refund_transaction" || len(tl.Loaded) != len(tl.Hits) {
		t.Fatalf("search: %+v", tl)
	}
	if calls["cards_refund_transaction"] != 1 {
		t.Fatalf("the loaded tool ran %d times", calls["cards_refund_transaction"])
	}

	// The first request offers the always-on tools and search_tools; the
	// second the same tools, byte for byte, then the loaded ones in the
	// recorded order.
	reqs, _ := f.requests(evs)
	if len(reqs) != 3 {
		t.Fatalf("%d model calls", len(reqs))
	}
	prefix := reqs[0].Tools
	if got := toolNames(prefix); !slices.Equal(got, []string{"cards_list_transactions", "echo", toolsearch.Name}) {
		t.Fatalf("first request offers %v", got)
	}
	second := reqs[1].Tools
	before, _ := json.Marshal(prefix)
	after, _ := json.Marshal(second[:len(prefix)])
	if string(before) != string(after) || reqs[1].System != reqs[0].System || reqs[1].CachedTools != len(prefix) {
		t.Fatalf("the cached prefix changed:\n%s\n%s", before, after)
	}
	var want []string
	for _, ref := range tl.Loaded {
		want = append(want, ref.Name)
	}
	if got := toolNames(second[len(prefix):]); !slices.Equal(got, want) {
		t.Fatalf("loaded tools offered %v, want %v", got, want)
	}
	full := model.EstimateTokens(reqs[1])
	t.Logf("step 2 offers %d tools, %d estimated prompt tokens", len(second), full)

	// The log verifies, and a re-run of the loop over it reproduces it.
	if rep, err := trace.Verify(ctx, f.source(), run.ID); err != nil || !rep.OK() {
		t.Fatalf("verify: %v %+v", err, rep)
	}
	if v, err := f.p.Engine.Verify(ctx, run.ID); err != nil || v.Events != len(evs) {
		t.Fatalf("engine verify: %+v %v", v, err)
	}

	// Same catalogue, same query: the same ranking.
	_, evs2 := f.runAs("bob")
	if a, b := loadedEvents(t, evs2), tls; len(a) != 1 || !slices.Equal(a[0].Hits, b[0].Hits) {
		t.Fatalf("second search: %+v, first %+v", a, b)
	}

	// A user without the refund scope is never offered the refund, and
	// calling it anyway is refused: it was never loaded.
	arun, aevs := f.runAs("alice")
	atl := loadedEvents(t, aevs)
	if len(atl) != 1 || slices.ContainsFunc(atl[0].Hits, func(h trace.SearchHit) bool {
		return h.Name == "cards_refund_transaction" || h.Name == "cards_get_transaction"
	}) || len(atl[0].Hits) == 0 {
		t.Fatalf("alice's search: %+v (%s)", atl, arun.Status)
	}
	for _, ev := range aevs {
		if ev.Type != trace.EvToolAttempt {
			continue
		}
		var at trace.ToolAttempt
		_ = json.Unmarshal(ev.Payload, &at)
		if at.Tool == "cards_refund_transaction" && (at.Decision.Allowed || !strings.Contains(at.Decision.Reason, "find it with search_tools")) {
			t.Fatalf("alice's refund: %+v", at.Decision)
		}
	}
	if calls["cards_refund_transaction"] != 2 {
		t.Fatalf("refund ran %d times, want 2 (bob's runs only)", calls["cards_refund_transaction"])
	}
	if rep, err := trace.Verify(ctx, f.source(), arun.ID); err != nil || !rep.OK() {
		t.Fatalf("verify alice: %v %+v", err, rep)
	}

	// The catalogue changes: a new tool that a search would now rank
	// first. A replay of bob's run offers exactly the tools the original
	// did (its search is not run again), so every prompt is the
	// original's, and the refund is served from the recording.
	newer := catalogueManifests(t, "---\nname: cards_refund_card_transaction\nconnector: bank\ndescription: Refund a card transaction, refund a card charge, refund refund.\ntier: 1\ntimeout_ms: 1000\nside_effects: external\ninput_schema: {type: object}\n")
	extra := newer[len(newer)-1]
	if err := f.p.Catalog.Register(extra.Name, func(context.Context, tool.Call) (tool.Result, error) { return tool.JSONResult("x") }); err != nil {
		t.Fatal(err)
	}
	if err := f.p.Catalog.Review(extra); err != nil {
		t.Fatal(err)
	}
	if _, err := f.p.ApplyManifests(ctx, []*tool.Manifest{extra}); err != nil {
		t.Fatal(err)
	}
	_, live := f.runAs("bob")
	if got := loadedEvents(t, live)[0].Hits[0].Name; got != extra.Name {
		t.Fatalf("a new search ranks %s first, want the new tool", got)
	}
	rp, err := f.p.Runs.Replay(ctx, runs.ReplayRequest{Of: run.ID, FromStep: 1, Mode: trace.ReplayRecorded})
	if err != nil {
		t.Fatal(err)
	}
	rrun, revs := f.finish(rp.ID)
	if rrun.Status != store.StatusCompleted {
		t.Fatalf("replay %s: %s", rrun.Status, rrun.Result)
	}
	rtl := loadedEvents(t, revs)
	if len(rtl) != 1 || rtl[0].Replayed != trace.ReplayedRecorded || !slices.Equal(rtl[0].Hits, tl.Hits) || len(rtl[0].Dropped) != 0 {
		t.Fatalf("replayed search: %+v", rtl)
	}
	_, origHashes := f.requests(evs)
	_, replayHashes := f.requests(revs)
	if !slices.Equal(origHashes, replayHashes) {
		t.Fatalf("replay prompts differ:\n%v\n%v", origHashes, replayHashes)
	}
	if calls["cards_refund_transaction"] != 3 {
		t.Fatalf("refund ran %d times: the replay must not run it (3 live runs of bob)", calls["cards_refund_transaction"])
	}
	if v, err := f.p.Engine.Verify(ctx, rp.ID); err != nil || v.Events != len(revs) {
		t.Fatalf("engine verify of the replay: %+v %v", v, err)
	}
}

// A search with arguments the model must fix is refused with a reason and
// loads nothing; the run goes on.
func TestToolSearchBadArguments(t *testing.T) {
	f, _ := searchFixture(t, strings.Replace(searchScript, `{query: "refund a card transaction"}`, `{query: "", limit: 50}`, 1))
	run, evs := f.runAs("bob")
	if len(loadedEvents(t, evs)) != 0 {
		t.Fatal("a refused search loaded tools")
	}
	var res trace.ToolResult
	for _, ev := range evs {
		if ev.Type == trace.EvToolResult {
			_ = json.Unmarshal(ev.Payload, &res)
			break
		}
	}
	if res.Status != trace.StatusInvalid || !strings.Contains(res.Output.Text, "query must say") {
		t.Fatalf("result: %+v (%s)", res, run.Status)
	}
}
