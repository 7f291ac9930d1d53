package toolsearch_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/toolsearch"
	"github.com/agentplane/agentplane/toolsearch/toolsearchtest"
)

func TestTokens(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"issue_refund", []string{"issu", "refund"}},
		{"getCardTxn2", []string{"get", "card", "txn", "2"}},
		{"HTTPServer-status", []string{"http", "server", "status"}},
		{"Refunds refunded refunding", []string{"refund", "refund", "refund"}},
		{"create created creating creates", []string{"creat", "creat", "creat", "creat"}},
		{"the policies of an entry", []string{"policy", "entry"}},
		{"Überweisung prüfen", []string{"überweisung", "prüfen"}},
		{"", nil},
	} {
		if got := toolsearch.Tokens(c.in); !slices.Equal(got, c.want) {
			t.Errorf("Tokens(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestSearchRanksFiltersAndIsDeterministic(t *testing.T) {
	docs := []toolsearch.Doc{
		toolsearch.DocOf("issue_refund", "Refund a card transaction to the customer.", json.RawMessage(`{"type":"object","properties":{"txn_id":{"type":"string","description":"The transaction to refund."}}}`)),
		toolsearch.DocOf("get_transactions", "List a customer's card transactions.", json.RawMessage(`{"type":"object","properties":{"customer_id":{"type":"string"}}}`)),
		toolsearch.DocOf("send_email", "Send an e-mail.", json.RawMessage(`{"type":"object","properties":{"to":{"type":"string","description":"Recipient address."}}}`)),
		toolsearch.DocOf("zz_credit", "Refund a card transaction to the customer.", json.RawMessage(`{"type":"object","properties":{"txn_id":{"type":"string","description":"The transaction to refund."}}}`)),
		toolsearch.DocOf("aa_credit", "Refund a card transaction to the customer.", json.RawMessage(`{"type":"object","properties":{"txn_id":{"type":"string","description":"The transaction to refund."}}}`)),
	}
	ix := toolsearch.New(docs)
	got := ix.Search("refund a card transaction", 3, nil)
	if names := hitNames(got); !slices.Equal(names, []string{"issue_refund", "aa_credit", "zz_credit"}) {
		t.Fatalf("ranking = %v (%v): the name match first, then equal scores by name", names, got)
	}
	// An argument's description is searched.
	if names := hitNames(ix.Search("recipient address", 5, nil)); !slices.Equal(names, []string{"send_email"}) {
		t.Fatalf("argument description: %v", names)
	}
	// The filter runs before ranking: a tool it drops is never returned.
	keep := func(n string) bool { return n != "issue_refund" }
	if names := hitNames(ix.Search("refund", 10, keep)); slices.Contains(names, "issue_refund") || len(names) != 2 {
		t.Fatalf("filtered: %v", names)
	}
	// No match, no hits; stop words alone match nothing.
	if h := ix.Search("the of and", 5, nil); len(h) != 0 {
		t.Fatalf("stop words matched %v", h)
	}
	// Limits: default, bound.
	if n := len(ix.Search("customer", 0, nil)); n != 4 {
		t.Fatalf("default limit: %d hits", n)
	}
	big := toolsearch.New(docsOf(toolsearchtest.Catalogue()))
	if n := len(big.Search("list transactions customer account loan card", 1000, nil)); n != toolsearch.MaxLimit {
		t.Fatalf("limit not bounded: %d", n)
	}
	// A huge query is bounded, not refused.
	if h := big.Search(strings.Repeat("refund ", 10000), 5, nil); len(h) == 0 {
		t.Fatal("bounded query found nothing")
	}
	// Same catalogue, same query: same hits and scores, whatever the
	// order the documents were given in.
	rev := docsOf(toolsearchtest.Catalogue())
	slices.Reverse(rev)
	for _, q := range toolsearchtest.Queries() {
		a, b := big.Search(q.Text, 5, nil), toolsearch.New(rev).Search(q.Text, 5, nil)
		if !slices.Equal(a, b) {
			t.Fatalf("%q: %v then %v", q.Text, a, b)
		}
	}
}

// TestCatalogueMeasure is the measurement of docs/PERFORMANCE.md: the
// prompt tokens (model.EstimateTokens) of sending every definition of a
// 400-tool catalogue against a few always-on tools, search_tools and the
// five found tools, and the top-5 hit rate of the fixed queries.
func TestCatalogueMeasure(t *testing.T) {
	cat := toolsearchtest.Catalogue()
	seen := map[string]bool{}
	domains := map[string]bool{}
	for _, c := range cat {
		if seen[c.Name] {
			t.Fatalf("duplicate tool %s", c.Name)
		}
		seen[c.Name] = true
		domains[c.Domain] = true
	}
	if len(cat) != 400 || len(domains) != 20 {
		t.Fatalf("catalogue: %d tools in %d domains", len(cat), len(domains))
	}
	qs := toolsearchtest.Queries()
	if len(qs) < 40 {
		t.Fatalf("only %d queries", len(qs))
	}
	ix := toolsearch.New(docsOf(cat))
	top1, top5 := 0, 0
	var misses []string
	for _, q := range qs {
		if !seen[q.Target] {
			t.Fatalf("query %q targets unknown tool %s", q.Text, q.Target)
		}
		names := hitNames(ix.Search(q.Text, 5, nil))
		switch i := slices.Index(names, q.Target); {
		case i == 0:
			top1++
			top5++
		case i > 0:
			top5++
		default:
			misses = append(misses, fmt.Sprintf("%q -> %v (want %s)", q.Text, names, q.Target))
		}
	}
	all := make([]model.ToolDef, 0, len(cat))
	for _, c := range cat {
		all = append(all, model.ToolDef{Name: c.Name, Description: c.Description, InputSchema: c.InputSchema})
	}
	const task = "A customer says she was charged twice for one purchase; check and refund the duplicate."
	msgs := []model.Message{{Role: model.RoleUser, Content: []model.Part{{Type: model.PartText, Text: task}}}}
	everything := model.EstimateTokens(&model.Request{System: "You are a card-dispute agent.", Messages: msgs, Tools: all})
	// With search: three always-on tools, search_tools, and the five
	// tools a search loaded.
	byName := map[string]model.ToolDef{}
	for _, d := range all {
		byName[d.Name] = d
	}
	offered := []model.ToolDef{byName["cards_list_transactions"], byName["cards_get_transaction"], byName["support_get_ticket"], toolsearch.Def()}
	for _, h := range ix.Search("refund a card transaction", 5, nil) {
		if !slices.ContainsFunc(offered, func(d model.ToolDef) bool { return d.Name == h.Name }) {
			offered = append(offered, byName[h.Name])
		}
	}
	withSearch := model.EstimateTokens(&model.Request{System: "You are a card-dispute agent.", Messages: msgs, Tools: offered})
	t.Logf("catalogue: %d tools, %d domains; mean %d tokens per definition", len(cat), len(domains), (everything-model.EstimateTokens(&model.Request{System: "You are a card-dispute agent.", Messages: msgs}))/int64(len(cat)))
	t.Logf("prompt tokens of one step: every definition %d, with search %d (%d tools offered), %.1f%%", everything, withSearch, len(offered), 100*float64(withSearch)/float64(everything))
	t.Logf("hit rate over %d queries: top-1 %d (%.0f%%), top-5 %d (%.0f%%)", len(qs), top1, 100*float64(top1)/float64(len(qs)), top5, 100*float64(top5)/float64(len(qs)))
	for _, m := range misses {
		t.Logf("miss: %s", m)
	}
	if withSearch*10 > everything {
		t.Errorf("search offers %d tokens against %d for everything: want under a tenth", withSearch, everything)
	}
	if top5*100 < len(qs)*85 {
		t.Errorf("top-5 hit rate %d/%d is under 85%%", top5, len(qs))
	}
}

func docsOf(cat []toolsearchtest.Tool) []toolsearch.Doc {
	out := make([]toolsearch.Doc, 0, len(cat))
	for _, c := range cat {
		out = append(out, toolsearch.DocOf(c.Name, c.Description, c.InputSchema))
	}
	return out
}

func hitNames(hs []toolsearch.Hit) []string {
	out := make([]string, 0, len(hs))
	for _, h := range hs {
		out = append(out, h.Name)
	}
	return out
}

func BenchmarkSearch400(b *testing.B) {
	ix := toolsearch.New(docsOf(toolsearchtest.Catalogue()))
	qs := toolsearchtest.Queries()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		ix.Search(qs[i%len(qs)].Text, 5, nil)
	}
}

func BenchmarkIndex400(b *testing.B) {
	docs := docsOf(toolsearchtest.Catalogue())
	for b.Loop() {
		toolsearch.New(docs)
	}
}
