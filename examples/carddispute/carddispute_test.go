package carddispute_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/tool"
)

// The shapes below are this test's own reading of the example files. They
// are strict (unknown fields fail), so a typo in a file shows up here even
// before the platform's parsers see it.

type agentFile struct {
	Agent       string `yaml:"agent"`
	Version     int    `yaml:"version"`
	Description string `yaml:"description"`
	Model       struct {
		Alias string `yaml:"alias"`
		Small string `yaml:"small"`
	} `yaml:"model"`
	Instructions string `yaml:"instructions"`
	Tools        []struct {
		Connector string   `yaml:"connector"`
		Allow     []string `yaml:"allow"`
		Tool      string   `yaml:"tool"`
	} `yaml:"tools"`
	Policies []struct {
		Name string `yaml:"name"`
		When string `yaml:"when"`
		Then string `yaml:"then"`
	} `yaml:"policies"`
	Budgets struct {
		MaxSteps       int     `yaml:"max_steps"`
		MaxInputTokens int64   `yaml:"max_input_tokens"`
		MaxCostINR     float64 `yaml:"max_cost_inr"`
		MaxWallClock   string  `yaml:"max_wall_clock"`
	} `yaml:"budgets"`
}

type modelsFile struct {
	Providers map[string]struct {
		Type   string `yaml:"type"`
		Script string `yaml:"script"`
	} `yaml:"providers"`
	Aliases []struct {
		Name     string `yaml:"name"`
		Provider string `yaml:"provider"`
		ModelID  string `yaml:"model_id"`
		Price    struct {
			Currency          string `yaml:"currency"`
			InputPerMtok      int64  `yaml:"input_per_mtok"`
			OutputPerMtok     int64  `yaml:"output_per_mtok"`
			CacheWritePerMtok int64  `yaml:"cache_write_per_mtok"`
			CacheReadPerMtok  int64  `yaml:"cache_read_per_mtok"`
		} `yaml:"price"`
	} `yaml:"aliases"`
	Rates map[string]float64 `yaml:"rates"`
}

type turnsFile struct {
	Final string       `yaml:"final"`
	Turns []scriptTurn `yaml:"turns"`
}

type scriptTurn struct {
	Text      string `yaml:"text"`
	ToolCalls []struct {
		Name string         `yaml:"name"`
		Args map[string]any `yaml:"args"`
	} `yaml:"tool_calls"`
	Branches []struct {
		If    string       `yaml:"if_tool_result_contains"`
		Turns []scriptTurn `yaml:"turns"`
	} `yaml:"branches"`
}

// allTurns lists turns and, after each, the turns of its branches.
func allTurns(ts []scriptTurn) []scriptTurn {
	var out []scriptTurn
	for _, t := range ts {
		out = append(out, t)
		for _, b := range t.Branches {
			out = append(out, allTurns(b.Turns)...)
		}
	}
	return out
}

type toolDoc struct {
	Name        string         `yaml:"name"`
	Description string         `yaml:"description"`
	Connector   string         `yaml:"connector"`
	Tier        int            `yaml:"tier"`
	TimeoutMS   int            `yaml:"timeout_ms"`
	InputSchema map[string]any `yaml:"input_schema"`
	Network     struct {
		Allow []string `yaml:"allow"`
	} `yaml:"network"`
	Auth struct {
		Mode   string   `yaml:"mode"`
		Scopes []string `yaml:"scopes"`
	} `yaml:"auth"`
	RateLimit         string             `yaml:"rate_limit"`
	Approval          string             `yaml:"approval"`
	ApprovalThreshold map[string]float64 `yaml:"approval_threshold"`
	ApprovalGroup     string             `yaml:"approval_group"`
	SideEffects       string             `yaml:"side_effects"`
	UntrustedOutput   bool               `yaml:"untrusted_output"`
}

func read(t *testing.T, name string) []byte {
	t.Helper()
	b, err := carddispute.ReadFile(name)
	if err != nil {
		t.Fatalf("ReadFile(%s): %v", name, err)
	}
	return b
}

// decodeAll decodes every YAML document of data strictly into new Ts.
func decodeAll[T any](t *testing.T, name string, data []byte) []T {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var out []T
	for {
		var v T
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", name, len(out)+1, err)
		}
		out = append(out, v)
	}
}

