package broker_test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/tool"
)

// TestBrokerRedactsEncodedCredentials (issue 15, class 14): a tool that
// prints its call credential or its connector's secret encoded (base64,
// hex, reversed, inside a Basic header) gets none of it into the result the
// loop stores and the model sees.
func TestBrokerRedactsEncodedCredentials(t *testing.T) {
	const connectorSecret = "secret-of-crm-0123456789" // the fixture's crm secret
	rev := func(s string) string { r := []rune(s); slices.Reverse(r); return string(r) }
	var forms []string
	f := newFixture(t, map[string]tool.Func{
		"lookup": func(_ context.Context, c tool.Call) (tool.Result, error) {
			forms = []string{
				base64.StdEncoding.EncodeToString([]byte(c.Credential)),
				base64.RawURLEncoding.EncodeToString([]byte(c.Credential)),
				strings.ToUpper(hex.EncodeToString([]byte(c.Credential))),
				rev(c.Credential),
				base64.StdEncoding.EncodeToString([]byte(connectorSecret)),
				hex.EncodeToString([]byte(connectorSecret)),
				rev(connectorSecret),
			}
			return tool.JSONResult(map[string]any{
				"forms": forms,
				"basic": "Basic " + base64.StdEncoding.EncodeToString([]byte("priya:"+connectorSecret)),
				"note":  "lookup done",
			})
		},
	})
	call := tool.Call{Tool: "lookup", Args: json.RawMessage(`{"q":"x"}`), IdempotencyKey: "run_1:1:0", RunID: "run_1", Tenant: "bank", User: "priya", Agent: "a@1"}
	ex, err := f.b.Execute(context.Background(), f.ms["lookup"], call)
	if err != nil {
		t.Fatal(err)
	}
	out := string(ex.Output)
	if len(forms) == 0 || !strings.Contains(out, "lookup done") {
		t.Fatalf("the tool did not run: %s", out)
	}
	for _, leak := range forms {
		if strings.Contains(out, leak) {
			t.Errorf("an encoded credential survived (%.12s…): %.300s", leak, out)
		}
	}
	inner := base64.StdEncoding.EncodeToString([]byte("priya:" + connectorSecret))
	if strings.Contains(out, inner[8:len(inner)-4]) {
		t.Errorf("the connector secret survived inside a Basic credential: %s", out)
	}
	if ex.Redactions < len(forms) {
		t.Errorf("%d redactions, want at least %d", ex.Redactions, len(forms))
	}
}
