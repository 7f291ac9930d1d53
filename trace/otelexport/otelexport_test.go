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
	"time"

	"go.opentelemetry.io/otel/codes"
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

const secretTurns = `
turns:
  - text: "thinking about ` + secret + `"
    tool_calls: [{name: echo, args: {text: "` + secret + `"}}]
  - text: done
`

func recordedRun(t *testing.T, tel platform.TelemetryOptions) (*platform.Platform, []store.Event) {
	t.Helper()
	p := openPlatform(t, tel, secretTurns)
	return p, execute(t, p)
}

// openPlatform opens a platform with agent a (tool echo) whose scripted
// model plays turns.
func openPlatform(t testing.TB, tel platform.TelemetryOptions, turns string) *platform.Platform {
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
		"turns.yaml": turns,
		"agent.yaml": `
agent: a
version: 1
model: {alias: m}
instructions: Help.
tools: [{tool: echo}]
budgets: {max_steps: 50, max_input_tokens: 10000000, max_cost_usd: 1000, max_wall_clock: 10m}
`,
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	p, err := platform.Open(ctx, platform.Options{DataDir: filepath.Join(dir, "data"), ModelsFile: filepath.Join(dir, "models.yaml"), Telemetry: tel})
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
	return p
}

// execute runs agent a once and returns the run's log.
func execute(t testing.TB, p *platform.Platform) []store.Event {
	t.Helper()
	ctx := context.Background()
	r, err := p.Runs.Start(ctx, runs.StartRequest{Agent: "a", Task: "task mentioning " + secret, Tenant: "t", User: "u"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Embedded.Execute(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	evs, err := p.Store.Events(ctx, r.ID, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func TestSpansFollowGenAIConventionsWithoutPayloads(t *testing.T) {
	_, evs := recordedRun(t, platform.TelemetryOptions{})
	ro, err := otelexport.Derive(context.Background(), evs, func(string) string { return "scripted" })
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.SpanStubsFromReadOnlySpans(ro)
	if len(spans) != 4 {
		t.Fatalf("spans = %d, want invoke_agent + 2 chat + 1 execute_tool", len(spans))
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
	again, err := otelexport.Derive(context.Background(), evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if again[0].SpanContext().SpanID() != spans[0].SpanContext.SpanID() {
		t.Fatal("span ids are not stable across exports")
	}
}

func TestOTLPHTTPExport(t *testing.T) {
	_, evs := recordedRun(t, platform.TelemetryOptions{})
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
	spans, err := otelexport.Derive(context.Background(), evs, nil)
	if err != nil {
		t.Fatal(err)
	}
	sent, failed, err := otelexport.ExportBatches(context.Background(), exp, spans, 2, 5*time.Second)
	if err != nil || failed != 0 || sent != len(spans) {
		t.Fatalf("sent %d, failed %d: %v", sent, failed, err)
	}
	if posts.Load() != 2 {
		t.Fatalf("%d OTLP requests for 4 spans in batches of 2, want 2", posts.Load())
	}
	if leaked.Load() {
		t.Fatal("a payload reached the collector")
	}
}

// A sandboxed call's span carries the host's boundary record, never the
// sandbox's own sidecar claims, and the run span gets the teardown.
func TestSandboxBoundaryOnToolSpan(t *testing.T) {
	_, evs := recordedRun(t, platform.TelemetryOptions{})
	out := sandboxedLog(t, evs)
	ro, err := otelexport.Derive(context.Background(), out, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"agentplane.sandbox.id": "apg-1", "agentplane.sandbox.executor": "gvisor", "agentplane.sandbox.outcome": "timeout",
		"agentplane.sandbox.exit_code": "137", "agentplane.sandbox.provision_ms": "3", "agentplane.sandbox.wall_ms": "55",
		"agentplane.sandbox.stdout_truncated": "true", "agentplane.sandbox.egress.denied": "1", "agentplane.sandbox.lifecycle": "warm",
		"agentplane.sandbox.timed_out": "true", "agentplane.sandbox.killed": "true", "agentplane.sandbox.host": "h1",
		"agentplane.sandbox.bytes_out": "104857600", "agentplane.sandbox.guest_claim.exec_ms": "40",
	}
	var teardown bool
	for _, s := range tracetest.SpanStubsFromReadOnlySpans(ro) {
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

// sandboxedLog is evs with the tool call made in a (simulated) gVisor
// sandbox that timed out, whose guest claims carry a payload, and a
// sandbox teardown before the run ended.
func sandboxedLog(t *testing.T, evs []store.Event) []store.Event {
	t.Helper()
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
				StdoutBytes: 100 << 20, StdoutTruncated: true, BytesIn: 12, Teardown: "destroyed",
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
	return out
}

// Spans a sandboxed program emitted (as the host accepted them) are
// exported under the call's execute_tool span, in the run's trace, inside
// the tool span's time, marked as the guest's; what was dropped is an
// event on the run span.
func TestGuestSpansUnderToolSpan(t *testing.T) {
	_, evs := recordedRun(t, platform.TelemetryOptions{})
	out := sandboxedLog(t, evs)
	var key, runID string
	for i, ev := range out {
		switch ev.Type {
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			if err := json.Unmarshal(ev.Payload, &a); err != nil {
				t.Fatal(err)
			}
			key, runID = a.IdempotencyKey, ev.RunID
		case trace.EvToolResult:
			var r trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				t.Fatal(err)
			}
			r.Sandbox.GuestSpans = &trace.GuestSpans{Dropped: 2, Reasons: []string{"forged"}, Spans: []trace.GuestSpan{
				{Name: "query db", Parent: -1, StartUS: 1000, DurationUS: 5000, Attributes: map[string]any{"db.rows": 12, "db.system": "sqlite"}},
				{Name: "parse", Parent: 0, StartUS: 2000, DurationUS: 999_999_999, Error: true},
			}}
			out[i].Payload, _ = json.Marshal(r)
		}
	}
	ro, err := otelexport.Derive(context.Background(), out, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range tracetest.SpanStubsFromReadOnlySpans(ro) {
		byName[s.Name] = s
	}
	tool, q, p := byName["execute_tool echo"], byName["query db"], byName["parse"]
	if q.Name == "" || p.Name == "" {
		t.Fatalf("guest spans missing: %v", byName)
	}
	if q.SpanContext.TraceID() != otelexport.TraceID(runID) || q.Parent.SpanID() != otelexport.ToolSpanID(key) ||
		q.Parent.SpanID() != tool.SpanContext.SpanID() || q.SpanContext.SpanID() != otelexport.GuestSpanID(key, 0) {
		t.Errorf("query db: trace %s parent %s, want trace %s parent (tool span) %s", q.SpanContext.TraceID(), q.Parent.SpanID(), otelexport.TraceID(runID), tool.SpanContext.SpanID())
	}
	if p.Parent.SpanID() != q.SpanContext.SpanID() || p.Status.Code != codes.Error {
		t.Errorf("parse: parent %s status %v", p.Parent.SpanID(), p.Status)
	}
	for _, s := range []tracetest.SpanStub{q, p} {
		if s.StartTime.Before(tool.StartTime) || s.EndTime.After(tool.EndTime) {
			t.Errorf("%s runs %s..%s, outside its tool span %s..%s", s.Name, s.StartTime, s.EndTime, tool.StartTime, tool.EndTime)
		}
		marked := false
		for _, a := range s.Attributes {
			if a.Key == "agentplane.sandbox.guest_span" && a.Value.AsBool() {
				marked = true
			}
			if a.Key == "db.rows" && a.Value.AsInt64() != 12 {
				t.Errorf("db.rows = %s", a.Value.String())
			}
		}
		if !marked {
			t.Errorf("%s is not marked as the guest's", s.Name)
		}
	}
	dropped := false
	for _, e := range byName["invoke_agent a"].Events {
		dropped = dropped || e.Name == "agentplane.sandbox.guest_spans_dropped"
	}
	if !dropped {
		t.Error("no event counts the dropped guest spans")
	}
}
