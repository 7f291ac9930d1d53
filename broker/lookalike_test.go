package broker

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestClass11LookalikeWarnings is class 11 of issue 15: the approver is
// warned, in plain words, about addresses that are not what they look
// like; plain addresses get no warning.
func TestClass11LookalikeWarnings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args map[string]any
		want []string // substrings, each in some warning; nil = no warning
	}{
		{"plain", map[string]any{"to": "asha.rao@mail.example", "body": "Dear Asha, see https://example-bank.in/help"}, nil},
		{"mixed scripts", map[string]any{"to": "audit@ex\u0430mple-bank.in"}, []string{"mixes Latin and Cyrillic letters", "U+0430 CYRILLIC SMALL LETTER A"}},
		{"whole-script look-alike", map[string]any{"to": "audit@\u0430\u0440\u0440\u04cf\u0435.in"}, []string{"look like the Latin \"apple\""}},
		{"zero-width", map[string]any{"to": "audit@example\u200b-bank.in"}, []string{"invisible or control character", "ZERO WIDTH SPACE"}},
		{"crlf header", map[string]any{"to": "a@mail.example\r\nBcc: x@exfil.example"}, []string{"CARRIAGE RETURN", "add mail headers"}},
		{"percent routing", map[string]any{"to": "audit%exfil.example@example-bank.in"}, []string{"%-routing"}},
		{"punycode", map[string]any{"to": "audit@xn--exmple-bank-zij.in"}, []string{"punycode", "mixes Latin and Cyrillic"}},
		{"fullwidth", map[string]any{"to": "audit@\uff45xample-bank.in"}, []string{"special forms of characters"}},
		{"in a list, nested", map[string]any{"cc": []any{"ok@mail.example", map[string]any{"to": "x@ex\u0430mple-bank.in"}}}, []string{"Cyrillic"}},
		{"url host", map[string]any{"body": "pay at https://ex\u0430mple-bank.in/pay"}, []string{"Cyrillic"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, _ := json.Marshal(tc.args)
			got := addressWarnings(raw)
			if tc.want == nil && len(got) != 0 {
				t.Fatalf("warnings for a plain address: %q", got)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					found = found || strings.Contains(g, w)
				}
				if !found {
					t.Errorf("no warning contains %q: %q", w, got)
				}
			}
			for _, g := range got {
				if strings.ContainsAny(g, "\r\n\u200b") {
					t.Errorf("a warning carries the invisible character itself: %q", g)
				}
			}
			if again := addressWarnings(raw); strings.Join(again, "|") != strings.Join(got, "|") {
				t.Errorf("warnings differ between two runs: %q vs %q", got, again)
			}
		})
	}
	// Bounded: a flood of addresses yields a bounded list.
	many := make([]any, 500)
	for i := range many {
		many[i] = "a%b@ex\u0430mple.in"
	}
	raw, _ := json.Marshal(map[string]any{"to": many})
	if got := addressWarnings(raw); len(got) > maxWarnings {
		t.Fatalf("%d warnings", len(got))
	}
}
