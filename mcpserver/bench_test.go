package mcpserver_test

import (
	"context"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/api/apitest"
)

// BenchmarkListApprovals measures one tools/call (list_approvals: the key
// authenticated, the tenant's waiting runs listed, the result encoded and
// validated against its output schema) over each transport:
// go test -bench ListApprovals -run '^$' ./mcpserver/
func BenchmarkListApprovals(b *testing.B) {
	for _, transport := range []string{"http", "stdio"} {
		b.Run(transport, func(b *testing.B) {
			s := demo(b)
			cs := connect(b, s, transport, s.Keys[apitest.Priya])
			ctx := context.Background()
			for b.Loop() {
				res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list_approvals", Arguments: map[string]any{}})
				if err != nil || res.IsError {
					b.Fatalf("list_approvals: %v %+v", err, res)
				}
			}
		})
	}
}
