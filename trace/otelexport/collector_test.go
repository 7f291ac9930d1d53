package otelexport_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/trace/otelexport"
)

// collector is a real OpenTelemetry Collector (scripts/setup-otelcol.sh)
// on loopback, printing what it receives with the debug exporter.
type collector struct {
	http, grpc string // host:port
	mu         sync.Mutex
	out        bytes.Buffer
}

func (c *collector) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.Write(p)
}

func (c *collector) output() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.out.String()
}

func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func startCollector(t testing.TB) *collector {
	t.Helper()
	bin := os.Getenv("AGENTPLANE_OTELCOL")
	if bin == "" {
		if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
			t.Fatal("AGENTPLANE_OTELCOL is not set: source scripts/setup-otelcol.sh (scripts/test.sh does)")
		}
		t.Skip("no OpenTelemetry Collector: run `. scripts/setup-otelcol.sh` (builds one, about 4.5 minutes once) to set AGENTPLANE_OTELCOL")
	}
	c := &collector{http: freePort(t), grpc: freePort(t)}
	cfg := fmt.Sprintf(`receivers:
  otlp:
    protocols:
      http: {endpoint: "%s"}
      grpc: {endpoint: "%s"}
processors:
  batch: {timeout: 50ms}
exporters:
  debug: {verbosity: detailed}
service:
  telemetry:
    metrics: {level: none}
  pipelines:
    traces: {receivers: [otlp], processors: [batch], exporters: [debug]}
`, c.http, c.grpc)
	path := filepath.Join(t.TempDir(), "otelcol.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config", "file:"+path)
	cmd.Stdout, cmd.Stderr = c, c
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(c.output(), "Everything is ready") {
		select {
		case <-done:
			t.Fatalf("collector exited:\n%s", c.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector not ready in 30s:\n%s", c.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return c
}

// received is one span as the debug exporter printed it.
type received struct {
	trace, parent, id, name, kind string
	attrs                         map[string]string
}

// spans parses the debug exporter's detailed output.
func (c *collector) spans() []received {
	var out []received
	var cur *received
	inAttrs := false
	sc := bufio.NewScanner(strings.NewReader(c.output()))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		trim := strings.TrimSpace(line)
		field := func(name string) (string, bool) {
			v, ok := strings.CutPrefix(trim, name)
			if !ok {
				return "", false
			}
			v, ok = strings.CutPrefix(strings.TrimLeft(v, " "), ":")
			return strings.TrimSpace(v), ok
		}
		switch {
		case strings.HasPrefix(trim, "Span #"):
			out = append(out, received{attrs: map[string]string{}})
			cur, inAttrs = &out[len(out)-1], false
		case cur == nil:
		case strings.HasPrefix(trim, "Attributes:"):
			inAttrs = true
		case strings.HasPrefix(trim, "Events:") || strings.HasPrefix(trim, "SpanEvent #") || strings.HasPrefix(trim, "ScopeSpans #") || strings.HasPrefix(trim, "ResourceSpans #"):
			inAttrs = false
		case inAttrs && strings.HasPrefix(trim, "-> "):
			k, v, _ := strings.Cut(strings.TrimPrefix(trim, "-> "), ": ")
			cur.attrs[k] = v
		default:
			if v, ok := field("Trace ID"); ok {
				cur.trace = v
			} else if v, ok := field("Parent ID"); ok {
				cur.parent = v
			} else if v, ok := field("ID"); ok {
				cur.id = v
			} else if v, ok := field("Name"); ok {
				cur.name = v
			} else if v, ok := field("Kind"); ok {
				cur.kind = v
			}
		}
	}
	return out
}

// waitSpans waits until the collector printed n spans of trace tid and
// returns the first of each name.
func (c *collector) waitSpans(t *testing.T, tid string, n int) map[string]received {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		got := map[string]received{}
		ids := map[string]bool{}
		for _, s := range c.spans() {
			if s.trace == tid && !ids[s.id] {
				ids[s.id] = true
				if _, ok := got[s.name]; !ok {
					got[s.name] = s // the first of its name
				}
			}
		}
		if len(ids) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("collector printed %d of %d spans of trace %s:\n%s", len(ids), n, tid, c.output())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Spans go through a real Collector over OTLP/HTTP and OTLP/gRPC, live
// from a run as it executes, and arrive with the parent links and
// attribute names of the pinned GenAI conventions, and no payload.
func TestRealCollector(t *testing.T) {
	c := startCollector(t)
	for _, proto := range []string{"http", "grpc"} {
		t.Run(proto, func(t *testing.T) {
			endpoint := "http://" + c.http + "/v1/traces"
			if proto == "grpc" {
				endpoint = "grpc://" + c.grpc
			}
			p, evs := recordedRun(t, platform.TelemetryOptions{OTLP: endpoint, Batcher: otelexport.BatcherOptions{Interval: 20 * time.Millisecond}})
			flushed(t, p)
			if st := p.Telemetry.Spans.Stats(); st.Exported != 4 {
				t.Fatalf("stats %+v, want 4 exported", st)
			}
			tid := otelexport.TraceID(evs[0].RunID).String()
			got := c.waitSpans(t, tid, 4)
			root, chat, tool := got["invoke_agent a"], got["chat m"], got["execute_tool echo"]
			if root.id == "" || chat.id == "" || tool.id == "" {
				t.Fatalf("spans %v", got)
			}
			if root.parent != "" || chat.parent != root.id || tool.parent != root.id {
				t.Errorf("parents: root %q, chat %q, tool %q; want chat and tool under %q", root.parent, chat.parent, tool.parent, root.id)
			}
			if chat.kind != "Client" || tool.kind != "Internal" || root.kind != "Internal" {
				t.Errorf("kinds: root %s, chat %s, tool %s", root.kind, chat.kind, tool.kind)
			}
			want := map[*received]map[string]string{
				&root: {"gen_ai.operation.name": "Str(invoke_agent)", "gen_ai.agent.name": "Str(a)", "gen_ai.agent.version": "Str(1)",
					"gen_ai.provider.name": "Str(scripted)", "agentplane.run.status": "Str(completed)"},
				&chat: {"gen_ai.operation.name": "Str(chat)", "gen_ai.provider.name": "Str(scripted)", "gen_ai.request.model": "Str(m)",
					"gen_ai.usage.input_tokens": "", "gen_ai.usage.output_tokens": "", "gen_ai.usage.cache_read.input_tokens": "Int(0)",
					"gen_ai.usage.cache_creation.input_tokens": "Int(0)", "gen_ai.response.finish_reasons": "", "agentplane.prompt.sha256": ""},
				&tool: {"gen_ai.operation.name": "Str(execute_tool)", "gen_ai.tool.name": "Str(echo)", "gen_ai.tool.call.id": "",
					"agentplane.tool.tier": "Int(1)", "agentplane.tool.side_effects": "Str(none)", "agentplane.decision.allowed": "Bool(true)",
					"agentplane.decision.control": "", "agentplane.tool.output.sha256": ""},
			}
			for s, attrs := range want {
				for k, v := range attrs {
					have, ok := s.attrs[k]
					if !ok || v != "" && have != v {
						t.Errorf("span %s: %s = %q, want %q", s.name, k, have, v)
					}
				}
			}
			if strings.Contains(c.output(), secret) {
				t.Error("a payload reached the collector")
			}
		})
	}
	// A sandboxed call's boundary record, sent by trace export's path.
	t.Run("sandbox", func(t *testing.T) {
		_, evs := recordedRun(t, platform.TelemetryOptions{})
		ro, err := otelexport.Derive(context.Background(), sandboxedLog(t, evs), nil)
		if err != nil {
			t.Fatal(err)
		}
		exp, err := otelexport.NewOTLPExporter(context.Background(), "grpc://"+c.grpc, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer exp.Shutdown(context.Background())
		if sent, _, err := otelexport.ExportBatches(context.Background(), exp, ro, 0, 10*time.Second); err != nil || sent != len(ro) {
			t.Fatalf("sent %d of %d: %v", sent, len(ro), err)
		}
		tool := c.waitSpans(t, otelexport.TraceID(evs[0].RunID).String(), 4)["execute_tool echo"]
		for k, v := range map[string]string{"agentplane.sandbox.id": "Str(apg-1)", "agentplane.sandbox.host": "Str(h1)",
			"agentplane.sandbox.lifecycle": "Str(warm)", "agentplane.sandbox.provision_ms": "Int(3)", "agentplane.sandbox.wall_ms": "Int(55)",
			"agentplane.sandbox.exit_code": "Int(137)", "agentplane.sandbox.bytes_in": "Int(12)", "agentplane.sandbox.bytes_out": "Int(104857600)",
			"agentplane.sandbox.stdout_truncated": "Bool(true)", "agentplane.sandbox.timed_out": "Bool(true)", "agentplane.sandbox.killed": "Bool(true)",
			"agentplane.sandbox.teardown": "Str(destroyed)", "agentplane.sandbox.guest_claim.exec_ms": "Int(40)"} {
			if tool.attrs[k] != v {
				t.Errorf("%s = %q, want %q", k, tool.attrs[k], v)
			}
		}
		if strings.Contains(c.output(), secret) {
			t.Error("a payload or the guest's report reached the collector")
		}
	})
}
