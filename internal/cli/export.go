package cli

import (
	"fmt"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/agentplane/agentplane/trace/otelexport"
)

// traceExport sends runs' spans, derived from their logs, to an OTLP
// endpoint (an OpenTelemetry Collector, or a backend that accepts OTLP), in
// batches. Span ids are derived from the log, so exporting again (after
// the live export lost spans, say) gives the same ids. It fails, saying how
// many spans were not accepted, when any were not.
func (c *command) traceExport(args []string) error {
	var cm common
	fs := c.flags("trace export", &cm)
	endpoint := fs.String("otlp", "", "OTLP endpoint (required): "+otelexport.EndpointHelp)
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each batch's request, retries included")
	batch := fs.Int("batch", 512, "spans per request")
	pos, err := parseInterleaved(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 || *endpoint == "" {
		return exitCode{2, "usage: agentplane trace export RUN|last [RUN...] --otlp URL"}
	}
	p, err := c.open(&cm, nil)
	if err != nil {
		return err
	}
	defer p.Close()
	exp, err := otelexport.NewOTLPExporter(c.ctx, *endpoint, *timeout/2)
	if err != nil {
		return err
	}
	defer exp.Shutdown(c.ctx)
	var spans []sdktrace.ReadOnlySpan
	for _, ref := range pos {
		id, err := c.runRef(p, "trace export", ref)
		if err != nil {
			return err
		}
		evs, err := p.Store.Events(c.ctx, id, 0, 0)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		s, err := otelexport.Derive(c.ctx, evs, p.ModelProvider)
		if err != nil {
			return fmt.Errorf("run %s: %w", id, err)
		}
		spans = append(spans, s...)
	}
	sent, failed, err := otelexport.ExportBatches(c.ctx, exp, spans, *batch, *timeout)
	if failed > 0 {
		return exitCode{1, fmt.Sprintf("export to %s: %d of %d spans failed (%d sent): %v; run the command again to resend them (same span ids)",
			*endpoint, failed, len(spans), sent, err)}
	}
	fmt.Fprintf(c.out, "exported %d spans of %d runs to %s (trace id from the run id; payloads stay in the log)\n", sent, len(pos), *endpoint)
	return nil
}