func decodeOne[T any](t *testing.T, name string) T {
	t.Helper()
	docs := decodeAll[T](t, name, read(t, name))
	if len(docs) != 1 {
		t.Fatalf("%s: %d YAML documents, want 1", name, len(docs))
	}
	return docs[0]
}

func TestEmbeddedFiles(t *testing.T) {
	for _, name := range []string{carddispute.AgentFile, carddispute.ToolsFile, carddispute.TurnsFile, carddispute.ModelsFile, carddispute.ReadmeFile, "files/agent.yaml"} {
		if b := read(t, name); len(b) == 0 {
			t.Errorf("%s is empty", name)
		}
	}
	if _, err := carddispute.ReadFile("nope.yaml"); err == nil {
		t.Error("ReadFile(nope.yaml): want an error")
	}
	if _, err := carddispute.ReadFile("bank/bank.go"); err == nil {
		t.Error("ReadFile(bank/bank.go): want an error")
	}
	yamls, err := fs.Glob(carddispute.FS(), "*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"agent.yaml", "models.yaml", "tools.yaml", "turns.yaml"}; !reflect.DeepEqual(yamls, want) {
		t.Fatalf("embedded YAML files = %v, want %v", yamls, want)
	}
	// Every file is well-formed YAML, read generically.
	for _, name := range yamls {
		b, _ := fs.ReadFile(carddispute.FS(), name)
		docs := decodeAllGeneric(t, name, b)
		if len(docs) == 0 {
			t.Errorf("%s holds no YAML document", name)
		}
		for i, d := range docs {
			if _, ok := d.(map[string]any); !ok {
				t.Errorf("%s: document %d is %T, want a mapping", name, i+1, d)
			}
		}
	}
}

func decodeAllGeneric(t *testing.T, name string, data []byte) []any {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		out = append(out, v)
	}
}

// expectedTools is the contract the brief sets for each tool.
var expectedTools = map[string]struct {
	connector, sideEffects string
	untrusted              bool
	scope                  string
}{
	bank.ToolGetTicket:           {"support-desk", tool.SideEffectsNone, true, "tickets:read"},
	bank.ToolGetCustomerProfile:  {"core-banking", tool.SideEffectsNone, false, "customers:read"},
	bank.ToolGetCardTransactions: {"core-banking", tool.SideEffectsNone, false, "transactions:read"},
	bank.ToolRaiseDispute:        {"core-banking", tool.SideEffectsExternal, false, "disputes:write"},
	bank.ToolIssueRefund:         {"core-banking", tool.SideEffectsExternal, false, "refunds:write"},
	bank.ToolDraftEmail:          {"email", tool.SideEffectsNone, false, "email:draft"},
	bank.ToolSendEmail:           {"email", tool.SideEffectsExternal, false, "email:send"},
}

