package eval

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/model"
)

// Grade judges an outcome against a task's expectations, in code. It
// returns one line per failed expectation; none means the task passed.
func Grade(t *Task, o *Outcome) []string {
	var fails []string
	fail := func(format string, args ...any) { fails = append(fails, fmt.Sprintf(format, args...)) }
	x := t.Expect
	if o.Status != x.Status {
		why := ""
		if o.Result != "" && o.Status != "completed" {
			why = fmt.Sprintf(" (%s)", clip(o.Result, 80))
		}
		fail("run ended %s%s, want %s", o.Status, why, x.Status)
	}
	if x.MaxSteps > 0 && o.Steps > x.MaxSteps {
		fail("%d steps, at most %d allowed", o.Steps, x.MaxSteps)
	}
	if x.MaxCostMicros > 0 {
		switch {
		case o.CostUnknown:
			fail("cost unknown, at most %s %s allowed", micros(x.MaxCostMicros), x.CostCurrency)
		case o.Currency != x.CostCurrency:
			fail("cost in %s, but the bound is in %s", o.Currency, x.CostCurrency)
		case o.CostMicros > x.MaxCostMicros:
			fail("cost %s %s, at most %s allowed", micros(o.CostMicros), o.Currency, micros(x.MaxCostMicros))
		}
	}
	for _, m := range x.Calls {
		n := 0
		for _, c := range o.Calls {
			if (m.Status == "" || c.Effective == m.Status) && m.Matches(c.Tool, c.args) {
				n++
			}
		}
		switch {
		case m.Count > 0 && n != m.Count:
			fail("call %s made %d times, want %d", m, n, m.Count)
		case m.Count == 0 && n == 0:
			fail("missing call %s%s", m, nearest(o.Calls, m.Tool))
		}
	}
	for _, c := range o.Calls {
		for _, m := range x.Forbidden {
			if m.Matches(c.Tool, c.args) {
				fail("forbidden call %s %s (%s)", c.Tool, argsText(c), how(c))
				break // one line per call, whichever rules it breaks
			}
		}
	}
	for _, kind := range sortedKeys(x.Records) {
		want, got := x.Records[kind], o.Records[kind]
		if !oneToOne(want, got) {
			fail("world %s: got %s, want %s", kind, records(got), listM{want}.String())
		}
	}
	return fails
}

// oneToOne reports whether the records can be paired with the matchers,
// each record with a distinct matcher and none left over.
func oneToOne(want []matcher, got []map[string]any) bool {
	vals := make([]any, len(got))
	for i, g := range got {
		vals[i] = g
	}
	return listM{want}.match(vals, true)
}

func records(rs []map[string]any) string {
	if len(rs) == 0 {
		return "none"
	}
	var parts []string
	for _, r := range rs {
		b, _ := json.Marshal(shorten(r))
		parts = append(parts, string(b))
	}
	return strings.Join(parts, ", ")
}

// shorten keeps long text fields readable in failure lines.
func shorten(r map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range r {
		if s, ok := v.(string); ok && len(s) > 40 {
			v = s[:40] + "…"
		}
		out[k] = v
	}
	return out
}

// argsText shows a call's arguments with long text cut short, so every
// argument stays visible.
func argsText(c Call) string {
	m, ok := c.args.(map[string]any)
	if !ok {
		return clip(string(c.Args), 120)
	}
	b, _ := json.Marshal(shorten(m))
	return string(b)
}

func how(c Call) string {
	s := c.Status
	if c.Control != "" {
		s += " by " + c.Control
	}
	if c.Replayed != "" {
		s += ", replay " + c.Replayed
	}
	return s
}

func nearest(calls []Call, tool string) string {
	var seen []string
	for _, c := range calls {
		if c.Tool == tool {
			seen = append(seen, fmt.Sprintf("%s -> %s", argsText(c), c.Effective))
		}
	}
	if len(seen) == 0 {
		return fmt.Sprintf(" (no %s call at all)", tool)
	}
	return fmt.Sprintf(" (made instead: %s)", strings.Join(seen, "; "))
}

func clip(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// micros formats micro-units as a decimal amount.
func micros(v int64) string {
	return strings.TrimSpace(model.Money{Micros: v}.String())
}
