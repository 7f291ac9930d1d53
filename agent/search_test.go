package agent

import (
	"slices"
	"strings"
	"testing"
)

// A connector granted with search: true offers its allow list from the
// start and lets the agent find the rest with search_tools.
func TestSearchGrant(t *testing.T) {
	tools := testTools(t)
	src := strings.Replace(cardDispute, "    allow: [get_card_transactions, get_customer_profile, raise_dispute, issue_refund]",
		"    search: true\n    allow: [get_card_transactions]", 1)
	d := parseDef(t, src)
	if !d.Search() || !d.Tools[0].Search {
		t.Fatal("search grant not parsed")
	}
	if err := d.Bind(tools); err != nil {
		t.Fatal(err)
	}
	granted, _ := d.GrantedTools(tools)
	if slices.Contains(granted, "issue_refund") || !slices.Contains(granted, "get_card_transactions") {
		t.Fatalf("offered from the start: %v", granted)
	}
	want := []string{"delete_account", "get_customer_profile", "issue_refund", "raise_dispute"}
	if got := d.SearchableTools(tools); !slices.Equal(got, want) {
		t.Fatalf("searchable = %v, want %v", got, want)
	}
	for name, want := range map[string]bool{"issue_refund": true, "get_card_transactions": true, "send_email": true, "nonexistent": false} {
		if d.Grants(name) != want {
			t.Errorf("Grants(%q) = %v", name, !want)
		}
	}

	// The grant is part of the definition's identity and survives storage.
	stored, err := DefinitionFromJSON(d.CanonicalJSON())
	if err != nil {
		t.Fatal(err)
	}
	if stored.Hash() != d.Hash() || !stored.Tools[0].Search {
		t.Fatal("search grant lost in canonical JSON")
	}
	if parseDef(t, cardDispute).Hash() == d.Hash() {
		t.Fatal("search does not change the hash")
	}
	if strings.Contains(string(parseDef(t, cardDispute).CanonicalJSON()), "search") {
		t.Fatal("a definition without search writes the field (old hashes would change)")
	}

	// search alone, with no allow list.
	only := strings.Replace(cardDispute, "    allow: [get_card_transactions, get_customer_profile, raise_dispute, issue_refund]", "    search: true", 1)
	od := parseDef(t, only)
	if err := od.Bind(tools); err != nil {
		t.Fatal(err)
	}
	if got := od.SearchableTools(tools); len(got) != 5 {
		t.Fatalf("search-only grant: %v", got)
	}
	back, err := DefinitionFromJSON(od.CanonicalJSON())
	if err != nil || back.Hash() != od.Hash() {
		t.Fatalf("search-only round trip: %v", err)
	}
}

func TestSearchGrantRefused(t *testing.T) {
	tools := testTools(t)
	for _, c := range []struct{ old, new, want string }{
		{"  - tool: get_ticket", "  - tool: get_ticket\n    search: true", `"tools[2].search": goes with connector only`},
		{"  - tool: get_ticket", "  - tool: search_tools", `search_tools is the platform's built-in tool search`},
		{"allow: [draft_email, send_email]", "allow: [draft_email, search_tools]", `search_tools is the platform's built-in tool search`},
		{"allow: [draft_email, send_email]", "search: yes please", `tools[1].search`},
	} {
		src := strings.Replace(cardDispute, c.old, c.new, 1)
		_, err := ParseDefinition("agents/card.yaml", []byte(src), nil)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.new, err, c.want)
		}
	}
	// A search grant of a connector nobody registered is refused at apply.
	src := strings.Replace(cardDispute, "  - tool: get_ticket", "  - connector: crm\n    search: true\n  - tool: get_ticket", 1)
	d := parseDef(t, src)
	if err := d.Bind(tools); err == nil || !strings.Contains(err.Error(), `connector "crm" is unknown or has no reviewed tools`) {
		t.Fatalf("unknown connector: %v", err)
	}
}
