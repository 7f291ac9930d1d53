package platform

import (
	"context"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentplane/agentplane/trace/otelexport"
	"github.com/agentplane/agentplane/trace/runmetrics"
	"github.com/agentplane/agentplane/trace/tail"
)

// TelemetryOptions configure what the platform derives from the events it
// appends (docs/design/telemetry.md).
type TelemetryOptions struct {
	// OTLP is the endpoint live spans go to (otelexport.EndpointHelp); ""
	// with no Exporter exports none.
	OTLP string
	// Exporter, when set, is used instead of an OTLP exporter (tests,
	// benchmarks).
	Exporter sdktrace.SpanExporter
	// Batcher bounds the live export's queue and requests.
	Batcher otelexport.BatcherOptions
	// Poll is how often the tail reads appends not yet committed (default
	// 200ms).
	Poll time.Duration
}

// Telemetry is what the platform derives from its runs' logs as they are
// appended: Prometheus metrics always, live OpenTelemetry spans when an
// endpoint is configured. Both read the same committed events, through
// one tail.
type Telemetry struct {
	Tail    *tail.Tail
	Metrics *runmetrics.Metrics
	// Spans is the live span export (nil when none is configured).
	Spans *otelexport.Live
}

// openTelemetry builds and starts the tail and its sinks.
func (p *Platform) openTelemetry(ctx context.Context, o Options) error {
	t := &Telemetry{}
	exp := o.Telemetry.Exporter
	if exp == nil && o.Telemetry.OTLP != "" {
		var err error
		exp, err = otelexport.NewOTLPExporter(ctx, o.Telemetry.OTLP, 5*time.Second)
		if err != nil {
			return err
		}
	}
	var exported func() float64
	if exp != nil {
		t.Spans = otelexport.NewLive(otelexport.LiveOptions{Exporter: exp, Batcher: o.Telemetry.Batcher, Provider: p.ModelProvider,
			Logger: o.Logger, OnDrop: func(reason string, n int) { t.Metrics.SpansDropped(reason, n) }})
		exported = func() float64 { return float64(t.Spans.Stats().Exported) }
	}
	t.Metrics = runmetrics.New(exported)
	sinks := []tail.Sink{t.Metrics}
	if t.Spans != nil {
		sinks = append(sinks, t.Spans)
	}
	t.Tail = tail.New(tail.Options{Events: p.Store, Sinks: sinks, Poll: o.Telemetry.Poll, Logger: o.Logger})
	if err := t.Tail.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	p.Telemetry = t
	return nil
}

// closeTelemetry delivers what was committed, then sends the queued spans
// (for at most five seconds: a collector that is down does not hold up
// the process's exit; what is lost is counted and logged).
func (t *Telemetry) close() error {
	t.Tail.Stop()
	if t.Spans == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return t.Spans.Shutdown(ctx)
}

// ModelProvider names the GenAI provider (gen_ai.provider.name) behind a
// model alias: the type of its provider in models.yaml (anthropic, openai,
// or scripted), "" when the alias is unknown.
func (p *Platform) ModelProvider(alias string) string {
	return p.providerTypes[alias]
}
