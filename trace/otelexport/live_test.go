package otelexport_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/sandbox/toolrun"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace/otelexport"
)

// flushed waits until the platform's tail delivered every append and the
// live export sent (or gave up on) every span.
func flushed(t *testing.T, p *platform.Platform) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Telemetry.Tail.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.Telemetry.Spans.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

func names(stubs tracetest.SpanStubs) []string {
	var out []string
	for _, s := range stubs {
		out = append(out, s.Name+"/"+s.SpanContext.SpanID().String()+"/"+s.Parent.SpanID().String())
	}
	slices.Sort(out)
	return out
}

// The live export, fed by the tail as the engine appends, sends the same
// spans (names, ids, parents) that a derivation of the whole log gives,
// without the loop or the engine knowing.
func TestLiveSpansAreTheLogsSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	p, evs := recordedRun(t, platform.TelemetryOptions{Exporter: exp, Batcher: otelexport.BatcherOptions{Interval: 10 * time.Millisecond}})
	flushed(t, p)
	live := exp.GetSpans()
	ro, err := otelexport.Derive(context.Background(), evs, p.ModelProvider)
	if err != nil {
		t.Fatal(err)
	}
	want := names(tracetest.SpanStubsFromReadOnlySpans(ro))
	if got := names(live); !slices.Equal(got, want) {
		t.Fatalf("live spans\n%v\nwant the log's\n%v", got, want)
	}
	var chats int
	for _, s := range live {
		for _, a := range s.Attributes {
			if a.Key == "gen_ai.provider.name" && strings.HasPrefix(s.Name, "chat ") && a.Value.AsString() == "scripted" {
				chats++
			}
			if strings.Contains(a.Value.String(), secret) {
				t.Errorf("span %s attribute %s carries a payload", s.Name, a.Key)
			}
		}
	}
	if chats != 2 {
		t.Errorf("%d chat spans name the provider type, want 2", chats)
	}
	if st := p.Telemetry.Spans.Stats(); st.Exported != int64(len(want)) || st.Dropped+st.Failed != 0 {
		t.Errorf("stats %+v, want %d exported", st, len(want))
	}
}

func droppedMetric(t *testing.T, p *platform.Platform) float64 {
	t.Helper()
	mfs, err := p.Telemetry.Metrics.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() == "agentplane_otel_spans_dropped_total" {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// A collector that is down, answers 500 or never answers does not hold up
// or fail the run: the spans are counted as lost (in the stats and the
// metrics), the run is remembered, and its spans can be sent again from
// the log with the same ids.
func TestLiveExportNeverHoldsTheRun(t *testing.T) {
	down := func(t *testing.T) string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		return "http://" + addr + "/v1/traces"
	}
	serve := func(t *testing.T, h http.HandlerFunc) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL + "/v1/traces"
	}
	cases := map[string]func(t *testing.T) string{
		"down": down,
		"500": func(t *testing.T) string {
			return serve(t, func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.Copy(io.Discard, r.Body)
				w.WriteHeader(http.StatusInternalServerError)
			})
		},
		"slow": func(t *testing.T) string {
			release := make(chan struct{})
			url := serve(t, func(w http.ResponseWriter, r *http.Request) {
				select {
				case <-release:
				case <-r.Context().Done():
				}
			})
			t.Cleanup(func() { close(release) })
			return url
		},
	}
	for name, endpoint := range cases {
		t.Run(name, func(t *testing.T) {
			exp, err := otelexport.NewOTLPExporter(context.Background(), endpoint(t), 100*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			p, evs := recordedRun(t, platform.TelemetryOptions{Exporter: exp,
				Batcher: otelexport.BatcherOptions{QueueSize: 2, BatchSize: 2, Interval: 10 * time.Millisecond, Timeout: 300 * time.Millisecond}})
			run, err := p.Store.GetRun(context.Background(), evs[0].RunID)
			if err != nil || run.Status != store.StatusCompleted {
				t.Fatalf("run %v, %v; want completed", run, err)
			}
			flushed(t, p)
			st := p.Telemetry.Spans.Stats()
			if st.Exported != 0 || st.Dropped+st.Failed != 4 {
				t.Fatalf("stats %+v: want all 4 spans lost and counted", st)
			}
			if got := droppedMetric(t, p); got != 4 {
				t.Errorf("agentplane_otel_spans_dropped_total = %v, want 4", got)
			}
			if lost := p.Telemetry.Spans.Lost(); !slices.Equal(lost, []string{evs[0].RunID}) {
				t.Errorf("lost runs %v, want [%s]", lost, evs[0].RunID)
			}
			// Re-export from the log.
			again := tracetest.NewInMemoryExporter()
			ro, err := otelexport.Derive(context.Background(), evs, p.ModelProvider)
			if err != nil {
				t.Fatal(err)
			}
			if sent, failed, err := otelexport.ExportBatches(context.Background(), again, ro, 0, time.Second); sent != 4 || failed != 0 || err != nil {
				t.Fatalf("re-export sent %d failed %d: %v", sent, failed, err)
			}
		})
	}
}

// A sandboxed call's span is the parent its sandbox was told of.
func TestToolSpanIsTheSandboxesParent(t *testing.T) {
	run, key := "run_x", "run_x:3:1"
	want := "00-" + otelexport.TraceID(run).String() + "-" + otelexport.ToolSpanID(key).String() + "-01"
	if got := toolrun.Traceparent(run, key); got != want {
		t.Fatalf("sandbox traceparent %s, tool span %s", got, want)
	}
}
