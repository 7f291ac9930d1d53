package authz_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/store/sqlite"
	"github.com/agentplane/agentplane/tool"
)

const manifests = `
name: issue_refund
tier: 1
timeout_ms: 1000
input_schema: {type: object, properties: {customer_id: {type: string}, amount_inr: {type: number}}}
auth: {mode: on_behalf_of_user, scopes: [refunds:write, customers:read]}
side_effects: external
---
name: lookup
tier: 1
timeout_ms: 1000
input_schema: {type: object}
auth: {mode: service, scopes: [directory:read]}
side_effects: none
---
name: echo
tier: 1
timeout_ms: 1000
input_schema: {type: object}
side_effects: none
`

func tools(t *testing.T) map[string]*tool.Manifest {
	t.Helper()
	ms, err := tool.ParseManifests("t.yaml", []byte(manifests))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tool.Manifest{}
	for _, m := range ms {
		out[m.Name] = m
	}
	return out
}

func must(t *testing.T) func(*authz.Principal, error) *authz.Principal {
	return func(p *authz.Principal, err error) *authz.Principal {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
}

func TestAuthorize(t *testing.T) {
	ms := tools(t)
	staff := must(t)(authz.New("bank", "priya@bank.in", []string{"refunds:write", "customers:read", "directory:read"}, []string{"card-ops-agents"}, nil))
	intern := must(t)(authz.New("bank", "intern", []string{"customers:read"}, nil, nil))
	customer := must(t)(authz.New("bank", "asha", []string{"refunds:write", "customers:read"}, nil, map[string]string{"customer_id": "c_88213"}))
	cases := []struct {
		name string
		p    *authz.Principal
		user string
		tool string
		args string
		deny string
	}{
		{"staff refunds", staff, "priya@bank.in", "issue_refund", `{"customer_id":"c_90001"}`, ""},
		{"intern lacks a scope", intern, "intern", "issue_refund", `{"customer_id":"c_1"}`, "lacks scope refunds:write"},
		{"unknown user, authenticated tool", nil, "mallory", "issue_refund", `{}`, "not known in tenant"},
		{"unknown user, tool without identity", nil, "mallory", "echo", `{}`, ""},
		{"service mode still needs the user's scope", intern, "intern", "lookup", `{}`, "lacks scope directory:read"},
		{"customer on own account", customer, "asha", "issue_refund", `{"customer_id":"c_88213"}`, ""},
		{"customer on another account", customer, "asha", "issue_refund", `{"customer_id":"c_90001"}`, `may only act on customer_id c_88213, and this call names "c_90001"`},
		{"binding compares strings only", customer, "asha", "issue_refund", `{"customer_id":88213}`, "may only act on"},
		{"binding ignores absent arguments", customer, "asha", "echo", `{"x":1}`, ""},
		{"principal of someone else", staff, "other", "echo", `{}`, "is not the run's user"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := authz.Authorize("bank", c.user, c.p, ms[c.tool], []byte(c.args))
			if c.deny == "" {
				if err != nil {
					t.Fatalf("denied: %v", err)
				}
				return
			}
			var d *authz.Denied
			if !errors.As(err, &d) || !strings.Contains(d.Reason, c.deny) {
				t.Fatalf("got %v, want a denial mentioning %q", err, c.deny)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	for _, bad := range []struct {
		tenant, user string
		scopes       []string
		groups       []string
		bindings     map[string]string
	}{
		{"", "u", nil, nil, nil},
		{"t", "has space", nil, nil, nil},
		{"t", "u", []string{"Refunds:Write"}, nil, nil},
		{"t", "u", []string{"refunds"}, nil, nil},
		{"t", "u", nil, []string{"Ops"}, nil},
		{"t", "u", nil, nil, map[string]string{"a b": "x"}},
		{"t", "u", nil, nil, map[string]string{"customer_id": ""}},
	} {
		if _, err := authz.New(bad.tenant, bad.user, bad.scopes, bad.groups, bad.bindings); err == nil {
			t.Errorf("New(%+v) accepted", bad)
		}
	}
	p := must(t)(authz.New("t", "u", []string{"b:x", "a:y", "b:x"}, []string{"g2", "g1"}, nil))
	if strings.Join(p.Scopes, ",") != "a:y,b:x" || !p.InGroup("g1") || p.InGroup("g3") || !p.HasScope("b:x") {
		t.Errorf("normalised = %+v", p)
	}
}

func TestDirectories(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Options{Dir: filepath.Join(t.TempDir(), "data")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	p := must(t)(authz.New("bank", "asha", []string{"tickets:read"}, []string{"customers"}, map[string]string{"customer_id": "c_88213"}))
	if err := authz.Put(ctx, st, p); err != nil {
		t.Fatal(err)
	}
	if err := authz.Put(ctx, st, &authz.Principal{Tenant: "bank", User: "x", Scopes: []string{"BAD"}}); err == nil {
		t.Error("Put stored an invalid scope")
	}
	for name, d := range map[string]authz.Directory{"store": authz.FromStore(st), "static": authz.NewStatic(p)} {
		got, err := d.Principal(ctx, "bank", "asha")
		if err != nil || !got.HasScope("tickets:read") || !got.InGroup("customers") || got.Bindings["customer_id"] != "c_88213" {
			t.Errorf("%s: %+v, %v", name, got, err)
		}
		if _, err := d.Principal(ctx, "other-tenant", "asha"); !errors.Is(err, authz.ErrUnknownUser) {
			t.Errorf("%s: user of another tenant: %v", name, err)
		}
	}
}

// A bound argument cannot be dodged by a name that only differs in case or
// by a Unicode fold: encoding/json would hand that value to the tool.
func TestBindingsCannotBeDodgedByCase(t *testing.T) {
	run := map[string]string{"customer_id": "c_88213"}
	for _, args := range []string{
		`{"customer_id":"c_88213","cuſtomer_id":"c_99999"}`,
		`{"Customer_ID":"c_99999"}`,
		`{"CUSTOMER_ID":"c_88213","customer_id":"c_88213"}`,
	} {
		if err := authz.AuthorizeRun(run, json.RawMessage(args)); err == nil {
			t.Errorf("%s passed the run binding", args)
		}
		p := &authz.Principal{Tenant: "t", User: "u", Bindings: run}
		m := &tool.Manifest{Name: "x"}
		if err := authz.Authorize("t", "u", p, m, json.RawMessage(args)); err == nil {
			t.Errorf("%s passed the user binding", args)
		}
	}
	if err := authz.AuthorizeRun(run, json.RawMessage(`{"customer_id":"c_88213","note":"x"}`)); err != nil {
		t.Errorf("the bound value was refused: %v", err)
	}
	if err := authz.AuthorizeRun(run, json.RawMessage(`{"customer_id":"c_1"}`)); err == nil {
		t.Error("another customer passed")
	}
}

func TestCheckRunBindings(t *testing.T) {
	p := &authz.Principal{Tenant: "t", User: "u", Bindings: map[string]string{"customer_id": "c_1"}}
	if err := authz.CheckRunBindings(p, map[string]string{"customer_id": "c_1", "region": "in"}); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []map[string]string{
		{"customer_id": "c_2"},               // contradicts the user's own
		{"region": "in\u202eni"},             // a bidi override
		{"region": "a b"},                    // a space
		{"region": "\xff"},                   // not UTF-8
		{"bad name": "x"},                    // not an argument name
		{"region": ""},                       // empty
		{"region": strings.Repeat("x", 300)}, // too long
	} {
		if err := authz.CheckRunBindings(p, bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
