package mcphost_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/tool"
)

// BenchmarkCall measures one tool call through Broker.Execute: a tier-1
// echo (in-process), an MCP echo over Streamable HTTP on loopback, and an
// MCP echo over stdio to a server in a warm tier-2 sandbox (its session
// opened before timing). Each reports the median and 99th percentile of
// single calls (p50-ns, p99-ns); the difference to tier-1 is what MCP adds.
// scripts/bench-mcp.sh prints them as a table.
func BenchmarkCall(b *testing.B) {
	const echoTier1 = "name: echo\ntier: 1\ntimeout_ms: 5000\nside_effects: none\ninput_schema: {type: object, properties: {text: {type: string}}}\n"
	ms, err := tool.ParseManifests("echo.yaml", []byte(echoTier1))
	if err != nil {
		b.Fatal(err)
	}
	cat := tool.NewCatalog()
	if err := cat.Register("echo", func(ctx context.Context, c tool.Call) (tool.Result, error) {
		var in struct{ Text string }
		_ = json.Unmarshal(c.Args, &in)
		return tool.JSONResult(map[string]string{"text": in.Text})
	}); err != nil {
		b.Fatal(err)
	}
	newBroker := func(remote broker.Remote) *broker.Broker {
		br, err := broker.New(broker.Options{Catalog: cat, Remote: remote})
		if err != nil {
			b.Fatal(err)
		}
		return br
	}
	b.Run("tier1", func(b *testing.B) { benchExecute(b, newBroker(nil), ms[0]) })

	b.Run("http", func(b *testing.B) {
		s := mcp.NewServer(&mcp.Implementation{Name: "bench"}, nil)
		mcp.AddTool(s, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: in.Text}}}, nil, nil
		})
		srv := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true}))
		defer srv.Close()
		reg := &registry{}
		h := loopbackHost(b, reg, mcphost.Options{})
		m := benchReview(b, h, reg, specFor(b, "bench", srv.URL+"/mcp"))
		benchExecute(b, newBroker(h), m)
	})

	b.Run("stdio-sandbox", func(b *testing.B) {
		l := sandboxLauncher(b)
		reg := &registry{}
		h := loopbackHost(b, reg, mcphost.Options{Launcher: l})
		spec, err := mcphost.ParseSpec([]byte("name: bench\ntransport: stdio\ncommand: [/opt/agentplane/server]\n"))
		if err != nil {
			b.Fatal(err)
		}
		benchExecute(b, newBroker(h), benchReview(b, h, reg, spec))
	})
}

func benchReview(b *testing.B, h *mcphost.Host, reg *registry, spec *mcphost.Spec) *tool.Manifest {
	b.Helper()
	snap, err := h.List(b.Context(), "bank", "", spec)
	if err != nil {
		b.Fatal(err)
	}
	ov, err := mcphost.ParseOverlays([]byte("tool: echo\nrisk: low\ntier: 2\ntimeout_ms: 5000\nside_effects: none\n"))
	if err != nil {
		b.Fatal(err)
	}
	one := &mcphost.Snapshot{}
	for _, d := range snap.Tools {
		if d.Name == "echo" {
			one.Tools = append(one.Tools, d)
		}
	}
	ms, err := mcphost.Manifests(spec.Name, one, ov)
	if err != nil {
		b.Fatal(err)
	}
	reg.mu.Lock()
	reg.cs = map[string]*mcphost.Connector{spec.Name: {Tenant: "bank", Spec: spec, Reviewed: snap, Manifests: ms}}
	reg.mu.Unlock()
	return ms[0]
}

func benchExecute(b *testing.B, br *broker.Broker, m *tool.Manifest) {
	ctx := context.Background()
	call := tool.Call{Tool: m.Name, Args: []byte(`{"text":"hi"}`), RunID: "run_bench", Tenant: "bank", User: "u", IdempotencyKey: "run_bench:1:0"}
	// Warm: the run's session (and the stdio server's sandbox) is open.
	if ex, err := br.Execute(ctx, m, call); err != nil || ex.Status != "ok" {
		b.Fatalf("warm-up call: %+v %v", ex, err)
	}
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		ex, err := br.Execute(ctx, m, call)
		lat = append(lat, time.Since(t0))
		if err != nil || ex.Status != "ok" {
			b.Fatalf("call: %+v %v", ex, err)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Nanoseconds()), "p99-ns")
	}
}
