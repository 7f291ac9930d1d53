package otelexport_test

import (
	"context"
	"encoding/json"
	"github.com/agentplane/agentplane/runs"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
	"github.com/agentplane/agentplane/trace/otelexport"
)

const secret = "TOP-SECRET-PAYLOAD-7731"

func recordedRun(t *testing.T) (*platform.Platform, []store.Event) {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	files := map[string]string{
		"models.yaml": `
providers:
  scripted: {type: scripted, script: turns.yaml}
aliases:
  - {name: m, provider: scripted, model_id: scripted-m, price: {currency: USD, input_per_mtok: 1000000, output_per_mtok: 1000000, cache_write_per_mtok: 0, cache_read_per_mtok: 0}}
`,
		"turns.yaml": `
turns:
  - text: "thinking about ` + secret + `"
    tool_calls: [{name: echo, args: {text: "` + secret + `"}}]
  - text: done
`,
		"agent.yaml": `
agent: a
version: 1
model: {alias: m}
instructions: Help.
tools: [{tool: echo}]
budgets: {max_steps: 5, max_input_tokens: 100000, max_cost_usd: 1, max_wall_clock: 1m}
`,
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := platform.Open(ctx, platform.Options{DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ms, err := tool.ParseManifests("tools.yaml", []byte("name: echo\ntier: 1\ntimeout_ms: 1000\ninput_schema: {type: object}\nside_effects: none\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.ApplyManifests(ctx, ms); err != nil {
		t.Fatal(err)
	}
	d, err := agent.LoadDefinitionFile(filepath.Join(dir, "agent.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Registry.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "a", Task: "task mentioning " + secret, Tenant: "t", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Embedded.Execute(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	evs, _ := p.Store.Events(ctx, r.ID, 0, 0)
	return p, evs
}

func TestSpansFollowGenAIConventionsWithoutPayloads(t *testing.T) {
	_, evs := recordedRun(t)
	exp := tracetest.NewInMemoryExporter()
	tp := otelexport.NewTracerProvider(exp)
	n, err := otelexport.Export(context.Background(), tp, evs)
	if err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if n != 4 || len(spans) != 4 {
		t.Fatalf("spans = %d (%d reported), want invoke_agent + 2 chat + 1 execute_tool", len(spans), n)
	}
	ops := map[string]int{}
	var root, tool tracetest.SpanStub
	for _, s := range spans {
		for _, a := range s.Attributes {
			if a.Key == "gen_ai.operation.name" {
				ops[a.Value.AsString()]++
				switch a.Value.AsString() {
				case "invoke_agent":
					root = s
				case "execute_tool":
					tool = s
				}
			}
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %s attribute %s carries a payload", s.Name, a.Key)
			}
		}
		if s.SpanContext.TraceID() != otelexport.TraceID(evs[0].RunID) {
			t.Errorf("span %s in another trace", s.Name)
		}
	}
	if ops["invoke_agent"] != 1 || ops["chat"] != 2 || ops["execute_tool"] != 1 {
		t.Fatalf("operations = %v", ops)
	}
	if tool.Parent.SpanID() != root.SpanContext.SpanID() || tool.Name != "execute_tool echo" {
		t.Fatalf("tool span %q not under the run span", tool.Name)
	}
	// Exporting again gives the same ids.
	exp2 := tracetest.NewInMemoryExporter()
	if _, err := otelexport.Export(context.Background(), otelexport.NewTracerProvider(exp2), evs); err != nil {
		t.Fatal(err)
	}
	if exp2.GetSpans()[0].SpanContext.SpanID() != spans[0].SpanContext.SpanID() {
		t.Fatal("span ids are not stable across exports")
	}
}

func TestOTLPHTTPExport(t *testing.T) {
	_, evs := recordedRun(t)
	var posts atomic.Int64
	var leaked atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" && r.Header.Get("Content-Type") == "application/x-protobuf" && len(body) > 0 {
			posts.Add(1)
		}
		if strings.Contains(string(body), secret) {
			leaked.Store(true)
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(srv.URL+"/v1/traces"), otlptracehttp.WithCompression(otlptracehttp.NoCompression))
	if err != nil {
		t.Fatal(err)
	}
	tp := otelexport.NewTracerProvider(exp)
	if _, err := otelexport.Export(context.Background(), tp, evs); err != nil {
		t.Fatal(err)
	}
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if posts.Load() == 0 {
		t.Fatal("no OTLP request reached the collector")
	}
	if leaked.Load() {
		t.Fatal("a payload reached the collector")
	}
}

// A sandboxed call's span carries the host's boundary record, never the
// sandbox's own sidecar claims, and the run span gets the teardown.
func TestSandboxBoundaryOnToolSpan(t *testing.T) {
	_, evs := recordedRun(t)
	var out []store.Event
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvToolResult:
			var r trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				t.Fatal(err)
			}
			r.Sandbox = &trace.SandboxInfo{ID: "apg-1", Host: "h1", Executor: "gvisor", Tier: 3, Lifecycle: "warm",
				ProvisionMS: 3, WallMS: 55, Outcome: "timeout", ExitCode: 137, Signal: "SIGKILL",
				StdoutBytes: 100 << 20, StdoutTruncated: true,
				Egress: []trace.EgressAttempt{{Host: "169.254.169.254", Port: 80, Reason: "metadata"}},
				Claim:  &trace.SandboxClaim{ExecMS: 40, Report: json.RawMessage(`{"peak_memory_bytes": 1, "note": "` + secret + `"}`)}}
			ev.Payload, _ = json.Marshal(r)
		case trace.EvRunCompleted:
			td, _ := json.Marshal(trace.SandboxTeardowns{Sandboxes: []trace.SandboxTeardown{{ID: "apg-1", Executor: "gvisor", By: "caller", Uses: 1}}})
			out = append(out, store.Event{RunID: ev.RunID, Seq: ev.Seq, Type: trace.EvSandboxEnd, Step: ev.Step, At: ev.At, Payload: td})
			ev.Seq++
		}
		out = append(out, ev)
	}
	exp := tracetest.NewInMemoryExporter()
	if _, err := otelexport.Export(context.Background(), otelexport.NewTracerProvider(exp), out); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"agentplane.sandbox.id": "apg-1", "agentplane.sandbox.executor": "gvisor", "agentplane.sandbox.outcome": "timeout",
		"agentplane.sandbox.exit_code": "137", "agentplane.sandbox.provision_ms": "3", "agentplane.sandbox.wall_ms": "55",
		"agentplane.sandbox.stdout_truncated": "true", "agentplane.sandbox.egress.denied": "1", "agentplane.sandbox.lifecycle": "warm",
	}
	var teardown bool
	for _, s := range exp.GetSpans() {
		for _, a := range s.Attributes {
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %s attribute %s carries sandbox or payload content", s.Name, a.Key)
			}
			if v, ok := want[string(a.Key)]; ok && s.Name == "execute_tool echo" {
				if a.Value.String() != v {
					t.Errorf("%s = %s, want %s", a.Key, a.Value.String(), v)
				}
				delete(want, string(a.Key))
			}
		}
		for _, e := range s.Events {
			if e.Name == "agentplane.sandbox.teardown" {
				teardown = true
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("tool span lacks %v", want)
	}
	if !teardown {
		t.Error("run span has no sandbox teardown event")
	}
}
