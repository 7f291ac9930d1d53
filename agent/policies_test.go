package agent

import (
	"context"
	"strings"
	"testing"
)

func TestApplyRefusesPolicyThatDoesNotCompile(t *testing.T) {
	f := newFixture(t)
	d := version(t, 7, "")
	d.Policies = append(d.Policies, Policy{Name: "typo", When: `tool == "send_email" and run.taint`, Then: Action{Kind: ActionDeny}})
	_, err := f.reg.Apply(context.Background(), d)
	if err == nil {
		t.Fatal("a definition whose policy does not compile was stored")
	}
	for _, want := range []string{`policy "typo"`, "taint"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if vs, _ := f.store.ListAgentVersions(context.Background(), ""); len(vs) != 0 {
		t.Errorf("stored %d versions", len(vs))
	}
	// The seed's rules, written with and, compile and apply.
	d = version(t, 8, "")
	d.Policies = []Policy{
		{Name: "refund-needs-supervisor", When: `tool == "issue_refund" and args.amount_inr > 10000`, Then: Action{Kind: ActionRequireApproval, Group: "card-ops-supervisors", Expires: DefaultApprovalExpiry}},
		{Name: "tainted-email", When: `tool == "send_email" and run.read_untrusted_content`, Then: Action{Kind: ActionRequireApproval, Group: "card-ops-agents", Expires: DefaultApprovalExpiry}},
	}
	f.apply(t, d)
	got, err := f.reg.Get(context.Background(), d.Agent, 8)
	if err != nil {
		t.Fatal(err)
	}
	ps, err := got.CompilePolicies()
	if err != nil || ps.Set.Len() != 2 || ps.Rules[1].Then.Group != "card-ops-agents" {
		t.Fatalf("CompilePolicies = %+v, %v", ps, err)
	}
}
