// Command stdioserver is an MCP server over stdio (the official Go SDK)
// that the mcphost tests run inside a tier-2 sandbox. Its probe tool
// reports what the sandbox lets it see: the network, the host's files, its
// environment. With -old it speaks only the 2025-11-25 revision.
package main

import (
	"context"
	"flag"
	"log"
	"net"
	"os"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type probeOut struct {
	Dial     string   `json:"dial"`
	RootRead string   `json:"root_read"`
	Env      []string `json:"env"`
	UID      int      `json:"uid"`
}

type echoIn struct {
	Text string `json:"text"`
}

func main() {
	old := flag.Bool("old", false, "speak only protocol revision 2025-11-25")
	flag.Parse()
	var opts *mcp.ServerOptions
	if *old {
		opts = &mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}}
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "stdioserver", Version: "1"}, opts)
	mcp.AddTool(s, &mcp.Tool{Name: "probe", Description: "Reports what the sandbox allows."}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, probeOut, error) {
		out := probeOut{Env: os.Environ(), UID: os.Getuid()}
		c, err := net.DialTimeout("tcp", "1.1.1.1:443", 2*time.Second)
		if err != nil {
			out.Dial = err.Error()
		} else {
			c.Close()
			out.Dial = "connected"
		}
		if _, err := os.ReadDir("/root"); err != nil {
			out.RootRead = err.Error()
		} else {
			out.RootRead = "readable"
		}
		return nil, out, nil
	})
	mcp.AddTool(s, &mcp.Tool{Name: "echo", Description: "Echoes."}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		key, _ := req.Params.Meta["io.agentplane/idempotency-key"].(string)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text + " @" + key}}}, nil, nil
	})
	if err := s.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Print(err)
	}
}
