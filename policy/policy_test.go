package policy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/policy"
)

// The two rules of the card-dispute agent exactly as the design seed writes
// them, plus the bank-domain form the issue asks for.
var seedRules = []policy.Rule{
	{Name: "refund-needs-supervisor", When: `tool == "issue_refund" and args.amount_inr > 10000`},
	{Name: "tainted-email", When: `tool == "send_email" and run.read_untrusted_content`},
	{Name: "tainted-external-email", When: `tool == "send_email" and run.tainted and not args.to.endsWith("@example-bank.in")`},
}

func input(tool, args string, tainted bool) *policy.Input {
	a, err := policy.ArgsFromJSON([]byte(args))
	if err != nil {
		panic(err)
	}
	return &policy.Input{Tool: tool, Args: a, Tenant: "example-bank",
		User:  policy.User{ID: "priya", Tenant: "example-bank", Scopes: []string{"refunds:write"}, Groups: []string{"card-ops-agents"}},
		Agent: policy.Agent{Name: "card-dispute-assistant", Version: 1},
		Run:   policy.Run{Tainted: tainted, Steps: 3, Cost: 1.5, Currency: "INR"}}
}

func TestSeedRules(t *testing.T) {
	set, err := policy.Compile(seedRules)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		tool    string
		args    string
		tainted bool
		want    int
	}{
		{"refund 12499 (int)", "issue_refund", `{"amount_inr":12499}`, false, 0},
		{"refund 12499.5 (double)", "issue_refund", `{"amount_inr":12499.5}`, false, 0},
		{"refund 12499.0", "issue_refund", `{"amount_inr":12499.0}`, false, 0},
		{"refund 1.2499e4", "issue_refund", `{"amount_inr":1.2499e4}`, false, 0},
		{"refund exactly 10000", "issue_refund", `{"amount_inr":10000}`, false, -1},
		{"refund 10000.01", "issue_refund", `{"amount_inr":10000.01}`, false, 0},
		{"refund 500", "issue_refund", `{"amount_inr":500}`, false, -1},
		{"email untainted", "send_email", `{"to":"a@mail.example"}`, false, -1},
		{"email tainted", "send_email", `{"to":"a@mail.example"}`, true, 1},
		{"other tool tainted", "get_ticket", `{"ticket_id":"T-1"}`, true, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := set.First(context.Background(), input(c.tool, c.args, c.tainted))
			if err != nil {
				t.Fatal(err)
			}
			if got != c.want {
				t.Fatalf("first matching rule = %d, want %d", got, c.want)
			}
		})
	}
	// The bank-domain rule on its own.
	only, err := policy.Compile(seedRules[2:])
	if err != nil {
		t.Fatal(err)
	}
	for to, want := range map[string]int{"a@mail.example": 0, "ops@example-bank.in": -1, "x@example-bank.in.evil.example": 0} {
		got, err := only.First(context.Background(), input("send_email", `{"to":"`+to+`"}`, true))
		if err != nil || got != want {
			t.Errorf("to %s: %d, %v; want %d", to, got, err, want)
		}
	}
}

func TestRewrite(t *testing.T) {
	cases := map[string]string{
		`a and b`:                      `a && b`,
		`a or b`:                       `a || b`,
		`not a`:                        `!   a`,
		`not(a) and not b`:             `!  (a) && !   b`,
		`x == "a and b" and y`:         `x == "a and b" && y`,
		`x == 'or' or y`:               `x == 'or' || y`,
		`x == """and "or" not""" or y`: `x == """and "or" not""" || y`,
		`r"a\" and b == "x"`:           `r"a\" && b == "x"`, // raw: the backslash does not escape
		`"a\" and b" == x`:             `"a\" and b" == x`,
		`args.and or args.not`:         `args.and || args.not`,
		`args. and == 1`:               `args. and == 1`,
		`andy or nota`:                 `andy || nota`,
		"a // and b\nand c":            "a // and b\n&&  c",
		`1e10 and true`:                `1e10 && true`,
	}
	for in, want := range cases {
		got, err := policy.Rewrite(in)
		if err != nil {
			t.Errorf("Rewrite(%q): %v", in, err)
			continue
		}
		// Same length, so error columns still point into the input.
		want = strings.ReplaceAll(want, "&& ", "&& ")
		if len(got) != len(in) {
			t.Errorf("Rewrite(%q) changed the length: %q", in, got)
		}
		if strings.Join(strings.Fields(got), " ") != strings.Join(strings.Fields(want), " ") {
			t.Errorf("Rewrite(%q) = %q, want %q", in, got, want)
		}
	}
	if _, err := policy.Rewrite(`x == "open`); err == nil {
		t.Error("unterminated string accepted")
	}
}

