package cli

import (
	"fmt"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"

	"github.com/agentplane/agentplane/trace/otelexport"
)

// traceExport sends a run's spans, derived from its log, to an OTLP/HTTP
// endpoint (an OpenTelemetry Collector, or a backend that accepts OTLP).
func (c *command) traceExport(args []string) error {
	var cm common
	fs := c.flags("trace export", &cm)
	endpoint := fs.String("otlp", "", "OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces (required)")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || *endpoint == "" {
		return exitCode{2, "usage: agentplane trace export RUN [RUN...] --otlp URL"}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	exp, err := otlptracehttp.New(c.ctx, otlptracehttp.WithEndpointURL(*endpoint))
	if err != nil {
		return err
	}
	tp := otelexport.NewTracerProvider(exp)
	total := 0
	for _, id := range pos {
		evs, err := p.Store.Events(c.ctx, id, 0, 0)
		if err != nil {
			return err
		}
		n, err := otelexport.Export(c.ctx, tp, evs)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		total += n
	}
	if err := tp.Shutdown(c.ctx); err != nil {
		return fmt.Errorf("export to %s: %w", *endpoint, err)
	}
	fmt.Fprintf(c.out, "exported %d spans of %d runs to %s (trace id = sha256 of the run id; payloads stay in the log)\n", total, len(pos), *endpoint)
	return nil
}
