// Package otelexport derives OpenTelemetry spans from a run's event log,
// following the OpenTelemetry GenAI semantic conventions as released in
// their own repository, open-telemetry/semantic-conventions-genai, at the
// version pinned by SemconvVersion (the conventions are still marked
// Development): one invoke_agent span per run, a chat span per model call
// and an execute_tool span per tool call, with the platform's own facts
// (the broker's decision and the control that made it, tier, side effects,
// idempotency key, the sandbox boundary record) as agentplane.* attributes.
//
// Spans carry identifiers, sizes and hashes, never payloads: prompts, tool
// arguments and results stay in the log and blob store and are referenced by
// their sha256 and size. The few strings a model chose that do reach a span
// (a tool name, a call id, a response model) are redacted, stripped of
// control characters and capped first. Trace and span ids are derived from
// the run id, the event sequence numbers and the calls' idempotency keys, so
// exporting a run twice produces the same ids, and a sandboxed call's span
// is the parent named by the traceparent its sandbox was given.
//
// Export derives a whole run at once (agentplane trace export); Live
// derives spans from the events as they are committed and sends them in
// batches from a bounded queue (live.go); Batcher is that queue.
package otelexport

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	oteltrace "go.opentelemetry.io/otel/trace"

	"github.com/agentplane/agentplane/redact"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// The GenAI semantic conventions the span and attribute names follow:
// release SemconvVersion of the repository SemconvRepository (its first
// standalone release, which depends on semantic-conventions v1.45.0).
const (
	SemconvRepository = "github.com/open-telemetry/semantic-conventions-genai"
	SemconvVersion    = "0.1.0"
)

// InstrumentationName is the instrumentation scope of every span.
const InstrumentationName = "github.com/agentplane/agentplane/trace/otelexport"

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

// TraceID is the trace id of a run's spans. It is the trace id of the
// traceparent a sandboxed call is given (sandbox/toolrun.Traceparent).
func TraceID(runID string) oteltrace.TraceID {
	sum := sha256.Sum256([]byte("trace:" + runID))
	var t oteltrace.TraceID
	copy(t[:], sum[:16])
	return t
}

// ToolSpanID is the span id of the execute_tool span of the call with this
// idempotency key: the parent span id of its sandbox's traceparent.
func ToolSpanID(idempotencyKey string) oteltrace.SpanID {
	sum := sha256.Sum256([]byte("span:" + idempotencyKey))
	var s oteltrace.SpanID
	copy(s[:], sum[:8])
	return s
}

// GuestSpanID is the span id of the i-th span a sandboxed program emitted
// during the call with this idempotency key.
func GuestSpanID(idempotencyKey string, i int) oteltrace.SpanID {
	sum := sha256.Sum256([]byte(fmt.Sprintf("guest-span:%s:%d", idempotencyKey, i)))
	var s oteltrace.SpanID
	copy(s[:], sum[:8])
	return s
}

func spanID(runID string, seq int64) oteltrace.SpanID {
	sum := sha256.Sum256([]byte(fmt.Sprintf("agentplane-span\x00%s\x00%d", runID, seq)))
	var s oteltrace.SpanID
	copy(s[:], sum[:8])
	return s
}

func newProvider(sp sdktrace.SpanProcessor) *sdktrace.TracerProvider {
	return sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sp), sdktrace.WithIDGenerator(ids{}),
		sdktrace.WithSampler(sdktrace.AlwaysSample()))
}

// ProviderFunc names the GenAI provider (gen_ai.provider.name: anthropic,
// openai, ...) behind a model alias; "" when unknown.
type ProviderFunc func(alias string) string

// Derive returns the spans of one run's whole log, in the order they end
// (agentplane trace export; tests). A run that has not ended gets its run
// span ended at its last event.
func Derive(ctx context.Context, evs []store.Event, provider ProviderFunc) ([]sdktrace.ReadOnlySpan, error) {
	if len(evs) == 0 || evs[0].Type != trace.EvRunStarted {
		return nil, fmt.Errorf("otelexport: log does not start with run_started")
	}
	var c collector
	tp := newProvider(sdktrace.NewSimpleSpanProcessor(&c))
	defer tp.Shutdown(context.WithoutCancel(ctx))
	d := newDeriver(ctx, tp, evs[0].RunID, provider)
	for i := range evs {
		if err := d.feed(&evs[i], true); err != nil {
			return c.spans, fmt.Errorf("otelexport: run %s event %d (%s): %w", evs[i].RunID, evs[i].Seq, evs[i].Type, err)
		}
	}
	d.endRoot(evs[len(evs)-1].At)
	return c.spans, nil
}

