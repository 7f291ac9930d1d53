// Package otelexport derives OpenTelemetry spans from a run's event log,
// following the GenAI semantic conventions (which are still marked
// Development; the attribute set used here is pinned by SemconvVersion): one
// invoke_agent span per run, a chat span per model call and an execute_tool
// span per tool call, with the platform's own facts (decision, idempotency
// key, side effects, sandbox boundary) as agentplane.* attributes.
//
// Spans carry identifiers, sizes and hashes, never payloads: prompts, tool
// arguments and results stay in the log and blob store and are referenced by
// their sha256. So nothing a model or a tool wrote — a secret, a forged log
// line, an escape sequence — reaches the telemetry pipeline through here.
// Trace and span ids are derived from the run id and event sequence numbers,
// so exporting a run twice produces the same ids.
package otelexport

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// SemconvVersion is the GenAI semantic-conventions version the attribute
// names follow.
const SemconvVersion = "1.37.0"

// idKey carries the span id the next span must get.
type idKey struct{}

// ids derives trace and span ids from the context (see Export).
type ids struct{}

func (ids) NewIDs(ctx context.Context) (oteltrace.TraceID, oteltrace.SpanID) {
	v, _ := ctx.Value(idKey{}).(spanIDs)
	return v.trace, v.span
}

func (ids) NewSpanID(ctx context.Context, _ oteltrace.TraceID) oteltrace.SpanID {
	v, _ := ctx.Value(idKey{}).(spanIDs)
	return v.span
}

type spanIDs struct {
	trace oteltrace.TraceID
	span  oteltrace.SpanID
}

// TraceID is the trace id of a run's spans.
func TraceID(runID string) oteltrace.TraceID {
	sum := sha256.Sum256([]byte("agentplane-trace\x00" + runID))
	var t oteltrace.TraceID
	copy(t[:], sum[:16])
	return t
}

func spanID(runID string, seq int64) oteltrace.SpanID {
	sum := sha256.Sum256([]byte(fmt.Sprintf("agentplane-span\x00%s\x00%d", runID, seq)))
	var s oteltrace.SpanID
	copy(s[:], sum[:8])
	return s
}

// NewTracerProvider returns a provider whose span ids Export controls,
// exporting through exp.
func NewTracerProvider(exp sdktrace.SpanExporter) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithIDGenerator(ids{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()))
}

