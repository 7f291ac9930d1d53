package cli_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rogpeppe/go-internal/testscript"
)

// scriptServers holds each script's MCP server (mcpserve, mcpdescribe).
var scriptServers sync.Map // *testscript.TestScript -> *scriptMCP

type scriptMCP struct {
	mu   sync.Mutex
	desc string
}

type echoArgs struct {
	Text string `json:"text"`
}

// cmdMCPServe starts an MCP server (the official Go SDK, Streamable HTTP)
// on a free loopback port for the rest of the script, with one tool, echo,
// and sets MCP_URL and MCP_HOSTPORT:
//
//	mcpserve
func cmdMCPServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: mcpserve")
	}
	m := &scriptMCP{desc: "Echoes the text back."}
	scriptServers.Store(ts, m)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server {
		m.mu.Lock()
		desc := m.desc
		m.mu.Unlock()
		s := mcp.NewServer(&mcp.Implementation{Name: "script", Version: "1"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: desc}, func(ctx context.Context, req *mcp.CallToolRequest, in echoArgs) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "echo: " + in.Text}}}, nil, nil
		})
		return s
	}, &mcp.StreamableHTTPOptions{Stateless: true})
	srv := httptest.NewServer(h)
	ts.Defer(func() {
		srv.Close()
		scriptServers.Delete(ts)
	})
	ts.Setenv("MCP_URL", srv.URL+"/mcp")
	ts.Setenv("MCP_HOSTPORT", strings.TrimPrefix(srv.URL, "http://"))
}

// cmdMCPDescribe changes the description the script's server gives echo:
//
//	mcpdescribe TEXT
func cmdMCPDescribe(ts *testscript.TestScript, neg bool, args []string) {
	v, ok := scriptServers.Load(ts)
	if neg || len(args) != 1 || !ok {
		ts.Fatalf("usage: mcpdescribe TEXT (after mcpserve)")
	}
	m := v.(*scriptMCP)
	m.mu.Lock()
	m.desc = args[0]
	m.mu.Unlock()
}
