// Package bankmcp serves the card-dispute example's simulated services as
// MCP servers on the official Go SDK: the core-banking service
// (get_customer_profile, get_card_transactions, raise_dispute,
// issue_refund) and the e-mail service (draft_email, send_email), the tools
// the example's tools.yaml assigns to the connectors core-banking and
// email.
//
// Each tool is the bank's own function (package bank), so a call over MCP
// gives the result the tier-1 tool gives: the same JSON, as the result's
// structured content and as its one text item. Names, descriptions and
// input schemas are tools.yaml's; each tool also declares an output schema
// (schemas.go). Arguments are checked against the input schema before the
// bank reads them. The idempotency key travels in the request's _meta
// (mcphost.MetaIdempotencyKey), and the bank answers a key it has seen
// with its first result, so a retried or replayed call changes nothing.
//
// `agentplane demo` serves core-banking over Streamable HTTP on loopback
// from its own process and runs the e-mail service over stdio inside a
// tier-2 sandbox (`agentplane example-server email --db FILE`, package
// cli), and registers both as connectors.
package bankmcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/tool"
)

// The services, named as their connectors are.
const (
	CoreBanking = "core-banking"
	Email       = "email"
)

// Services lists the services a server can be made for.
func Services() []string { return []string{CoreBanking, Email} }

// maxKeyBytes bounds the idempotency key read from _meta.
const maxKeyBytes = 256

// Opener returns the bank a server's calls go to. A server opens it at its
// first call (a server started only to list its tools touches nothing)
// and reuses it.
type Opener func() (*bank.Bank, error)

// Manifests returns the tools.yaml manifests of a service's tools, sorted
// by name: what the tools are offered as over MCP, and what the
// connector's overlays are written against.
func Manifests(service string) ([]*tool.Manifest, error) {
	if !slices.Contains(Services(), service) {
		return nil, fmt.Errorf("bankmcp: unknown service %q (known: %v)", service, Services())
	}
	data, err := carddispute.ReadFile(carddispute.ToolsFile)
	if err != nil {
		return nil, err
	}
	all, err := tool.ParseManifests(carddispute.ToolsFile, data)
	if err != nil {
		return nil, err
	}
	var out []*tool.Manifest
	for _, m := range all {
		if m.Connector == service {
			out = append(out, m)
		}
	}
	slices.SortFunc(out, func(a, b *tool.Manifest) int {
		if a.Name < b.Name {
			return -1
		}
		return 1
	})
	return out, nil
}

// NewServer returns the MCP server of a service over the bank open gives.
func NewServer(service string, open Opener) (*mcp.Server, error) {
	ms, err := Manifests(service)
	if err != nil {
		return nil, err
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "example-bank-" + service, Version: "1"}, nil)
	var once onceBank
	for _, m := range ms {
		out, ok := outputSchemas[m.Name]
		if !ok {
			return nil, fmt.Errorf("bankmcp: tool %s has no output schema", m.Name)
		}
		s.AddTool(&mcp.Tool{Name: m.Name, Description: m.Description, InputSchema: m.InputSchema, OutputSchema: out},
			handler(m, func() (*bank.Bank, error) { return once.get(open) }))
	}
	return s, nil
}

// Handler serves a service over Streamable HTTP (stateless: every request
// stands alone, as the 2026-07-28 revision has it).
func Handler(service string, open Opener) (http.Handler, error) {
	s, err := NewServer(service, open)
	if err != nil {
		return nil, err
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}), nil
}

// ServeStdio serves a service on standard input and output until the
// client closes them or ctx ends.
func ServeStdio(ctx context.Context, service string, open Opener) error {
	s, err := NewServer(service, open)
	if err != nil {
		return err
	}
	return s.Run(ctx, &mcp.StdioTransport{})
}

// handler calls the bank's function for one tool. Arguments that do not
// match the input schema are a tool error the model can correct; an
// error of the bank's (a key reused for other arguments) is a protocol
// error, so the call fails rather than returning something made up.
func handler(m *tool.Manifest, open Opener) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 {
			args = json.RawMessage(`{}`)
		}
		if err := m.ValidateArgs(args); err != nil {
			return errorResult(tool.ErrorResult("%s: invalid arguments: %v", m.Name, err)), nil
		}
		key, err := idempotencyKey(req.Params.Meta)
		if err != nil {
			return errorResult(tool.ErrorResult("%s: %v", m.Name, err)), nil
		}
		b, err := open()
		if err != nil {
			return nil, err
		}
		fn, ok := b.Func(m.Name)
		if !ok {
			return nil, fmt.Errorf("bankmcp: the bank has no tool %s", m.Name)
		}
		res, err := fn(ctx, tool.Call{Tool: m.Name, Args: args, IdempotencyKey: key})
		if err != nil {
			return nil, err
		}
		if res.IsError {
			return errorResult(res), nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(res.Output)}},
			StructuredContent: json.RawMessage(res.Output)}, nil
	}
}

func errorResult(r tool.Result) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: string(r.Output)}}}
}

// idempotencyKey reads the key the host put in _meta ("" when there is
// none: the bank then refuses side effects and makes unkeyed drafts).
func idempotencyKey(meta mcp.Meta) (string, error) {
	v, ok := meta[mcphost.MetaIdempotencyKey]
	if !ok {
		return "", nil
	}
	key, ok := v.(string)
	if !ok || len(key) > maxKeyBytes || !utf8.ValidString(key) {
		return "", fmt.Errorf("_meta %s must be a string of at most %d bytes", mcphost.MetaIdempotencyKey, maxKeyBytes)
	}
	return key, nil
}
