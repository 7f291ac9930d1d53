package tool

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestValidateArgs(t *testing.T) {
	m := parseOne(t, refundYAML)
	tests := []struct {
		name string
		args string
		want []string // problems the error must mention; nil means valid
	}{
		{"valid", `{"transaction_id":"tx1","amount_inr":12499}`, nil},
		{"valid float", `{"transaction_id":"tx1","amount_inr":0.5}`, nil},
		{"missing property", `{"transaction_id":"tx1"}`, []string{`missing property "amount_inr"`}},
		{"wrong type", `{"transaction_id":"tx1","amount_inr":"12499"}`, []string{`"amount_inr": expected number, got string`}},
		{"two problems", `{"amount_inr":"x"}`, []string{`missing property "transaction_id"`, `"amount_inr": expected number, got string`}},
		{"extra property", `{"transaction_id":"tx1","amount_inr":1,"note":"hi"}`, []string{`unexpected property "note"`}},
		{"range", `{"transaction_id":"tx1","amount_inr":0}`, []string{`"amount_inr"`}},
		{"array", `[1,2]`, []string{"must be a JSON object, got array"}},
		{"null", `null`, []string{"must be a JSON object, got null"}},
		{"invalid JSON", `{"transaction_id":`, []string{"not valid JSON"}},
		{"empty", ``, []string{"not valid JSON"}},
		{"trailing data", `{} {}`, []string{"not valid JSON"}},
		{"too deep", strings.Repeat(`{"a":`, 100) + "1" + strings.Repeat("}", 100), []string{"not valid JSON", "nesting"}},
		{"too large", `{"transaction_id":"` + strings.Repeat("x", MaxArgsBytes) + `","amount_inr":1}`, []string{"larger than"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := m.ValidateArgs(json.RawMessage(tt.args))
			if tt.want == nil {
				if err != nil {
					t.Fatalf("valid arguments rejected: %v", err)
				}
				return
			}
			var ae *ArgsError
			if !errors.As(err, &ae) {
				t.Fatalf("error %v is not an *ArgsError", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestValidateArgsNested(t *testing.T) {
	m := parseOne(t, `
name: order
tier: 1
timeout_ms: 10
input_schema:
  type: object
  properties:
    items:
      type: array
      items:
        type: object
        properties: {qty: {type: integer}}
        required: [qty]
side_effects: none
`)
	err := m.ValidateArgs(json.RawMessage(`{"items":[{"qty":1},{"qty":"two"},{}]}`))
	if err == nil {
		t.Fatal("accepted")
	}
	for _, w := range []string{`"items[1].qty": expected integer, got string`, `"items[2]": missing property "qty"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

func TestValidateArgsUnloaded(t *testing.T) {
	m := &Manifest{Name: "hand_made"}
	if err := m.ValidateArgs(json.RawMessage(`{}`)); err == nil {
		t.Error("a manifest without a compiled schema validated arguments")
	}
}

func TestNeedsApproval(t *testing.T) {
	refund := parseOne(t, refundYAML)
	always := parseOne(t, strings.NewReplacer("approval: required_above", "approval: always", "approval_threshold: {amount_inr: 10000}\n", "").Replace(refundYAML))
	never := parseOne(t, strings.NewReplacer("approval: required_above", "approval: never", "approval_threshold: {amount_inr: 10000}\n", "").Replace(refundYAML))
	multi := parseOne(t, `
name: notify
tier: 1
timeout_ms: 10
input_schema:
  type: object
  properties:
    to: {type: array}
    text: {type: string}
    count: {type: integer}
approval: required_above
approval_threshold: {to: 3, text: 5, count: 100}
side_effects: external
`)
	tests := []struct {
		name   string
		m      *Manifest
		args   string
		need   bool
		reason string
	}{
		{"below threshold", refund, `{"transaction_id":"t","amount_inr":9999.99}`, false, ""},
		{"at threshold", refund, `{"transaction_id":"t","amount_inr":10000}`, false, ""},
		{"above threshold", refund, `{"transaction_id":"t","amount_inr":12499}`, true, "amount_inr is 12499, above the threshold 10000"},
		{"just above", refund, `{"transaction_id":"t","amount_inr":10000.01}`, true, "amount_inr"},
		{"huge number", refund, `{"transaction_id":"t","amount_inr":1e999}`, true, "amount_inr"},
		{"missing field", refund, `{"transaction_id":"t"}`, false, ""},
		{"string compared by length", refund, `{"amount_inr":"12499"}`, false, ""},
		{"unreadable fails closed", refund, `not json`, true, "could not be read"},
		{"not an object fails closed", refund, `[1]`, true, "could not be read"},
		{"always", always, `{}`, true, "always needs approval"},
		{"never", never, `{"amount_inr":1e9}`, false, ""},
		{"array length", multi, `{"to":["a","b","c","d"]}`, true, "to has 4 items"},
		{"array at limit", multi, `{"to":["a","b","c"]}`, false, ""},
		{"string length in characters", multi, `{"text":"₹₹₹₹₹"}`, false, ""},
		{"string too long", multi, `{"text":"₹₹₹₹₹₹"}`, true, "text has length 6"},
		{"object ignored", multi, `{"to":{"a":1,"b":2,"c":3,"d":4}}`, false, ""},
		{"several reasons", multi, `{"to":[1,2,3,4],"count":101}`, true, "count is 101, above the threshold 100; to has 4 items"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			need, reason := tt.m.NeedsApproval(json.RawMessage(tt.args))
			if need != tt.need || !strings.Contains(reason, tt.reason) {
				t.Errorf("NeedsApproval = %v, %q; want %v, containing %q", need, reason, tt.need, tt.reason)
			}
		})
	}
}