// collector keeps the spans handed to it.
type collector struct{ spans []sdktrace.ReadOnlySpan }

func (c *collector) ExportSpans(_ context.Context, s []sdktrace.ReadOnlySpan) error {
	c.spans = append(c.spans, s...)
	return nil
}

func (c *collector) Shutdown(context.Context) error { return nil }

// deriver turns one run's events, fed in order, into spans. Child spans
// are emitted when the event that ends them is fed; the invoke_agent span
// when the run ends (or by endRoot). Every span's id is known from the log
// alone, so children go out before their parent.
type deriver struct {
	ctx      context.Context
	tr       oteltrace.Tracer
	runID    string
	tid      oteltrace.TraceID
	provider ProviderFunc
	red      *redact.Redactor

	rootCtx   context.Context
	root      oteltrace.Span
	model     string
	stepStart time.Time
	attempts  map[[2]int]attempt
	spans     int
	ended     bool
}

type attempt struct {
	a  trace.ToolAttempt
	at time.Time
}

func newDeriver(ctx context.Context, tp oteltrace.TracerProvider, runID string, provider ProviderFunc) *deriver {
	if provider == nil {
		provider = func(string) string { return "" }
	}
	return &deriver{ctx: ctx, runID: runID, tid: TraceID(runID), provider: provider, red: redact.New(),
		tr:       tp.Tracer(InstrumentationName, oteltrace.WithInstrumentationVersion(SemconvVersion)),
		attempts: map[[2]int]attempt{}}
}

// with returns a context whose next span gets span id s.
func (d *deriver) with(parent context.Context, s oteltrace.SpanID) context.Context {
	return context.WithValue(parent, idKey{}, spanIDs{d.tid, s})
}

// clean makes a string a model or a tool chose fit for an attribute.
func (d *deriver) clean(s string) string {
	out, _ := d.red.Attr(s, 128, false)
	return out
}

