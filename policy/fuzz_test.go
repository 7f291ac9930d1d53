package policy_test

import (
	"context"
	"testing"

	"github.com/agentplane/agentplane/policy"
)

// fuzzRules read args in the ways real rules do: numbers, strings, lists,
// nested objects, has() guards, and the run's totals.
var fuzzRules = []policy.Rule{
	{Name: "amount", When: `tool == "issue_refund" and args.amount_inr > 10000`},
	{Name: "guarded", When: `has(args.to) and args.to.endsWith("@example-bank.in")`},
	{Name: "list", When: `has(args.ids) and args.ids.exists(i, i == "txn_2002")`},
	{Name: "totals", When: `tool == "issue_refund" and run.totals.issue_refund.amount_inr + args.amount_inr > 10000.0`},
	{Name: "size", When: `args.size() > 3`},
}

// FuzzPolicyArgs feeds arbitrary bytes as a tool call's arguments through
// ArgsFromJSON and the rules. Nothing may panic; accepted arguments give
// the same verdict every time (a decision is recorded and must replay);
// and a rule that cannot be evaluated is reported as an *EvalError, which
// the broker turns into a denial.
func FuzzPolicyArgs(f *testing.F) {
	for _, s := range []string{
		`{"amount_inr":12499}`, `{"amount_inr":12499.5}`, `{"amount_inr":"12499"}`, `{"amount_inr":1e308}`,
		`{"to":"a@example-bank.in"}`, `{"to":5}`, `{"ids":["txn_2002",1,null,{"a":[]}]}`, `{}`, `[]`, `null`,
		`{"amount_inr":-0}`, `{"a":{"b":{"c":[[[[1]]]]}}}`, `{"amount_inr":1,"amount_inr":2}`,
	} {
		f.Add(s, "issue_refund")
	}
	set, err := policy.Compile(fuzzRules)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, raw, tool string) {
		args, err := policy.ArgsFromJSON([]byte(raw))
		if err != nil {
			return
		}
		in := &policy.Input{Tool: tool, Args: args, Run: policy.Run{Totals: map[string]map[string]float64{"issue_refund": {"amount_inr": 9000}}}}
		first, err1 := set.First(context.Background(), in)
		again, err2 := set.First(context.Background(), in)
		if first != again || (err1 == nil) != (err2 == nil) {
			t.Fatalf("two evaluations differ: %d %v / %d %v", first, err1, again, err2)
		}
		if err1 != nil && first != -1 {
			t.Fatalf("an evaluation error came with a match (%d)", first)
		}
		if first < -1 || first >= set.Len() {
			t.Fatalf("index %d out of range", first)
		}
	})
}

// FuzzRewrite checks that the and/or/not rewrite never changes a
// condition's length (error columns must stay true) and never touches the
// inside of a string literal.
func FuzzRewrite(f *testing.F) {
	for _, s := range []string{`a and b`, `"and" or 'or'`, `not x.and`, `r"\" and "`, `"""and"""`, "a // and\nor b", "`and` and b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, when string) {
		got, err := policy.Rewrite(when)
		if err != nil {
			return
		}
		if len(got) != len(when) {
			t.Fatalf("length changed: %q -> %q", when, got)
		}
		_ = policy.Check(when) // must not panic
	})
}
