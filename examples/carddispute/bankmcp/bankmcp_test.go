package bankmcp_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/examples/carddispute/bankmcp"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/tool"
)

// connect serves a service over in-memory transports and returns a client
// session.
func connect(t *testing.T, service string, b *bank.Bank) *mcp.ClientSession {
	t.Helper()
	s, err := bankmcp.NewServer(service, func() (*bank.Bank, error) { return b, nil })
	if err != nil {
		t.Fatal(err)
	}
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(t.Context(), st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(t.Context(), ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

func openBank(t *testing.T, name string) *bank.Bank {
	t.Helper()
	b, err := bank.Open(filepath.Join(t.TempDir(), name))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// TestSameResultsAsInProcess calls every tool of both services over MCP
// and the same function in-process, each on a fresh seed bank, with the
// same key: the structured content is the in-process output (as JSON;
// the text item byte for byte), it matches the declared output schema, the listing carries
// tools.yaml's descriptions and input schemas, and a repeated key changes
// nothing.
func TestSameResultsAsInProcess(t *testing.T) {
	args := map[string]string{
		bank.ToolGetCustomerProfile:  `{"customer_id":"c_88213"}`,
		bank.ToolGetCardTransactions: `{"customer_id":"c_88213","from":"2026-10-01","to":"2026-10-31"}`,
		bank.ToolRaiseDispute:        `{"customer_id":"c_88213","reason":"duplicate","transaction_ids":["txn_1001","txn_1002"]}`,
		bank.ToolIssueRefund:         `{"amount_inr":12499,"customer_id":"c_88213","transaction_id":"txn_1002"}`,
		bank.ToolDraftEmail:          `{"body":"Hello","subject":"Refund","to":"asha.rao@mail.example"}`,
		bank.ToolSendEmail:           `{"body":"Hello","subject":"Refund","to":"asha.rao@mail.example"}`,
	}
	served := 0
	for _, service := range bankmcp.Services() {
		overMCP, inProc := openBank(t, "mcp.db"), openBank(t, "inproc.db")
		cs := connect(t, service, overMCP)
		ms, err := bankmcp.Manifests(service)
		if err != nil {
			t.Fatal(err)
		}
		listed := map[string]*mcp.Tool{}
		for tl, err := range cs.Tools(t.Context(), nil) {
			if err != nil {
				t.Fatal(err)
			}
			listed[tl.Name] = tl
		}
		if len(listed) != len(ms) {
			t.Fatalf("%s lists %d tools, tools.yaml assigns it %d", service, len(listed), len(ms))
		}
		for _, m := range ms {
			tl := listed[m.Name]
			if tl == nil || tl.Description != m.Description {
				t.Fatalf("%s: listed %+v, want tools.yaml's description", m.Name, tl)
			}
			in, _ := json.Marshal(tl.InputSchema)
			if !jsonEqual(t, in, m.InputSchema) {
				t.Errorf("%s: input schema %s, want tools.yaml's %s", m.Name, in, m.InputSchema)
			}
			out, _ := json.Marshal(tl.OutputSchema)
			schema := compile(t, out)
			key := "run_same:" + m.Name + ":0"
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: m.Name, Arguments: json.RawMessage(args[m.Name]),
				Meta: mcp.Meta{mcphost.MetaIdempotencyKey: key}})
			if err != nil || res.IsError {
				t.Fatalf("%s over MCP: %v %+v", m.Name, err, res)
			}
			got, _ := json.Marshal(res.StructuredContent)
			fn, _ := inProc.Func(m.Name)
			want, err := fn(t.Context(), tool.Call{Tool: m.Name, Args: json.RawMessage(args[m.Name]), IdempotencyKey: key})
			if err != nil {
				t.Fatal(err)
			}
			if !jsonEqual(t, got, want.Output) {
				t.Errorf("%s: over MCP %s, in-process %s", m.Name, got, want.Output)
			}
			if text := res.Content[0].(*mcp.TextContent).Text; text != string(want.Output) {
				t.Errorf("%s: text %s, want the same JSON", m.Name, text)
			}
			var v any
			_ = json.Unmarshal(got, &v)
			if err := schema.Validate(v); err != nil {
				t.Errorf("%s: result does not match its output schema: %v", m.Name, err)
			}
			served++
		}
		// A repeated key: the first result, nothing done twice.
		if service == bankmcp.CoreBanking {
			res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: bank.ToolIssueRefund, Arguments: json.RawMessage(args[bank.ToolIssueRefund]),
				Meta: mcp.Meta{mcphost.MetaIdempotencyKey: "run_same:" + bank.ToolIssueRefund + ":0"}})
			if err != nil || res.IsError {
				t.Fatalf("repeat: %v %+v", err, res)
			}
			ct, _ := overMCP.Counters(t.Context())
			if ct.RefundsIssued != 1 || ct.DuplicateCallsSuppressed != 1 {
				t.Errorf("after a repeated key: %+v", ct)
			}
		}
	}
	if served != len(args) {
		t.Fatalf("served %d tools, want %d", served, len(args))
	}
}

// TestArgumentsChecked: arguments outside the input schema are a tool
// error the model can correct, and nothing reaches the bank; a side effect
// without an idempotency key is refused by the bank.
func TestArgumentsChecked(t *testing.T) {
	b := openBank(t, "bank.db")
	cs := connect(t, bankmcp.CoreBanking, b)
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: bank.ToolIssueRefund,
		Arguments: json.RawMessage(`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":"12499"}`),
		Meta:      mcp.Meta{mcphost.MetaIdempotencyKey: "run_x:1:0"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "invalid arguments") {
		t.Fatalf("a string amount: %v %+v", err, res)
	}
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: bank.ToolIssueRefund,
		Arguments: json.RawMessage(`{"customer_id":"c_88213","transaction_id":"txn_1002","amount_inr":12499}`)}); err == nil {
		t.Fatal("a refund without an idempotency key was not refused")
	}
	if ct, _ := b.Counters(t.Context()); ct.RefundsIssued != 0 {
		t.Fatalf("refunds issued: %+v", ct)
	}
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

func compile(t *testing.T, schema []byte) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schema))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("out.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("out.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}