// feed takes the run's next event. With emit false it only learns the
// run's state (the events were exported before); the run span is still
// built, since it is emitted only once, at the end.
func (d *deriver) feed(ev *store.Event, emit bool) error {
	if d.ended {
		return nil
	}
	if d.root == nil && ev.Type != trace.EvRunStarted {
		return fmt.Errorf("log does not start with run_started")
	}
	switch ev.Type {
	case trace.EvRunStarted:
		var rs trace.RunStarted
		if err := json.Unmarshal(ev.Payload, &rs); err != nil {
			return err
		}
		d.model, d.stepStart = rs.ModelAlias, ev.At
		attrs := []attribute.KeyValue{
			attribute.String("gen_ai.operation.name", "invoke_agent"),
			attribute.String("gen_ai.agent.name", rs.Agent),
			attribute.String("gen_ai.agent.version", fmt.Sprint(rs.AgentVersion)),
			attribute.String("gen_ai.conversation.id", d.runID),
			attribute.String("gen_ai.request.model", rs.ModelAlias),
			attribute.String("agentplane.run.id", d.runID),
			attribute.String("agentplane.tenant", rs.Tenant),
			attribute.String("agentplane.agent.hash", rs.AgentHash),
		}
		if p := d.provider(rs.ModelAlias); p != "" {
			attrs = append(attrs, attribute.String("gen_ai.provider.name", p))
		}
		if rs.Replay != nil {
			attrs = append(attrs, attribute.String("agentplane.replay.of", rs.Replay.Of), attribute.Int("agentplane.replay.from_step", rs.Replay.FromStep),
				attribute.String("agentplane.replay.mode", rs.Replay.Mode))
		}
		d.rootCtx, d.root = d.tr.Start(d.with(d.ctx, spanID(d.runID, 0)), "invoke_agent "+rs.Agent, oteltrace.WithTimestamp(ev.At),
			oteltrace.WithSpanKind(oteltrace.SpanKindInternal), oteltrace.WithAttributes(attrs...))
	case trace.EvStepStarted:
		d.stepStart = ev.At
	case trace.EvModelCall:
		if !emit {
			return nil
		}
		var mc trace.ModelCall
		if err := json.Unmarshal(ev.Payload, &mc); err != nil {
			return err
		}
		d.chat(ev, &mc)
	case trace.EvToolAttempt:
		var a trace.ToolAttempt
		if err := json.Unmarshal(ev.Payload, &a); err != nil {
			return err
		}
		d.attempts[[2]int{ev.Step, a.Index}] = attempt{a, ev.At}
	case trace.EvToolResult:
		var r trace.ToolResult
		if err := json.Unmarshal(ev.Payload, &r); err != nil {
			return err
		}
		k := [2]int{ev.Step, r.Index}
		a, ok := d.attempts[k]
		delete(d.attempts, k)
		if !ok {
			a.at = ev.At
		}
		if emit {
			d.tool(ev, &r, &a)
		}
	case trace.EvSandboxEnd:
		var td trace.SandboxTeardowns
		if err := json.Unmarshal(ev.Payload, &td); err != nil {
			return err
		}
		for _, t := range td.Sandboxes {
			d.root.AddEvent("agentplane.sandbox.teardown", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(
				attribute.String("agentplane.sandbox.id", t.ID),
				attribute.String("agentplane.sandbox.executor", t.Executor),
				attribute.String("agentplane.sandbox.teardown", t.By),
				attribute.Int("agentplane.sandbox.uses", t.Uses),
				attribute.Bool("agentplane.sandbox.teardown.failed", t.Err != "")))
		}
	case trace.EvTaint:
		d.root.AddEvent("agentplane.taint", oteltrace.WithTimestamp(ev.At))
	case trace.EvBudget:
		var b trace.Budget
		if err := json.Unmarshal(ev.Payload, &b); err != nil {
			return err
		}
		d.root.AddEvent("agentplane.budget_exceeded", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(
			attribute.String("agentplane.budget.bound", b.Bound), attribute.Int64("agentplane.budget.limit", b.Limit),
			attribute.Int64("agentplane.budget.value", b.Value)))
	case trace.EvApprovalReq:
		var ar trace.ApprovalRequested
		if err := json.Unmarshal(ev.Payload, &ar); err != nil {
			return err
		}
		d.root.AddEvent("agentplane.approval.requested", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(
			attribute.String("agentplane.approval.id", d.clean(ar.ApprovalID)), attribute.String("agentplane.approval.group", d.clean(ar.Group))))
	case trace.EvApprovalDec:
		var ad trace.ApprovalDecided
		if err := json.Unmarshal(ev.Payload, &ad); err != nil {
			return err
		}
		d.root.AddEvent("agentplane.approval.decided", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(
			attribute.String("agentplane.approval.id", d.clean(ad.ApprovalID)), attribute.String("agentplane.approval.outcome", d.clean(ad.Outcome)),
			attribute.Bool("agentplane.approval.edited", ad.EditedArgs != nil)))
	case trace.EvRunCompleted, trace.EvRunFailed:
		var e trace.RunEnded
		if err := json.Unmarshal(ev.Payload, &e); err != nil {
			return err
		}
		// The reason can quote model text; it stays in the log.
		d.root.SetAttributes(attribute.String("agentplane.run.status", e.Status))
		if e.Status == store.StatusFailed {
			d.root.SetStatus(codes.Error, "run failed")
			d.root.SetAttributes(attribute.String("error.type", errorType(e.Reason)))
		}
		if emit {
			d.endRoot(ev.At)
		}
		d.ended = true
	}
	return nil
}

// errorType classifies a failed run's reason into a low-cardinality value.
func errorType(reason string) string {
	switch {
	case strings.HasPrefix(reason, "loop detected"):
		return "loop_detected"
	case strings.Contains(reason, "budget"):
		return "budget"
	}
	return "_OTHER"
}

func (d *deriver) endRoot(at time.Time) {
	if d.root != nil && !d.ended {
		d.root.End(oteltrace.WithTimestamp(at))
		d.spans++
	}
	d.ended = true
}