func TestToolsYAML(t *testing.T) {
	docs := decodeAll[toolDoc](t, carddispute.ToolsFile, read(t, carddispute.ToolsFile))
	var names []string
	for _, d := range docs {
		names = append(names, d.Name)
		want, ok := expectedTools[d.Name]
		if !ok {
			t.Errorf("unexpected tool %q", d.Name)
			continue
		}
		if d.Connector != want.connector || d.SideEffects != want.sideEffects || d.UntrustedOutput != want.untrusted {
			t.Errorf("%s: connector %q side_effects %q untrusted %v; want %q %q %v",
				d.Name, d.Connector, d.SideEffects, d.UntrustedOutput, want.connector, want.sideEffects, want.untrusted)
		}
		if d.Tier != 1 || d.TimeoutMS <= 0 || d.Description == "" || d.RateLimit == "" || len(d.Network.Allow) == 0 {
			t.Errorf("%s: incomplete manifest %+v", d.Name, d)
		}
		if d.Auth.Mode != "on_behalf_of_user" || !slices.Contains(d.Auth.Scopes, want.scope) {
			t.Errorf("%s: auth %+v, want on_behalf_of_user with %s", d.Name, d.Auth, want.scope)
		}
		s := d.InputSchema
		if s["type"] != "object" || s["additionalProperties"] != false {
			t.Errorf("%s: input_schema must be a closed object: %v", d.Name, s)
		}
		props, _ := s["properties"].(map[string]any)
		req, _ := s["required"].([]any)
		if len(req) == 0 {
			t.Errorf("%s: input_schema lists no required fields", d.Name)
		}
		for _, r := range req {
			if _, ok := props[r.(string)]; !ok {
				t.Errorf("%s: required field %v is not a property", d.Name, r)
			}
		}
	}
	slices.Sort(names)
	if !reflect.DeepEqual(names, bank.ToolNames()) {
		t.Fatalf("tools.yaml declares %v; the bank registers %v", names, bank.ToolNames())
	}

	// Every declared tool is registered by the bank, and nothing else is.
	b, err := bank.Open(filepath.Join(t.TempDir(), "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cat := tool.NewCatalog()
	if err := b.Register(cat); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, ok := cat.Lookup(n); !ok {
			t.Errorf("tool %s is declared in tools.yaml but not registered by bank.Register", n)
		}
	}
	if !reflect.DeepEqual(cat.Names(), names) {
		t.Errorf("catalog holds %v, tools.yaml declares %v", cat.Names(), names)
	}
}

func TestRefundRule(t *testing.T) {
	for _, d := range decodeAll[toolDoc](t, carddispute.ToolsFile, read(t, carddispute.ToolsFile)) {
		switch d.Name {
		case bank.ToolIssueRefund:
			if d.Approval != "required_above" || d.ApprovalThreshold["amount_inr"] != 10000 || d.ApprovalGroup != "card-ops-supervisors" {
				t.Errorf("issue_refund approval: %q %v %q", d.Approval, d.ApprovalThreshold, d.ApprovalGroup)
			}
		default:
			if d.Approval != "never" || d.ApprovalThreshold != nil {
				t.Errorf("%s: approval %q %v, want never", d.Name, d.Approval, d.ApprovalThreshold)
			}
		}
	}
}

func TestAgentYAML(t *testing.T) {
	a := decodeOne[agentFile](t, carddispute.AgentFile)
	if a.Agent != "card-dispute-assistant" || a.Version != 1 || a.Description == "" || len(a.Instructions) < 200 {
		t.Errorf("agent header: %q v%d", a.Agent, a.Version)
	}
	if d, err := time.ParseDuration(a.Budgets.MaxWallClock); err != nil || d != 2*time.Hour {
		t.Errorf("max_wall_clock %q", a.Budgets.MaxWallClock)
	}
	if a.Budgets.MaxSteps != 40 || a.Budgets.MaxInputTokens != 1_500_000 || a.Budgets.MaxCostINR != 150 {
		t.Errorf("budgets = %+v", a.Budgets)
	}

	// Grants name real tools of the right connector, and cover them all.
	connectorOf := map[string]string{}
	for _, d := range decodeAll[toolDoc](t, carddispute.ToolsFile, read(t, carddispute.ToolsFile)) {
		connectorOf[d.Name] = d.Connector
	}
	granted := map[string]bool{}
	for _, g := range a.Tools {
		switch {
		case g.Connector != "" && g.Tool == "":
			for _, n := range g.Allow {
				if connectorOf[n] != g.Connector {
					t.Errorf("grant of connector %s allows %s, whose connector is %q", g.Connector, n, connectorOf[n])
				}
				granted[n] = true
			}
		case g.Tool != "" && g.Connector == "" && g.Allow == nil:
			if _, ok := connectorOf[g.Tool]; !ok {
				t.Errorf("grant of unknown tool %s", g.Tool)
			}
			granted[g.Tool] = true
		default:
			t.Errorf("grant %+v: want either connector+allow or tool", g)
		}
	}
	if len(granted) != len(connectorOf) {
		t.Errorf("granted %v; tools.yaml declares %v", granted, connectorOf)
	}

	names := map[string]bool{}
	for _, p := range a.Policies {
		names[p.Name] = true
		if p.When == "" || !strings.HasPrefix(p.Then, "require_approval(") && !strings.HasPrefix(p.Then, "deny(") {
			t.Errorf("policy %+v", p)
		}
	}
	if !names["refund-needs-supervisor"] || !names["tainted-external-email"] {
		t.Errorf("policies = %v", names)
	}

	// The agent's model aliases exist.
	m := decodeOne[modelsFile](t, carddispute.ModelsFile)
	aliases := map[string]bool{}
	for _, al := range m.Aliases {
		aliases[al.Name] = true
	}
	for _, want := range []string{a.Model.Alias, a.Model.Small} {
		if !aliases[want] {
			t.Errorf("agent uses model alias %q, models.yaml defines %v", want, aliases)
		}
	}
}

func TestModelsYAML(t *testing.T) {
	m := decodeOne[modelsFile](t, carddispute.ModelsFile)
	p, ok := m.Providers["scripted"]
	if !ok || p.Type != "scripted" || p.Script != carddispute.TurnsFile {
		t.Fatalf("providers = %+v", m.Providers)
	}
	if _, err := fs.Stat(carddispute.FS(), p.Script); err != nil {
		t.Errorf("provider script %s: %v", p.Script, err)
	}
	type price struct{ in, out, cw, cr int64 }
	want := map[string]price{
		"reasoning-standard": {2_000_000, 10_000_000, 2_500_000, 200_000},
		"reasoning-small":    {100_000, 500_000, 125_000, 10_000},
	}
	if len(m.Aliases) != len(want) {
		t.Fatalf("%d aliases, want %d", len(m.Aliases), len(want))
	}
	for _, a := range m.Aliases {
		w, ok := want[a.Name]
		got := price{a.Price.InputPerMtok, a.Price.OutputPerMtok, a.Price.CacheWritePerMtok, a.Price.CacheReadPerMtok}
		if !ok || got != w || a.Price.Currency != "USD" || a.Provider != "scripted" || a.ModelID == "" {
			t.Errorf("alias %+v", a)
		}
	}
	if m.Rates["USD_INR"] != 88 {
		t.Errorf("rates = %v", m.Rates)
	}
}

func TestTurnsYAML(t *testing.T) {
	s := decodeOne[turnsFile](t, carddispute.TurnsFile)
	declared := map[string]bool{}
	for _, d := range decodeAll[toolDoc](t, carddispute.ToolsFile, read(t, carddispute.ToolsFile)) {
		declared[d.Name] = true
	}
	var calls []string
	for i, turn := range s.Turns {
		if turn.Text == "" {
			t.Errorf("turn %d has no text", i)
		}
		for _, c := range turn.ToolCalls {
			if !declared[c.Name] {
				t.Errorf("turn %d calls %s, which tools.yaml does not declare", i, c.Name)
			}
			calls = append(calls, c.Name)
		}
	}
	want := []string{"get_ticket", "get_customer_profile", "get_card_transactions", "raise_dispute", "issue_refund", "draft_email", "send_email"}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("scripted calls %v, want %v", calls, want)
	}
	if last := s.Turns[len(s.Turns)-1]; len(last.ToolCalls) != 0 || !strings.Contains(last.Text, "T-40127") {
		t.Errorf("last turn must be a text-only summary: %+v", last)
	}
	if s.Final == "" {
		t.Error("no final text for a budget stop")
	}
	// The refund's approval is a decision point: refused, the model says
	// no refund was issued, in the e-mail and in its summary.
	if br := s.Turns[4].Branches; len(br) != 1 || br[0].If != `"control":"approval"` || len(br[0].Turns) == 0 {
		t.Fatalf("turn 4 (after the refund) must branch on a refused approval: %+v", br)
	} else {
		rej := br[0].Turns
		if sum := rej[len(rej)-1]; len(sum.ToolCalls) != 0 || !strings.Contains(sum.Text, "no refund was issued") {
			t.Errorf("the rejection path's summary must say no refund was issued: %q", sum.Text)
		}
		for _, turn := range rej {
			if strings.Contains(turn.Text, "refund has been issued") || strings.Contains(fmt.Sprint(turn.ToolCalls), "refunded Rs") {
				t.Errorf("the rejection path claims a refund: %+v", turn)
			}
		}
	}
	// The careful model never does what the injected note asks, on any path.
	raw := string(read(t, carddispute.TurnsFile))
	for _, turn := range allTurns(s.Turns) {
		for _, c := range turn.ToolCalls {
			if c.Args["to"] == bank.InjectionRecipient || c.Args["transaction_id"] == bank.OtherCustomerTxn || c.Args["customer_id"] == bank.OtherCustomerID {
				t.Errorf("scripted call follows the injection: %s %v", c.Name, c.Args)
			}
		}
	}
	if !strings.Contains(raw, "amount_inr: 12499") {
		t.Error("the refund is not for 12499")
	}
}
