package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/tool"
)

// cardDispute is a valid inline definition; the table tests break it one
// field at a time.
const cardDispute = `agent: card-dispute-assistant
version: 7
model: {alias: reasoning-standard, small: reasoning-small}
instructions: |
  You help with card disputes.
tools:
  - connector: core-banking
    allow: [get_card_transactions, get_customer_profile, raise_dispute, issue_refund]
  - connector: email
    allow: [draft_email, send_email]
  - tool: get_ticket
  - sandbox: python-analysis
policies:
  - name: refund-supervisor
    when: tool == "issue_refund" && args.amount_inr > 10000
    then: "require_approval(group: card-ops-supervisors, expires: 24h)"
  - when: tool == "send_email" && run.tainted
    then: deny(reason="tainted runs may not email")
budgets: {max_steps: 40, max_input_tokens: 1500000, max_cost_inr: 150, max_wall_clock: 2h}
`

// testTools is the tool set the card-dispute agent's grants resolve against.
func testTools(t testing.TB) *tool.Set {
	t.Helper()
	var src strings.Builder
	add := func(name, connector string) {
		fmt.Fprintf(&src, "---\nname: %s\ntier: 2\ntimeout_ms: 1000\ninput_schema: {type: object}\nside_effects: none\n", name)
		if connector != "" {
			fmt.Fprintf(&src, "connector: %s\n", connector)
		}
	}
	for _, n := range []string{"get_card_transactions", "get_customer_profile", "raise_dispute", "issue_refund"} {
		add(n, "core-banking")
	}
	add("draft_email", "email")
	add("send_email", "email")
	add("get_ticket", "")
	add("run_python", "python-analysis")
	add("plot_chart", "python-analysis")
	add("delete_account", "core-banking")
	ms, err := tool.ParseManifests("test-tools.yaml", []byte(src.String()))
	if err != nil {
		t.Fatal(err)
	}
	set, err := tool.NewSet(ms...)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

func parseDef(t *testing.T, src string) *Definition {
	t.Helper()
	d, err := ParseDefinition("agents/card.yaml", []byte(src), nil)
	if err != nil {
		t.Fatalf("ParseDefinition: %v", err)
	}
	return d
}

func TestCardDisputeTestdata(t *testing.T) {
	d, err := LoadDefinitionFile(filepath.Join("testdata", "card-dispute-v7.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Agent != "card-dispute-assistant" || d.Version != 7 {
		t.Errorf("identity = %q v%d", d.Agent, d.Version)
	}
	want := Budgets{MaxSteps: 40, MaxInputTokens: 1_500_000, CostMicros: 150_000_000, Currency: "INR", MaxWallClock: 2 * time.Hour}
	if d.Budgets != want {
		t.Errorf("budgets = %+v, want %+v", d.Budgets, want)
	}
	if d.Model.Alias != "reasoning-standard" || d.Model.Small != "reasoning-small" || d.Model.Temperature == nil || *d.Model.Temperature != 0 {
		t.Errorf("model = %+v", d.Model)
	}
	if !strings.HasPrefix(d.Instructions, "You assist the bank's card-operations team") {
		t.Errorf("instructions not read from the referenced file: %.60q", d.Instructions)
	}
	wantPolicies := []Policy{
		{Name: "large-refund", When: `tool == "issue_refund" && args.amount_inr > 10000`,
			Then: Action{Kind: ActionRequireApproval, Group: "card-ops-supervisors", Expires: 24 * time.Hour}},
		{Name: "email-after-untrusted", When: `tool == "send_email" && run.tainted`,
			Then: Action{Kind: ActionRequireApproval, Group: "card-ops-agents", Expires: DefaultApprovalExpiry}},
	}
	if !slices.Equal(d.Policies, wantPolicies) {
		t.Errorf("policies = %+v\nwant %+v", d.Policies, wantPolicies)
	}
	if d.Context != (ContextSettings{MaxResultBytes: 16384, KeepRecentSteps: 6}) {
		t.Errorf("context = %+v", d.Context)
	}
	if err := d.Bind(testTools(t)); err != nil {
		t.Fatal(err)
	}
	wantTools := []string{"draft_email", "get_card_transactions", "get_customer_profile", "get_ticket",
		"issue_refund", "plot_chart", "raise_dispute", "run_python", "send_email"}
	if !slices.Equal(d.Granted(), wantTools) {
		t.Errorf("granted = %v\nwant %v", d.Granted(), wantTools)
	}
}

func TestParseDefinitionInline(t *testing.T) {
	d := parseDef(t, cardDispute)
	if d.Policies[1].Name != "policy[1]" {
		t.Errorf("default policy name = %q", d.Policies[1].Name)
	}
	if a := d.Policies[1].Then; a.Kind != ActionDeny || a.Reason != "tainted runs may not email" {
		t.Errorf("deny action = %+v", a)
	}
	if d.Model.Temperature != nil {
		t.Errorf("temperature set without being written: %v", *d.Model.Temperature)
	}
	if want := []string{"get_card_transactions", "get_customer_profile", "issue_refund", "raise_dispute"}; !slices.Equal(d.Tools[0].Allow, want) {
		t.Errorf("allow not sorted: %v", d.Tools[0].Allow)
	}
}

func TestParseDefinitionErrors(t *testing.T) {
	tests := []struct {
		name     string
		old, new string
		field    string
		problem  string
	}{
		{"agent missing", "agent: card-dispute-assistant\n", "", "agent", "required"},
		{"agent invalid", "agent: card-dispute-assistant", "agent: Card_Dispute", "agent", "lower case"},
		{"version missing", "version: 7\n", "", "version", "required"},
		{"version negative", "version: 7", "version: -2", "version", "between 1 and"},
		{"version not a number", "version: 7", "version: seven", "version", `expected an integer, got string "seven"`},
		{"unknown field", "version: 7", "version: 7\nowner: team-a", "owner", "unknown field"},
		{"unknown nested field", "{alias: reasoning-standard,", "{alias: reasoning-standard, size: xl,", "model.size", "unknown field"},
		{"model missing", "model: {alias: reasoning-standard, small: reasoning-small}\n", "", "model", "required"},
		{"model alias missing", "alias: reasoning-standard, ", "", "model.alias", "required"},
		{"temperature", "small: reasoning-small}", "small: reasoning-small, temperature: 3}", "model.temperature", "between 0 and 2"},
		{"instructions missing", "instructions: |\n  You help with card disputes.\n", "", "instructions", "required"},
		{"instructions twice", "instructions: |", "instructions_ref: x.md\ninstructions: |", "instructions_ref", "not both"},
		{"instructions ref outside", "instructions: |\n  You help with card disputes.\n", "instructions_ref: ../secrets.md\n", "instructions_ref", "inside the definition's directory"},
		{"instructions ref blob", "instructions: |\n  You help with card disputes.\n", "instructions_ref: blob://prompts/v7.md\n", "instructions_ref", "only a file path"},
		{"instructions ref unreadable here", "instructions: |\n  You help with card disputes.\n", "instructions_ref: v7.md\n", "instructions_ref", "cannot be read here"},
		{"grant two kinds", "  - tool: get_ticket", "  - tool: get_ticket\n    sandbox: x", "tools[2]", "exactly one of"},
		{"grant empty allow", "    allow: [draft_email, send_email]", "    allow: []", "tools[1].allow", "required"},
		{"grant allow without connector", "  - tool: get_ticket", "  - tool: get_ticket\n    allow: [x]", "tools[2].allow", "connector only"},
		{"grant bad tool name", "draft_email, send_email", "draft_email, Send-Email", "tools[1].allow[1]", "must be a tool name"},
		{"grant tool twice", "  - tool: get_ticket", "  - tool: send_email", "tools[2].tool", "already granted by tools[1]"},
		{"grant connector twice", "  - tool: get_ticket", "  - connector: email\n    allow: [get_ticket]", "tools[2]", "connector email is granted twice"},
		{"grant bad sandbox", "sandbox: python-analysis", "sandbox: Python", "tools[3].sandbox", "lower case"},
		{"grant unknown key", "  - tool: get_ticket", "  - tool: get_ticket\n    scope: all", "tools[2].scope", "unknown field"},
		{"policy when missing", `  - when: tool == "send_email" && run.tainted`, `  - when: ""`, "policies[1].when", "required"},
		{"policy when too long", `  - when: tool == "send_email" && run.tainted`, "  - when: " + strings.Repeat("x", MaxWhenBytes+1), "policies[1].when", "longer than"},
		{"policy then missing", `    then: deny(reason="tainted runs may not email")`, "", "policies[1].then", "required"},
		{"policy then unknown", `deny(reason="tainted runs may not email")`, "explode", "policies[1].then", `policy "policy[1]": unknown action "explode"`},
		{"policy then bad group", `group: card-ops-supervisors`, `group: Card-Ops`, "policies[0].then", `policy "refund-supervisor"`},
		{"policy then no group", `"require_approval(group: card-ops-supervisors, expires: 24h)"`, `"require_approval(expires: 24h)"`, "policies[0].then", "group is required"},
		{"policy then bad expiry", `expires: 24h`, `expires: soon`, "policies[0].then", "expires must be a duration"},
		{"policy name invalid", "name: refund-supervisor", "name: Refund Supervisor", "policies[0].name", "lower case"},
		{"policy name twice", "  - when: tool == \"send_email\"", "  - name: refund-supervisor\n    when: tool == \"send_email\"", "policies[1].name", "defined twice"},
		{"budgets missing", "budgets: {max_steps: 40, max_input_tokens: 1500000, max_cost_inr: 150, max_wall_clock: 2h}\n", "", "budgets", "required"},
		{"budget unknown", "max_wall_clock: 2h}", "max_wall_clock: 2h, max_tool_calls: 5}", "budgets.max_tool_calls", "unknown budget"},
		{"budget steps zero", "max_steps: 40", "max_steps: 0", "budgets.max_steps", "from 1 to 1000"},
		{"budget steps large", "max_steps: 40", "max_steps: 1001", "budgets.max_steps", "from 1 to 1000"},
		{"budget steps fraction", "max_steps: 40", "max_steps: 4.5", "budgets.max_steps", "whole number"},
		{"budget steps missing", "max_steps: 40, ", "", "budgets", "max_steps is required"},
		{"budget tokens zero", "max_input_tokens: 1500000", "max_input_tokens: 0", "budgets.max_input_tokens", "from 1"},
		{"budget cost missing", "max_cost_inr: 150, ", "", "budgets", "cost budget is required"},
		{"budget cost twice", "max_cost_inr: 150", "max_cost_inr: 150, max_cost_usd: 2", "budgets.max_cost_usd", "only one cost budget"},
		{"budget cost currency", "max_cost_inr: 150", "max_cost_rupees: 150", "budgets.max_cost_rupees", "unknown budget"},
		{"budget cost precision", "max_cost_inr: 150", "max_cost_inr: 0.0000001", "budgets.max_cost_inr", "at most 6 decimal places"},
		{"budget cost negative", "max_cost_inr: 150", "max_cost_inr: -5", "budgets.max_cost_inr", "positive decimal"},
		{"budget cost zero", "max_cost_inr: 150", "max_cost_inr: 0", "budgets.max_cost_inr", "more than zero"},
		{"budget cost exponent", "max_cost_inr: 150", "max_cost_inr: 1e3", "budgets.max_cost_inr", "positive decimal"},
		{"budget wall clock", "max_wall_clock: 2h", "max_wall_clock: 7200", "budgets.max_wall_clock", "duration"},
		{"budget wall clock too long", "max_wall_clock: 2h", "max_wall_clock: 400d", "budgets.max_wall_clock", "at most 366d"},
		{"budget not scalar", "max_steps: 40", "max_steps: [40]", "budgets.max_steps", "must be a number"},
		{"context unknown", "budgets:", "context: {max_tokens: 5}\nbudgets:", "context.max_tokens", "unknown field"},
		{"context negative", "budgets:", "context: {keep_recent_steps: -1}\nbudgets:", "context.keep_recent_steps", "between 0 and 1000"},
		{"duplicate key", "version: 7", "version: 7\nversion: 8", "version", "appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(cardDispute, tt.old, tt.new, 1)
			if src == cardDispute {
				t.Fatalf("case does not change the definition (%q not found)", tt.old)
			}
			_, err := ParseDefinition("agents/card.yaml", []byte(src), nil)
			if err == nil {
				t.Fatal("no error")
			}
			msg := err.Error()
			for _, want := range []string{"agents/card.yaml", `field "` + tt.field + `"`, tt.problem} {
				if !strings.Contains(msg, want) {
					t.Errorf("error %q does not contain %q", msg, want)
				}
			}
			if tt.field != "agent" && !strings.Contains(msg, `agent "card-dispute-assistant"`) {
				t.Errorf("error %q does not name the agent", msg)
			}
			var de *DefinitionError
			if !errors.As(err, &de) {
				t.Errorf("error is not a *DefinitionError: %T", err)
			}
		})
	}
}

func TestParseDefinitionDocuments(t *testing.T) {
	for name, tt := range map[string]struct{ src, want string }{
		"empty":           {"# nothing\n", "no agent definition"},
		"list":            {"- a\n", "must be a mapping"},
		"two documents":   {cardDispute + "---\nagent: other\n", "one agent"},
		"unquoted action": {strings.Replace(cardDispute, `"require_approval(group: card-ops-supervisors, expires: 24h)"`, `require_approval(group: card-ops-supervisors, expires: 24h)`, 1), `must be quoted`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseDefinition("agents/card.yaml", []byte(tt.src), nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	// A trailing empty document is fine.
	if _, err := ParseDefinition("agents/card.yaml", []byte(cardDispute+"---\n"), nil); err != nil {
		t.Errorf("trailing ---: %v", err)
	}
}

func TestInstructionsRef(t *testing.T) {
	src := strings.Replace(cardDispute, "instructions: |\n  You help with card disputes.\n", "instructions_ref: prompts/v7.md\n", 1)
	var asked string
	d, err := ParseDefinition("agents/card.yaml", []byte(src), func(p string) ([]byte, error) {
		asked = p
		return []byte("Be careful."), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if asked != filepath.Join("prompts", "v7.md") || d.Instructions != "Be careful." {
		t.Errorf("asked %q, instructions %q", asked, d.Instructions)
	}
	_, err = ParseDefinition("agents/card.yaml", []byte(src), func(string) ([]byte, error) { return nil, os.ErrNotExist })
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), `field "instructions_ref"`) {
		t.Errorf("unreadable ref: %v", err)
	}

	// LoadDefinitionFile refuses a symbolic link out of the directory.
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret.md")
	if err := os.WriteFile(outside, []byte("secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "v7.md")); err != nil {
		t.Skipf("symlinks unavailable: %v", err)
	}
	def := filepath.Join(dir, "card.yaml")
	if err := os.WriteFile(def, []byte(strings.Replace(src, "prompts/v7.md", "v7.md", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadDefinitionFile(def); err == nil {
		t.Error("instructions_ref followed a symbolic link out of the definition's directory")
	}
}

func TestDefinitionCanonicalJSON(t *testing.T) {
	file, err := LoadDefinitionFile(filepath.Join("testdata", "card-dispute-v7.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []*Definition{parseDef(t, cardDispute), file} {
		c1 := d.CanonicalJSON()
		d2, err := DefinitionFromJSON(c1)
		if err != nil {
			t.Fatalf("DefinitionFromJSON(%s): %v", c1, err)
		}
		if c2 := d2.CanonicalJSON(); !bytes.Equal(c1, c2) {
			t.Errorf("round trip changed the definition:\n%s\n%s", c1, c2)
		}
		if d.Hash() != d2.Hash() {
			t.Error("hash changed in a round trip")
		}
		if d2.Budgets != d.Budgets || !slices.Equal(d2.Policies, d.Policies) || d2.Instructions != d.Instructions {
			t.Errorf("round trip changed fields: %+v", d2)
		}
	}
	// Equivalent spellings hash the same; a real change does not.
	a := parseDef(t, cardDispute)
	b := parseDef(t, strings.NewReplacer(
		"max_wall_clock: 2h", "max_wall_clock: 120m",
		"max_cost_inr: 150", "max_cost_inr: 150.000",
		"allow: [draft_email, send_email]", "allow: [send_email, draft_email]",
		`deny(reason="tainted runs may not email")`, `'deny("tainted runs may not email")'`,
	).Replace(cardDispute))
	if a.Hash() != b.Hash() {
		t.Errorf("equivalent definitions hash differently:\n%s\n%s", a.CanonicalJSON(), b.CanonicalJSON())
	}
	c := parseDef(t, strings.Replace(cardDispute, "max_steps: 40", "max_steps: 41", 1))
	if a.Hash() == c.Hash() {
		t.Error("different budgets hash the same")
	}
	if !strings.Contains(string(a.CanonicalJSON()), `"max_cost_inr":"150"`) {
		t.Errorf("cost not written as a decimal string: %s", a.CanonicalJSON())
	}
}

func TestDefinitionFromJSONRejects(t *testing.T) {
	good := string(parseDef(t, cardDispute).CanonicalJSON())
	for name, src := range map[string]string{
		"unknown field":   strings.Replace(good, `"version":7`, `"version":7,"owner":"x"`, 1),
		"trailing data":   good + "[]",
		"bad budget":      strings.Replace(good, `"max_steps":40`, `"max_steps":0`, 1),
		"instructionsref": strings.Replace(good, `"version":7`, `"version":7,"instructions_ref":"x.md"`, 1),
	} {
		if src == good {
			t.Fatalf("%s: case does not change the input", name)
		}
		if _, err := DefinitionFromJSON([]byte(src)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestGrantedTools(t *testing.T) {
	tools := testTools(t)
	d := parseDef(t, cardDispute)
	if d.Grants("issue_refund") {
		t.Error("an unbound definition grants tools")
	}
	if err := d.Bind(tools); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"issue_refund": true, "send_email": true, "get_ticket": true, "run_python": true, "plot_chart": true,
		"delete_account": false, // core-banking, but not allowed
		"nonexistent":    false,
	} {
		if got := d.Grants(name); got != want {
			t.Errorf("Grants(%q) = %v, want %v", name, got, want)
		}
	}

	tests := []struct {
		name, old, new, want string
	}{
		{"unregistered tool in connector", "raise_dispute,", "raise_chargeback,", `agents/card.yaml:8: agent "card-dispute-assistant": field "tools[0].allow[2]": (connector core-banking): tool "raise_chargeback" is not registered`},
		{"tool of another connector", "allow: [draft_email, send_email]", "allow: [draft_email, send_email, delete_account]", `tool "delete_account" belongs to connector "core-banking", not to connector "email"`},
		{"tool without connector", "allow: [draft_email, send_email]\n  - tool: get_ticket", "allow: [draft_email, send_email, get_ticket]", `tool "get_ticket" belongs to no connector`},
		{"unregistered single tool", "tool: get_ticket", "tool: get_jira_ticket", `agents/card.yaml:11: agent "card-dispute-assistant": field "tools[2]": (tool get_jira_ticket): tool "get_jira_ticket" is not registered`},
		{"empty sandbox", "sandbox: python-analysis", "sandbox: r-analysis", `agents/card.yaml:12: agent "card-dispute-assistant": field "tools[3]": (sandbox r-analysis): no registered tool belongs to sandbox "r-analysis"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := strings.Replace(cardDispute, tt.old, tt.new, 1)
			if src == cardDispute {
				t.Fatal("case does not change the definition")
			}
			d := parseDef(t, src)
			names, err := d.GrantedTools(tools)
			if err == nil || !strings.Contains(err.Error(), tt.want) || names != nil {
				t.Errorf("GrantedTools = %v, %v; want error containing %q", names, err, tt.want)
			}
			if d.Bind(tools) == nil || d.Grants("issue_refund") {
				t.Error("Bind succeeded or granted tools despite an unresolved grant")
			}
			// A stored definition has no file: the grant is named by its path.
			stored, err := DefinitionFromJSON(d.CanonicalJSON())
			if err != nil {
				t.Fatal(err)
			}
			if _, err := stored.GrantedTools(tools); err == nil || !strings.Contains(err.Error(), `agent "card-dispute-assistant" version `) {
				t.Errorf("stored definition: %v", err)
			}
		})
	}
}