// Export emits the spans of one run's events through tp, which must come
// from NewTracerProvider. It returns the number of spans.
func Export(ctx context.Context, tp oteltrace.TracerProvider, evs []store.Event) (int, error) {
	if len(evs) == 0 || evs[0].Type != trace.EvRunStarted {
		return 0, fmt.Errorf("otelexport: log does not start with run_started")
	}
	runID := evs[0].RunID
	tid := TraceID(runID)
	tr := tp.Tracer("agentplane", oteltrace.WithInstrumentationVersion(SemconvVersion))
	with := func(seq int64) context.Context {
		return context.WithValue(ctx, idKey{}, spanIDs{tid, spanID(runID, seq)})
	}
	var rs trace.RunStarted
	if err := json.Unmarshal(evs[0].Payload, &rs); err != nil {
		return 0, err
	}
	end := evs[len(evs)-1].At
	rootCtx, root := tr.Start(with(0), "invoke_agent "+rs.Agent, oteltrace.WithTimestamp(evs[0].At),
		oteltrace.WithSpanKind(oteltrace.SpanKindInternal),
		oteltrace.WithAttributes(
			attribute.String("gen_ai.operation.name", "invoke_agent"),
			attribute.String("gen_ai.agent.name", rs.Agent),
			attribute.String("gen_ai.agent.id", fmt.Sprintf("%s@%d", rs.Agent, rs.AgentVersion)),
			attribute.String("gen_ai.agent.version", fmt.Sprint(rs.AgentVersion)),
			attribute.String("gen_ai.conversation.id", runID),
			attribute.String("gen_ai.request.model", rs.ModelAlias),
			attribute.String("agentplane.run.id", runID),
			attribute.String("agentplane.tenant", rs.Tenant),
			attribute.String("agentplane.agent.hash", rs.AgentHash),
		))
	n := 1
	stepStart := evs[0].At
	attempts := map[[2]int]trace.ToolAttempt{}
	attemptAt := map[[2]int]time.Time{}
	status, reason := "", ""
	for i := 1; i < len(evs); i++ {
		ev := &evs[i]
		switch ev.Type {
		case trace.EvStepStarted:
			stepStart = ev.At
		case trace.EvModelCall:
			var mc trace.ModelCall
			if err := json.Unmarshal(ev.Payload, &mc); err != nil {
				return n, err
			}
			start := ev.At.Add(-time.Duration(mc.LatencyMS) * time.Millisecond)
			if start.Before(stepStart) {
				start = stepStart
			}
			attrs := []attribute.KeyValue{
				attribute.String("gen_ai.operation.name", "chat"),
				attribute.String("gen_ai.request.model", mc.Alias),
				attribute.Int("agentplane.step", ev.Step),
				attribute.String("agentplane.prompt.sha256", mc.PromptHash),
				attribute.Int64("agentplane.prompt.bytes", mc.PromptBytes),
				attribute.Bool("agentplane.no_tools", mc.NoTools),
			}
			if mc.Model != "" {
				attrs = append(attrs, attribute.String("gen_ai.response.model", mc.Model))
			}
			if mc.CostKnown {
				attrs = append(attrs, attribute.Int64("agentplane.cost.micros", mc.CostMicros), attribute.String("agentplane.cost.currency", mc.Currency))
			}
			if mc.ReplayedFrom > 0 {
				attrs = append(attrs, attribute.Int64("agentplane.replayed_from", mc.ReplayedFrom))
			}
			if r := mc.Response; r != nil {
				attrs = append(attrs,
					attribute.Int64("gen_ai.usage.input_tokens", r.Usage.TotalInput()),
					attribute.Int64("gen_ai.usage.output_tokens", r.Usage.OutputTokens),
					attribute.Int64("gen_ai.usage.cache_read.input_tokens", r.Usage.CacheReadTokens),
					attribute.Int64("gen_ai.usage.cache_creation.input_tokens", r.Usage.CacheCreationTokens),
					attribute.StringSlice("gen_ai.response.finish_reasons", []string{r.StopReason}))
			}
			_, sp := tr.Start(context.WithValue(rootCtx, idKey{}, spanIDs{tid, spanID(runID, ev.Seq)}), "chat "+mc.Alias,
				oteltrace.WithTimestamp(start), oteltrace.WithSpanKind(oteltrace.SpanKindClient), oteltrace.WithAttributes(attrs...))
			if mc.Error != "" {
				sp.SetStatus(codes.Error, "model call failed")
			}
			sp.End(oteltrace.WithTimestamp(ev.At))
			n++
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			if err := json.Unmarshal(ev.Payload, &a); err != nil {
				return n, err
			}
			k := [2]int{ev.Step, a.Index}
			attempts[k], attemptAt[k] = a, ev.At
		case trace.EvToolResult:
			var r trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				return n, err
			}
			k := [2]int{ev.Step, r.Index}
			a := attempts[k]
			start, ok := attemptAt[k]
			if !ok {
				start = ev.At
			}
			attrs := []attribute.KeyValue{
				attribute.String("gen_ai.operation.name", "execute_tool"),
				attribute.String("gen_ai.tool.name", r.Tool),
				attribute.String("gen_ai.tool.call.id", r.CallID),
				attribute.Int("agentplane.step", ev.Step),
				attribute.String("agentplane.tool.status", r.Status),
				attribute.Int64("agentplane.tool.output.bytes", r.Bytes),
				attribute.Bool("agentplane.tool.output.truncated", r.Truncated),
				attribute.String("agentplane.tool.output.sha256", r.ResultHash),
				attribute.String("agentplane.tool.args.sha256", a.ArgsHash),
				attribute.String("agentplane.idempotency_key", a.IdempotencyKey),
				attribute.Bool("agentplane.decision.allowed", a.Decision.Allowed),
				attribute.String("agentplane.decision.control", a.Decision.Control),
				attribute.String("agentplane.tool.side_effects", a.SideEffects),
				attribute.Int("agentplane.tool.tier", a.Tier),
				attribute.Int64("agentplane.tool.latency_ms", r.LatencyMS),
			}
			if r.Output.IsBlob() {
				attrs = append(attrs, attribute.String("agentplane.tool.output.blob", r.Output.Blob))
			}
			if r.Replayed != "" {
				attrs = append(attrs, attribute.String("agentplane.replayed", r.Replayed))
			}
			attrs = append(attrs, sandboxAttrs(r.Sandbox)...)
			_, sp := tr.Start(context.WithValue(rootCtx, idKey{}, spanIDs{tid, spanID(runID, ev.Seq)}), "execute_tool "+r.Tool,
				oteltrace.WithTimestamp(start), oteltrace.WithSpanKind(oteltrace.SpanKindInternal), oteltrace.WithAttributes(attrs...))
			if r.Status != trace.StatusOK {
				sp.SetStatus(codes.Error, r.Status)
			}
			sp.End(oteltrace.WithTimestamp(ev.At))
			n++
		case trace.EvRunCompleted, trace.EvRunFailed:
			var e trace.RunEnded
			if err := json.Unmarshal(ev.Payload, &e); err != nil {
				return n, err
			}
			status, reason = e.Status, e.Reason
		case trace.EvSandboxEnd:
			var td trace.SandboxTeardowns
			if err := json.Unmarshal(ev.Payload, &td); err != nil {
				return n, err
			}
			for _, t := range td.Sandboxes {
				root.AddEvent("agentplane.sandbox.teardown", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(
					attribute.String("agentplane.sandbox.id", t.ID),
					attribute.String("agentplane.sandbox.executor", t.Executor),
					attribute.String("agentplane.sandbox.teardown", t.By),
					attribute.Int("agentplane.sandbox.uses", t.Uses),
					attribute.Bool("agentplane.sandbox.teardown.failed", t.Err != "")))
			}
		case trace.EvTaint:
			root.AddEvent("agentplane.taint", oteltrace.WithTimestamp(ev.At))
		case trace.EvBudget:
			var b trace.Budget
			_ = json.Unmarshal(ev.Payload, &b)
			root.AddEvent("agentplane.budget_exceeded", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(attribute.String("bound", b.Bound)))
		}
	}
	if status != "" {
		root.SetAttributes(attribute.String("agentplane.run.status", status))
		if status == store.StatusFailed {
			root.SetStatus(codes.Error, "run failed")
		}
		_ = reason // reasons can quote model text; they stay in the log
	}
	root.End(oteltrace.WithTimestamp(end))
	return n, nil
}