func (d *deriver) chat(ev *store.Event, mc *trace.ModelCall) {
	start := ev.At.Add(-time.Duration(mc.LatencyMS) * time.Millisecond)
	if start.Before(d.stepStart) {
		start = d.stepStart
	}
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "chat"),
		attribute.String("gen_ai.request.model", mc.Alias),
		attribute.String("gen_ai.conversation.id", d.runID),
		attribute.Int("agentplane.step", ev.Step),
		attribute.String("agentplane.prompt.sha256", mc.PromptHash),
		attribute.Int64("agentplane.prompt.bytes", mc.PromptBytes),
		attribute.Bool("agentplane.no_tools", mc.NoTools),
	}
	if p := d.provider(mc.Alias); p != "" {
		attrs = append(attrs, attribute.String("gen_ai.provider.name", p))
	}
	if mc.Model != "" {
		attrs = append(attrs, attribute.String("gen_ai.response.model", d.clean(mc.Model)))
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
			attribute.StringSlice("gen_ai.response.finish_reasons", []string{d.clean(r.StopReason)}))
	}
	if mc.Error != "" {
		attrs = append(attrs, attribute.String("error.type", "_OTHER"))
	}
	name := "chat " + mc.Alias
	_, sp := d.tr.Start(d.with(d.rootCtx, spanID(d.runID, ev.Seq)), name,
		oteltrace.WithTimestamp(start), oteltrace.WithSpanKind(oteltrace.SpanKindClient), oteltrace.WithAttributes(attrs...))
	if mc.Error != "" {
		sp.SetStatus(codes.Error, "model call failed") // the provider's text stays in the log
	}
	sp.End(oteltrace.WithTimestamp(ev.At))
	d.spans++
}

func (d *deriver) tool(ev *store.Event, r *trace.ToolResult, at *attempt) {
	a := &at.a
	name := d.clean(r.Tool)
	attrs := []attribute.KeyValue{
		attribute.String("gen_ai.operation.name", "execute_tool"),
		attribute.String("gen_ai.tool.name", name),
		attribute.String("gen_ai.tool.call.id", d.clean(r.CallID)),
		attribute.String("gen_ai.tool.type", "function"),
		attribute.String("gen_ai.conversation.id", d.runID),
		attribute.Int("agentplane.step", ev.Step),
		attribute.String("agentplane.tool.status", r.Status),
		attribute.Int64("agentplane.tool.output.bytes", r.Bytes),
		attribute.Bool("agentplane.tool.output.truncated", r.Truncated),
		attribute.String("agentplane.tool.output.sha256", r.ResultHash),
		attribute.String("agentplane.tool.args.sha256", a.ArgsHash),
		attribute.Int64("agentplane.tool.args.bytes", a.Args.Size),
		attribute.String("agentplane.idempotency_key", d.clean(a.IdempotencyKey)),
		attribute.Bool("agentplane.decision.allowed", a.Decision.Allowed),
		attribute.String("agentplane.decision.control", a.Decision.Control),
		attribute.String("agentplane.tool.side_effects", a.SideEffects),
		attribute.Int("agentplane.tool.tier", a.Tier),
		attribute.Int64("agentplane.tool.latency_ms", r.LatencyMS),
		attribute.Int("agentplane.tool.redactions", r.Redactions),
	}
	if r.Output.IsBlob() {
		attrs = append(attrs, attribute.String("agentplane.tool.output.blob", r.Output.Blob), attribute.Int64("agentplane.tool.output.blob.bytes", r.Output.Size))
	}
	if a.Args.IsBlob() {
		attrs = append(attrs, attribute.String("agentplane.tool.args.blob", a.Args.Blob))
	}
	if r.Replayed != "" {
		attrs = append(attrs, attribute.String("agentplane.replayed", r.Replayed))
	}
	if r.Status != trace.StatusOK {
		attrs = append(attrs, attribute.String("error.type", r.Status))
	}
	attrs = append(attrs, sandboxAttrs(r.Sandbox)...)
	sid := spanID(d.runID, ev.Seq)
	if a.IdempotencyKey != "" {
		sid = ToolSpanID(a.IdempotencyKey)
	}
	_, sp := d.tr.Start(d.with(d.rootCtx, sid), "execute_tool "+name,
		oteltrace.WithTimestamp(at.at), oteltrace.WithSpanKind(oteltrace.SpanKindInternal), oteltrace.WithAttributes(attrs...))
	if r.Status != trace.StatusOK {
		sp.SetStatus(codes.Error, r.Status)
	}
	sp.End(oteltrace.WithTimestamp(ev.At))
	d.spans++
	if r.Sandbox != nil && r.Sandbox.GuestSpans != nil && a.IdempotencyKey != "" {
		d.guestSpans(ev, r.Sandbox, a.IdempotencyKey, at.at)
	}
}

