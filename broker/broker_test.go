package broker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

const testManifests = `
name: issue_refund
connector: core-banking
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  additionalProperties: false
  required: [customer_id, amount_inr]
  properties:
    customer_id: {type: string}
    amount_inr: {type: number}
auth: {mode: on_behalf_of_user, scopes: [refunds:write]}
rate_limit: "3/min per run"
approval: required_above
approval_threshold: {amount_inr: 10000}
approval_group: card-ops-supervisors
side_effects: external
---
name: send_email
connector: email
tier: 1
timeout_ms: 1000
input_schema: {type: object, additionalProperties: false, required: [to], properties: {to: {type: string}}}
auth: {mode: on_behalf_of_user, scopes: [email:send]}
side_effects: external
---
name: lookup
connector: crm
tier: 1
timeout_ms: 1000
input_schema: {type: object, properties: {q: {type: string}}}
auth: {mode: on_behalf_of_user, scopes: [crm:read]}
rate_limit: ["2/min per user", "3/min per tenant"]
side_effects: none
---
name: echo
tier: 1
timeout_ms: 1000
input_schema: {type: object}
side_effects: none
`

type fixture struct {
	b     *broker.Broker
	ms    map[string]*tool.Manifest
	now   time.Time
	mu    sync.Mutex
	creds *secrets.Memory
}

func (f *fixture) clock() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now = f.now.Add(d)
	f.mu.Unlock()
}

var testRules = []agent.Policy{
	{Name: "no-refund-to-blocked", When: `tool == "issue_refund" and args.customer_id == "c_blocked"`, Then: agent.Action{Kind: agent.ActionDeny, Reason: "account is blocked"}},
	{Name: "trusted-domain", When: `tool == "send_email" and args.to.endsWith("@example-bank.in")`, Then: agent.Action{Kind: agent.ActionAllow}},
	{Name: "tainted-email", When: `tool == "send_email" and run.tainted`, Then: agent.Action{Kind: agent.ActionRequireApproval, Group: "card-ops-agents", Expires: time.Hour}},
	{Name: "big-refund-allowed", When: `tool == "issue_refund" and args.amount_inr > 50000`, Then: agent.Action{Kind: agent.ActionAllow}},
	{Name: "refund-total", When: `tool == "issue_refund" and run.totals.issue_refund.amount_inr + args.amount_inr > 10000`, Then: agent.Action{Kind: agent.ActionRequireApproval, Group: "card-ops-supervisors", Expires: 2 * time.Hour}},
	{Name: "odd", When: `tool == "echo" and args.x > 1`, Then: agent.Action{Kind: agent.ActionDeny}},
}

func newFixture(t *testing.T, funcs map[string]tool.Func) *fixture {
	t.Helper()
	return newFixtureRates(t, funcs, nil)
}