// sandboxAttrs are the host's measurements at the sandbox boundary of one
// call. What the sandbox claims (the sidecar, and exec_ms, which comes from
// it) stays in the log: nothing that comes out of a sandbox is trusted as
// telemetry.
func sandboxAttrs(b *trace.SandboxInfo) []attribute.KeyValue {
	if b == nil {
		return nil
	}
	denied := 0
	for _, e := range b.Egress {
		if !e.Allowed {
			denied++
		}
	}
	return []attribute.KeyValue{
		attribute.String("agentplane.sandbox.id", b.ID),
		attribute.String("agentplane.sandbox.host", b.Host),
		attribute.String("agentplane.sandbox.executor", b.Executor),
		attribute.Int("agentplane.sandbox.tier", b.Tier),
		attribute.Bool("agentplane.sandbox.downgraded", b.Downgraded),
		attribute.String("agentplane.sandbox.lifecycle", b.Lifecycle),
		attribute.Int64("agentplane.sandbox.provision_ms", b.ProvisionMS),
		attribute.Int64("agentplane.sandbox.wall_ms", b.WallMS),
		attribute.String("agentplane.sandbox.outcome", b.Outcome),
		attribute.Int("agentplane.sandbox.exit_code", b.ExitCode),
		attribute.String("agentplane.sandbox.signal", b.Signal),
		attribute.Int64("agentplane.sandbox.bytes_in", b.BytesIn),
		attribute.Int64("agentplane.sandbox.stdout_bytes", b.StdoutBytes),
		attribute.Int64("agentplane.sandbox.stderr_bytes", b.StderrBytes),
		attribute.Bool("agentplane.sandbox.stdout_truncated", b.StdoutTruncated),
		attribute.Bool("agentplane.sandbox.stderr_truncated", b.StderrTruncated),
		attribute.Int64("agentplane.sandbox.peak_memory_bytes", b.PeakMemoryBytes),
		attribute.String("agentplane.sandbox.teardown", b.Teardown),
		attribute.Int("agentplane.sandbox.egress.attempts", len(b.Egress)),
		attribute.Int("agentplane.sandbox.egress.denied", denied),
	}
}