// guestSpans emits the spans a sandboxed program wrote, as the host
// accepted them (sandbox.ParseGuestSpans), under the call's execute_tool
// span: ids derived from the call's key, times inside the host's window of
// the command (it ended by the tool_result event, and lasted WallMS),
// attribute values redacted like every other, and each marked as the
// guest's with agentplane.sandbox.guest_span, a key no guest may set.
func (d *deriver) guestSpans(ev *store.Event, b *trace.SandboxInfo, key string, notBefore time.Time) {
	base := ev.At.Add(-time.Duration(b.WallMS) * time.Millisecond)
	if base.Before(notBefore) {
		base = notBefore
	}
	ids := make([]oteltrace.SpanID, len(b.GuestSpans.Spans))
	for i, g := range b.GuestSpans.Spans {
		ids[i] = GuestSpanID(key, i)
		parent := ToolSpanID(key)
		if g.Parent >= 0 && g.Parent < i {
			parent = ids[g.Parent]
		}
		start := base.Add(time.Duration(g.StartUS) * time.Microsecond)
		end := start.Add(time.Duration(g.DurationUS) * time.Microsecond)
		if end.After(ev.At) {
			end = ev.At
		}
		if start.After(end) {
			start = end
		}
		attrs := []attribute.KeyValue{attribute.Bool("agentplane.sandbox.guest_span", true),
			attribute.String("agentplane.sandbox.id", b.ID), attribute.Int("agentplane.step", ev.Step)}
		keys := make([]string, 0, len(g.Attributes))
		for k := range g.Attributes {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			switch v := g.Attributes[k].(type) {
			case string:
				attrs = append(attrs, attribute.String(k, d.clean(v)))
			case bool:
				attrs = append(attrs, attribute.Bool(k, v))
			case float64:
				if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
					attrs = append(attrs, attribute.Int64(k, int64(v)))
				} else {
					attrs = append(attrs, attribute.Float64(k, v))
				}
			case int64:
				attrs = append(attrs, attribute.Int64(k, v))
			}
		}
		pctx := oteltrace.ContextWithSpanContext(d.ctx, oteltrace.NewSpanContext(oteltrace.SpanContextConfig{
			TraceID: d.tid, SpanID: parent, TraceFlags: oteltrace.FlagsSampled}))
		_, sp := d.tr.Start(d.with(pctx, ids[i]), d.clean(g.Name), oteltrace.WithTimestamp(start),
			oteltrace.WithSpanKind(oteltrace.SpanKindInternal), oteltrace.WithAttributes(attrs...))
		if g.Error {
			sp.SetStatus(codes.Error, "the sandboxed program reported an error")
		}
		sp.End(oteltrace.WithTimestamp(end))
		d.spans++
	}
	if n := b.GuestSpans.Dropped; n > 0 {
		d.root.AddEvent("agentplane.sandbox.guest_spans_dropped", oteltrace.WithTimestamp(ev.At), oteltrace.WithAttributes(
			attribute.String("agentplane.sandbox.id", b.ID), attribute.Int("agentplane.sandbox.guest_spans.dropped", n)))
	}
}

// sandboxAttrs are the host's measurements at the sandbox boundary of one
// call (seed 002). What the sandbox claims (the sidecar, and exec_ms, which
// comes from it) is exported only beside them, as the guest's claim, and
// only as numbers: nothing that comes out of a sandbox is trusted as
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
	timedOut := b.Outcome == "timeout"
	killed := b.Signal != "" || b.Outcome == "killed" || b.Outcome == "oom" || timedOut
	attrs := []attribute.KeyValue{
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
		attribute.Bool("agentplane.sandbox.timed_out", timedOut),
		attribute.Bool("agentplane.sandbox.killed", killed),
		attribute.String("agentplane.sandbox.unclean", b.Unclean),
		attribute.Int64("agentplane.sandbox.bytes_in", b.BytesIn),
		attribute.Int64("agentplane.sandbox.stdout_bytes", b.StdoutBytes),
		attribute.Int64("agentplane.sandbox.stderr_bytes", b.StderrBytes),
		attribute.Int64("agentplane.sandbox.bytes_out", b.StdoutBytes+b.StderrBytes),
		attribute.Bool("agentplane.sandbox.stdout_truncated", b.StdoutTruncated),
		attribute.Bool("agentplane.sandbox.stderr_truncated", b.StderrTruncated),
		attribute.Int64("agentplane.sandbox.peak_memory_bytes", b.PeakMemoryBytes),
		attribute.String("agentplane.sandbox.teardown", b.Teardown),
		attribute.Int("agentplane.sandbox.egress.attempts", len(b.Egress)),
		attribute.Int("agentplane.sandbox.egress.denied", denied),
	}
	if b.Claim != nil && b.Claim.ExecMS > 0 {
		attrs = append(attrs, attribute.Int64("agentplane.sandbox.guest_claim.exec_ms", b.Claim.ExecMS))
	}
	return attrs
}
