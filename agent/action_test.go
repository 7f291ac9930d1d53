package agent

import (
	"strings"
	"testing"
	"time"
)

func TestParseAction(t *testing.T) {
	good := []struct {
		in   string
		want Action
		text string // String() of the result
	}{
		{"allow", Action{Kind: ActionAllow}, "allow"},
		{"  allow  ", Action{Kind: ActionAllow}, "allow"},
		{"allow()", Action{Kind: ActionAllow}, "allow"},
		{"deny", Action{Kind: ActionDeny}, "deny"},
		{`deny("no")`, Action{Kind: ActionDeny, Reason: "no"}, `deny(reason: "no")`},
		{`deny(reason: "tainted runs may not email")`, Action{Kind: ActionDeny, Reason: "tainted runs may not email"}, `deny(reason: "tainted runs may not email")`},
		{`deny(reason="a \"quoted\" word, and a comma")`, Action{Kind: ActionDeny, Reason: `a "quoted" word, and a comma`}, `deny(reason: "a \"quoted\" word, and a comma")`},
		{`deny(reason: tainted)`, Action{Kind: ActionDeny, Reason: "tainted"}, `deny(reason: "tainted")`},
		{"require_approval(group: card-ops-supervisors, expires: 24h)",
			Action{Kind: ActionRequireApproval, Group: "card-ops-supervisors", Expires: 24 * time.Hour},
			"require_approval(group: card-ops-supervisors, expires: 24h)"},
		{"require_approval(group: card-ops-agents)",
			Action{Kind: ActionRequireApproval, Group: "card-ops-agents", Expires: DefaultApprovalExpiry},
			"require_approval(group: card-ops-agents, expires: 24h)"},
		{"require_approval( expires = 2d , group = ops )",
			Action{Kind: ActionRequireApproval, Group: "ops", Expires: 48 * time.Hour},
			"require_approval(group: ops, expires: 48h)"},
		{"require_approval(group: ops, expires: 1h30m)",
			Action{Kind: ActionRequireApproval, Group: "ops", Expires: 90 * time.Minute},
			"require_approval(group: ops, expires: 1h30m)"},
	}
	for _, tt := range good {
		got, err := ParseAction(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseAction(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if got.String() != tt.text {
			t.Errorf("String() = %q, want %q", got.String(), tt.text)
		}
		again, err := ParseAction(got.String())
		if err != nil || again != got {
			t.Errorf("String %q does not parse back: %+v, %v", got.String(), again, err)
		}
	}

	bad := map[string]string{
		"":                      "want allow",
		"permit":                `unknown action "permit"`,
		"allow(now)":            "takes no arguments",
		"deny(a, b)":            "one reason",
		"deny(why: x)":          `unknown argument "why"`,
		`deny("unterminated)`:   "unterminated string",
		"deny(reason: x":        "missing )",
		"deny(reason: x) extra": "after the closing",
		"deny x":                "after the action name",
		"require_approval":      "group is required",
		"require_approval()":    "group is required",
		"require_approval(ops)": "name each argument",
		"require_approval(group: ops, group: ops)":          "given twice",
		"require_approval(group: ops, expires: -1h)":        "expires must be",
		"require_approval(group: ops, expires: 31d)":        "at most 30d",
		"require_approval(group: ops, timeout: 1h)":         `unknown argument "timeout"`,
		"require_approval(group: Ops)":                      "group must be lower case",
		"require_approval(group: ops expires: 1h)":          "separated by commas",
		`deny(reason: "` + strings.Repeat("x", 2000) + `")`: "at most 1024 bytes",
	}
	for in, want := range bad {
		_, err := ParseAction(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseAction(%.40q) error = %v, want it to mention %q", in, err, want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{
		"90s": 90 * time.Second, "2h": 2 * time.Hour, "1d": 24 * time.Hour,
		"2d12h": 60 * time.Hour, "1h30m": 90 * time.Minute, "0d1h": time.Hour,
	}
	for in, want := range good {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
		if back, err := ParseDuration(formatDuration(got)); err != nil || back != got {
			t.Errorf("formatDuration(%v) = %q does not parse back", got, formatDuration(got))
		}
	}
	for _, in := range []string{"", "d", "1.5d", "-1d", "1d-1h", "1dd", "two hours", "7200", "+1d"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) accepted", in)
		}
	}
}

func TestMicros(t *testing.T) {
	for in, want := range map[string]int64{"150": 150_000_000, "0.5": 500_000, "2.50": 2_500_000, "0.000001": 1, "1.123456": 1_123_456} {
		got, err := parseMicros(in)
		if err != nil || got != want {
			t.Errorf("parseMicros(%q) = %d, %v; want %d", in, got, err, want)
		}
		if back, _ := parseMicros(formatMicros(got)); back != got {
			t.Errorf("formatMicros(%d) = %q does not parse back", got, formatMicros(got))
		}
	}
	if formatMicros(150_000_000) != "150" || formatMicros(2_500_000) != "2.5" {
		t.Errorf("formatMicros: %q %q", formatMicros(150_000_000), formatMicros(2_500_000))
	}
}