func TestCompileErrorsNameTheRule(t *testing.T) {
	_, err := policy.Compile([]policy.Rule{
		{Name: "fine", When: `tool == "x"`},
		{Name: "typo", When: `user.scope == "a"`},
		{Name: "not-bool", When: `run.steps + 1`},
		{Name: "syntax", When: `tool == `},
		{Name: "empty", When: ` `},
		{Name: "int-vs-string", When: `run.steps == "3"`},
	})
	if err == nil {
		t.Fatal("bad rules compiled")
	}
	var ce *policy.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("error is %T", err)
	}
	msg := err.Error()
	for _, want := range []string{`policy "typo"`, `undefined field 'scope'`, `policy "not-bool"`, "type bool", `policy "syntax"`, `policy "empty"`, `policy "int-vs-string"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not mention %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, `policy "fine"`) {
		t.Errorf("the good rule is reported:\n%s", msg)
	}
}

func TestVariables(t *testing.T) {
	in := input("issue_refund", `{"amount_inr":9000,"customer_id":"c_1","items":[1,2.5,"x"],"meta":{"k":true}}`, true)
	in.Run.Calls = map[string]int64{"issue_refund": 1, "get_ticket": 2}
	in.Run.Totals = map[string]map[string]float64{"issue_refund": {"amount_inr": 9000}}
	for _, when := range []string{
		`tenant == "example-bank" && user.tenant == tenant && user.id == "priya"`,
		`"refunds:write" in user.scopes && "card-ops-agents" in user.groups`,
		`agent.name == "card-dispute-assistant" && agent.version == 1`,
		`run.tainted && run.read_untrusted_content && run.steps == 3 && run.cost > 1 && run.currency == "INR"`,
		`run.calls.issue_refund == 1 && run.calls["get_ticket"] == 2`,
		`run.totals.issue_refund.amount_inr + args.amount_inr > 10000`,
		`args.items.size() == 3 && args.items[1] > 2 && args.meta.k`,
		`has(args.customer_id) && !has(args.missing)`,
		`args.customer_id.startsWith("c_") and not (args.customer_id in ["c_2", "c_3"])`,
		`run.steps < 3.5 and args.amount_inr >= 9000.0 and args.amount_inr == 9000`,
	} {
		set, err := policy.Compile([]policy.Rule{{Name: "r", When: when}})
		if err != nil {
			t.Errorf("%s: %v", when, err)
			continue
		}
		got, err := set.First(context.Background(), in)
		if err != nil || got != 0 {
			t.Errorf("%s: got %d, %v; want it to hold", when, got, err)
		}
	}
	// The current tool and numeric arguments are keys even in a fresh run.
	fresh := input("issue_refund", `{"amount_inr":500}`, false)
	set, _ := policy.Compile([]policy.Rule{{Name: "r", When: `run.calls.issue_refund == 0 && run.totals.issue_refund.amount_inr == 0.0`}})
	if got, err := set.First(context.Background(), fresh); err != nil || got != 0 {
		t.Errorf("fresh run: %d, %v", got, err)
	}
	if !set.UsesTotals() {
		t.Error("UsesTotals is false for a rule reading run.totals")
	}
}

func TestFailsClosed(t *testing.T) {
	cases := map[string]string{
		"missing key":     `args.nope > 1`,
		"wrong type":      `args.amount_inr.startsWith("1")`,
		"dyn not bool":    `args.amount_inr`,
		"division":        `args.amount_inr / 0 > 1`,
		"too costly":      `[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f >= 0))))))`,
		"unknown map key": `run.calls["send_email"] > 0`,
	}
	for name, when := range cases {
		t.Run(name, func(t *testing.T) {
			set, err := policy.Compile([]policy.Rule{{Name: "only", When: when}})
			if err != nil {
				t.Fatalf("compile: %v", err)
			}
			got, err := set.First(context.Background(), input("issue_refund", `{"amount_inr":12499}`, false))
			var ee *policy.EvalError
			if !errors.As(err, &ee) || ee.Rule != "only" || got != -1 {
				t.Fatalf("got %d, %v; want an *EvalError for rule only", got, err)
			}
		})
	}
	// A cancelled context stops evaluation too.
	set, _ := policy.Compile([]policy.Rule{{Name: "slow", When: `[1,2,3].exists(x, x > 5)`}})
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := set.First(ctx, input("t", `{}`, false)); err == nil {
		t.Log("a tiny comprehension finished before the interrupt check; not an error")
	}
	// Short-circuiting absorbs errors where the other side decides.
	guard, _ := policy.Compile([]policy.Rule{{Name: "guarded", When: `tool == "send_email" and args.to.endsWith("@x")`}})
	if got, err := guard.First(context.Background(), input("issue_refund", `{"amount_inr":1}`, false)); err != nil || got != -1 {
		t.Errorf("guarded rule: %d, %v", got, err)
	}
}

func TestArgsFromJSON(t *testing.T) {
	a, err := policy.ArgsFromJSON([]byte(`{"i":12499,"f":12499.5,"w":12499.0,"e":1e3,"big":1e300,"huge":123456789012345678901234567890,"neg":-0,"s":"x","n":null,"b":true,"l":[1,{"x":2.5}]}`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"i": 12499.0, "f": 12499.5, "w": 12499.0, "e": 1000.0, "big": 1e300, "huge": 1.2345678901234568e29, "neg": 0.0}
	for k, v := range want {
		if a[k] != v {
			t.Errorf("%s = %#v, want %#v", k, a[k], v)
		}
	}
	if l := a["l"].([]any); l[0] != 1.0 || l[1].(map[string]any)["x"] != 2.5 {
		t.Errorf("list = %#v", l)
	}
	for _, bad := range []string{`[]`, `1`, `{"a":1e400}`, `{`, `{} {}`, strings.Repeat(`{"a":`, 70) + "1" + strings.Repeat("}", 70)} {
		if _, err := policy.ArgsFromJSON([]byte(bad)); err == nil {
			t.Errorf("ArgsFromJSON(%.40s) accepted", bad)
		}
	}
}

func TestNamesTool(t *testing.T) {
	set, err := policy.Compile([]policy.Rule{
		{Name: "a", When: `tool == "issue_refund" and run.totals.send_email.amount > 1.0`},
		{Name: "b", When: `run.totals["draft_email"].n > 0.0 or 'x' == "raw_tool"`},
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"send_email": true, "draft_email": true, "issue_refund": true, "raw_tool": true, "get_ticket": false, "and": false} {
		if got := set.NamesTool(name); got != want {
			t.Errorf("NamesTool(%s) = %v, want %v", name, got, want)
		}
	}
}