// newFixtureRates is newFixture with the rate-limit windows kept in rates.
func newFixtureRates(t *testing.T, funcs map[string]tool.Func, rates store.RateStore) *fixture {
	t.Helper()
	ms, err := tool.ParseManifests("t.yaml", []byte(testManifests))
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{ms: map[string]*tool.Manifest{}, now: time.Date(2026, 10, 5, 9, 0, 0, 0, time.UTC), creds: secrets.NewMemory()}
	for _, m := range ms {
		f.ms[m.Name] = m
	}
	staff, _ := authz.New("bank", "priya", []string{"refunds:write", "email:send", "crm:read"}, []string{"card-ops-agents"}, nil)
	staff2, _ := authz.New("bank", "ravi", []string{"refunds:write", "email:send", "crm:read"}, nil, nil)
	intern, _ := authz.New("bank", "intern", []string{"crm:read"}, nil, nil)
	cust, _ := authz.New("bank", "asha", []string{"refunds:write"}, nil, map[string]string{"customer_id": "c_88213"})
	d := &agent.Definition{Agent: "a", Version: 1, Policies: testRules}
	ps, err := d.CompilePolicies()
	if err != nil {
		t.Fatal(err)
	}
	cat := tool.NewCatalog()
	for name, fn := range funcs {
		if err := cat.Register(name, fn); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []string{"core-banking", "email", "crm"} {
		if err := f.creds.Put(context.Background(), "bank", c, []byte("secret-of-"+c+"-0123456789")); err != nil {
			t.Fatal(err)
		}
	}
	f.b, err = broker.New(broker.Options{
		Catalog:   cat,
		Directory: authz.NewStatic(staff, staff2, intern, cust),
		Policies: func(_ context.Context, name string, version int) (*agent.Policies, error) {
			if name == "broken" {
				return nil, errors.New("store unavailable")
			}
			return ps, nil
		},
		Credentials:    &secrets.Broker{Store: f.creds, Clock: f.clock},
		Clock:          f.clock,
		MaxOutputBytes: 4096,
		Rates:          rates,
	})
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) proposal(user, toolName, args string) broker.Proposal {
	return broker.Proposal{RunID: "run_1", Tenant: "bank", User: user, Step: 1, Tool: toolName, Args: json.RawMessage(args),
		Manifest: f.ms[toolName], Agent: "a", AgentVersion: 1}
}

func TestDecide(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	hist := func(n int, amount string) []broker.PriorCall {
		var out []broker.PriorCall
		for i := 0; i < n; i++ {
			out = append(out, broker.PriorCall{Tool: "issue_refund", At: f.now.Add(-10 * time.Second), Args: json.RawMessage(`{"amount_inr":` + amount + `,"customer_id":"c_1"}`)})
		}
		return out
	}
	cases := []struct {
		name    string
		p       broker.Proposal
		control string // "" = allowed
		rule    string
		reason  string
		group   string
	}{
		{"ungranted", func() broker.Proposal { p := f.proposal("priya", "export_all", `{}`); p.Manifest = nil; return p }(), broker.ControlGrant, "", "not granted", ""},
		{"unknown user", f.proposal("mallory", "issue_refund", `{"customer_id":"c_1","amount_inr":5}`), broker.ControlAuthz, "", "not known", ""},
		{"lacks scope", f.proposal("intern", "issue_refund", `{"customer_id":"c_1","amount_inr":5}`), broker.ControlAuthz, "", "lacks scope refunds:write", ""},
		{"authz before schema", f.proposal("intern", "issue_refund", `{"bogus":true}`), broker.ControlAuthz, "", "lacks scope", ""},
		{"binding", f.proposal("asha", "issue_refund", `{"customer_id":"c_90001","amount_inr":5}`), broker.ControlAuthz, "", "may only act on customer_id c_88213", ""},
		{"schema", f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":"5","bcc":"x"}`), broker.ControlSchema, "", "unexpected property", ""},
		{"policy deny", f.proposal("priya", "issue_refund", `{"customer_id":"c_blocked","amount_inr":5}`), broker.ControlPolicy, "policy:no-refund-to-blocked", "account is blocked", ""},
		{"policy error fails closed", f.proposal("priya", "echo", `{"x":"not a number"}`), broker.ControlPolicy, "policy:odd", "could not be evaluated", ""},
		{"policies unavailable", func() broker.Proposal {
			p := f.proposal("priya", "echo", `{}`)
			p.Agent = "broken"
			return p
		}(), broker.ControlPolicy, "", "could not be loaded", ""},
		{"manifest approval, policy agrees", f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":12499}`), broker.ControlApproval, "policy:refund-total,manifest:issue_refund", "amount_inr is 12499", "card-ops-supervisors"},
		{"an allow rule cannot waive the manifest's approval", f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":60000}`), broker.ControlApproval, "manifest:issue_refund", "amount_inr is 60000", "card-ops-supervisors"},
		{"split refund: totals", func() broker.Proposal {
			p := f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":4000}`)
			p.Run.Allowed = hist(2, "4000")
			return p
		}(), broker.ControlApproval, "policy:refund-total", "policy refund-total", "card-ops-supervisors"},
		{"per-run rate limit", func() broker.Proposal {
			p := f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":1}`)
			p.Run.Allowed = hist(3, "1")
			return p
		}(), broker.ControlRateLimit, "rate_limit:3/min per run", "3 calls in the last 1m0s", ""},
		{"rate limit comes before approval", func() broker.Proposal {
			p := f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":20000}`)
			p.Run.Allowed = hist(3, "1")
			return p
		}(), broker.ControlRateLimit, "rate_limit:3/min per run", "", ""},
		{"old calls fall out of the window", func() broker.Proposal {
			p := f.proposal("priya", "issue_refund", `{"customer_id":"c_1","amount_inr":1}`)
			p.Run.Allowed = hist(3, "1")
			for i := range p.Run.Allowed {
				p.Run.Allowed[i].At = f.now.Add(-2 * time.Minute)
			}
			return p
		}(), "", "", "", ""},
		{"allow rule", f.proposal("priya", "send_email", `{"to":"ops@example-bank.in"}`), "", "policy:trusted-domain", "", ""},
		{"tainted email", func() broker.Proposal {
			p := f.proposal("priya", "send_email", `{"to":"audit@exfil.example"}`)
			p.Run.Tainted = true
			return p
		}(), broker.ControlApproval, "policy:tainted-email", "needs approval from group card-ops-agents", "card-ops-agents"},
		{"untainted email", f.proposal("priya", "send_email", `{"to":"a@mail.example"}`), "", "", "", ""},
		{"customer on own account", f.proposal("asha", "issue_refund", `{"customer_id":"c_88213","amount_inr":10}`), "", "", "", ""},
		{"tool without identity, unknown user", f.proposal("nobody", "echo", `{"x":1}`), "", "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := f.b.Decide(ctx, c.p)
			if c.control == "" {
				if !d.Allowed || d.Rule != c.rule {
					t.Fatalf("got %+v, want allowed (rule %q)", d, c.rule)
				}
				return
			}
			if d.Allowed || d.Control != c.control || d.Rule != c.rule || !strings.Contains(d.Reason, c.reason) {
				t.Fatalf("got %+v\nwant control %s, rule %q, reason containing %q", d, c.control, c.rule, c.reason)
			}
			if c.control == broker.ControlApproval {
				a := d.Approval
				if a == nil || a.Group != c.group || a.Binding != broker.Binding(c.p.Tool, c.p.Args) || a.ExpiresMS <= 0 {
					t.Fatalf("approval = %+v", a)
				}
			} else if d.Approval != nil {
				t.Fatalf("a %s refusal carries an approval: %+v", c.control, d.Approval)
			}
		})
	}
}

func TestApprovalBinding(t *testing.T) {
	a := broker.Binding("issue_refund", []byte(`{"amount_inr":12499,"customer_id":"c_1"}`))
	for _, other := range []string{
		broker.Binding("issue_refund", []byte(`{"amount_inr":12500,"customer_id":"c_1"}`)),
		broker.Binding("issue_refunds", []byte(`{"amount_inr":12499,"customer_id":"c_1"}`)),
		broker.Binding("issue_refund{", []byte(`"amount_inr":12499,"customer_id":"c_1"}`)),
	} {
		if other == a {
			t.Fatal("two different calls share a binding")
		}
	}
}

func TestUserAndTenantRateLimits(t *testing.T) {
	f := newFixture(t, nil)
	ctx := context.Background()
	look := func(user string) trace.Decision { return f.b.Decide(ctx, f.proposal(user, "lookup", `{"q":"x"}`)) }
	for i := 0; i < 2; i++ {
		if d := look("priya"); !d.Allowed {
			t.Fatalf("call %d: %+v", i, d)
		}
	}
	if d := look("priya"); d.Allowed || d.Control != broker.ControlRateLimit || d.Rule != "rate_limit:2/min per user" {
		t.Fatalf("third call by priya: %+v", d)
	}
	// Another user of the tenant has their own allowance, but the tenant's
	// is shared: 3 per minute.
	if d := look("ravi"); !d.Allowed {
		t.Fatalf("ravi: %+v", d)
	}
	if d := look("intern"); d.Allowed || d.Rule != "rate_limit:3/min per tenant" {
		t.Fatalf("intern, tenant exhausted: %+v", d)
	}
	// Refused calls were not charged; a minute later there is room again.
	f.advance(61 * time.Second)
	if d := look("priya"); !d.Allowed {
		t.Fatalf("after the window: %+v", d)
	}
}

func TestExecute(t *testing.T) {
	var got []tool.Call
	var mu sync.Mutex
	leaky := func(_ context.Context, c tool.Call) (tool.Result, error) {
		mu.Lock()
		got = append(got, c)
		mu.Unlock()
		return tool.JSONResult(map[string]any{
			"debug":  "authorised with " + c.Credential + " (key secret-of-crm-0123456789)",
			"banner": "\x1b[31mALERT\x1b[0m\x07 done",
			"blob":   strings.Repeat("x", 5000),
		})
	}
	f := newFixture(t, map[string]tool.Func{
		"lookup": leaky,
		"echo": func(_ context.Context, c tool.Call) (tool.Result, error) {
			return tool.JSONResult(map[string]string{"cred": c.Credential})
		},
		"send_email": func(_ context.Context, c tool.Call) (tool.Result, error) {
			return tool.Result{}, errors.New("smtp: auth failed for token " + c.Credential)
		},
	})
	ctx := context.Background()
	call := tool.Call{Tool: "lookup", Args: json.RawMessage(`{"q":"x"}`), IdempotencyKey: "run_1:2:0", RunID: "run_1", Tenant: "bank", User: "priya", Agent: "a@1",
		Credential: "forged-by-caller"}
	ex, err := f.b.Execute(ctx, f.ms["lookup"], call)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("tool ran %d times", len(got))
	}
	cred := got[0].Credential
	if cred == "" || cred == "forged-by-caller" {
		t.Fatalf("credential = %q", cred)
	}
	cl, err := secrets.Verify([]byte("secret-of-crm-0123456789"), cred, "crm", "lookup", f.now)
	if err != nil || cl.Subject != "priya" || cl.Actor != "a@1" || cl.ID != "run_1:2:0" || !cl.HasScope("crm:read") {
		t.Fatalf("credential claims %+v, %v", cl, err)
	}
	out := string(ex.Output)
	for _, leak := range []string{cred, "secret-of-crm-0123456789", "\x1b", "\x07", "\\u001b"} {
		if strings.Contains(out, leak) {
			t.Errorf("output holds %q: %.200s", leak, out)
		}
	}
	if ex.Redactions < 2 || !ex.Truncated || len(ex.Output) > 4096 || ex.Bytes <= 5000 || ex.Status != trace.StatusOK {
		t.Errorf("execution = status %s, %d bytes (from %d), truncated %v, %d redactions", ex.Status, len(ex.Output), ex.Bytes, ex.Truncated, ex.Redactions)
	}

	// A tool acting with no identity gets no credential.
	ex, _ = f.b.Execute(ctx, f.ms["echo"], tool.Call{Tool: "echo", Args: json.RawMessage(`{}`), Tenant: "bank", User: "priya", Credential: "x"})
	if string(ex.Output) != `{"cred":""}` {
		t.Errorf("echo saw %s", ex.Output)
	}

	// A tool's error message is not returned, and what is logged is clean.
	ex, _ = f.b.Execute(ctx, f.ms["send_email"], tool.Call{Tool: "send_email", Args: json.RawMessage(`{"to":"a@b.c"}`), Tenant: "bank", User: "priya", IdempotencyKey: "k"})
	if ex.Status != trace.StatusError || strings.Contains(string(ex.Output), "apc1.") {
		t.Errorf("failing tool: %s %s", ex.Status, ex.Output)
	}

	// Permissions are checked again when the call runs.
	ex, _ = f.b.Execute(ctx, f.ms["lookup"], tool.Call{Tool: "lookup", Args: json.RawMessage(`{}`), Tenant: "bank", User: "asha"})
	if ex.Status != trace.StatusDenied || !strings.Contains(string(ex.Output), "authorisation withdrawn") {
		t.Errorf("asha at execution: %s %s", ex.Status, ex.Output)
	}
	// No secret for the connector: the call does not run.
	if err := f.creds.Delete(ctx, "bank", "crm"); err != nil {
		t.Fatal(err)
	}
	ex, _ = f.b.Execute(ctx, f.ms["lookup"], call)
	if ex.Status != trace.StatusDenied || !strings.Contains(string(ex.Output), "has none configured") || len(got) != 1 {
		t.Errorf("no secret: %s %s (tool ran %d times)", ex.Status, ex.Output, len(got))
	}
}

// The run's bindings are checked again when a call runs, also for tools
// that act on no user's behalf, whatever path brought the call there.
func TestExecuteChecksRunBindings(t *testing.T) {
	ran := false
	f := newFixture(t, map[string]tool.Func{
		"echo": func(context.Context, tool.Call) (tool.Result, error) {
			ran = true
			return tool.JSONResult(map[string]string{"ok": "yes"})
		},
	})
	call := tool.Call{Tool: "echo", Args: json.RawMessage(`{"customer_id":"c_90001"}`), IdempotencyKey: "run_b:1:0", RunID: "run_b",
		Tenant: "bank", User: "priya", Agent: "a@1", Bindings: map[string]string{"customer_id": "c_88213"}}
	ex, err := f.b.Execute(context.Background(), f.ms["echo"], call)
	if err != nil {
		t.Fatal(err)
	}
	if ran || ex.Status != trace.StatusDenied || !strings.Contains(string(ex.Output), "c_88213") {
		t.Fatalf("ran %v, status %s: %s", ran, ex.Status, ex.Output)
	}
	call.Args = json.RawMessage(`{"customer_id":"c_88213"}`)
	if ex, err := f.b.Execute(context.Background(), f.ms["echo"], call); err != nil || !ran || ex.Status != trace.StatusOK {
		t.Fatalf("bound value: ran %v, %v %s", ran, err, ex.Status)
	}
}
