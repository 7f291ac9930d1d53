package otelexport_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/trace/otelexport"
)

// benchSteps is the steps of each benchmarked run: a tool call per step
// and a final answer.
const benchSteps = 10

func benchTurns() string {
	var b strings.Builder
	b.WriteString("turns:\n")
	for i := 1; i < benchSteps; i++ {
		fmt.Fprintf(&b, "  - tool_calls: [{name: echo, args: {text: \"step %d\"}}]\n", i)
	}
	b.WriteString("  - text: done\n")
	return b.String()
}

// BenchmarkStepOverhead measures a run's time per step with the live
// export off, and on against a collector that is up (the real Collector
// when AGENTPLANE_OTELCOL is set, else an OTLP endpoint answering 200),
// down (nothing listening) and slow (answering after 2s, past the batch
// timeout). scripts/bench-otel.sh prints them as a benchstat table.
func BenchmarkStepOverhead(b *testing.B) {
	slowRelease := make(chan struct{})
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(2 * time.Second):
		case <-slowRelease:
		case <-r.Context().Done():
		}
	}))
	defer slow.Close()
	defer close(slowRelease)
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) }))
	defer ok.Close()
	up, upName := ok.URL+"/v1/traces", "up-http200"
	if os.Getenv("AGENTPLANE_OTELCOL") != "" {
		c := startCollector(b)
		up, upName = "grpc://"+c.grpc, "up-collector"
	}
	for _, bc := range []struct{ name, endpoint string }{
		{"off", ""},
		{upName, up},
		{"down", "http://" + freePort(b) + "/v1/traces"},
		{"slow", slow.URL + "/v1/traces"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			p := openPlatform(b, platform.TelemetryOptions{OTLP: bc.endpoint,
				Batcher: otelexport.BatcherOptions{Timeout: 500 * time.Millisecond}}, benchTurns())
			execute(b, p) // warm
			b.ResetTimer()
			start := time.Now()
			for range b.N {
				if evs := execute(b, p); len(evs) == 0 {
					b.Fatal("no events")
				}
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(elapsed.Microseconds())/1000/float64(b.N*benchSteps), "ms/step")
			if p.Telemetry.Spans != nil {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				_ = p.Telemetry.Tail.Sync(ctx)
				_ = p.Telemetry.Spans.Flush(ctx)
				st := p.Telemetry.Spans.Stats()
				b.ReportMetric(float64(st.Dropped+st.Failed)/float64(b.N+1), "lost-spans/run")
			}
		})
	}
}
