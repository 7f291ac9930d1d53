// Package runmetrics keeps Prometheus metrics derived from the run event
// stream, the same committed events the OpenTelemetry export reads (it is
// a trace/tail.Sink): runs by status, steps, tokens and cost by tenant,
// agent and version; tool latency and errors by tool and tier; sandbox
// provision time by tier and lifecycle; approval wait; runs stopped by a
// budget or by loop detection; and the span export's own losses.
//
// Labels are low-cardinality by construction: never a run, sandbox, user
// or call id. Tool names come from manifests, but a model can ask for a
// tool that does not exist, so only the first MaxTools distinct tool
// names get their own label value and the rest share "_other"; every label
// value is cut to 64 bytes of printable ASCII.
package runmetrics

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/agentplane/agentplane/internal/jsonfields"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
	"github.com/agentplane/agentplane/trace/tail"
)

// MaxTools bounds the distinct values of the tool label.
const MaxTools = 200

// Metrics are the platform's run metrics, registered in their own
// registry (Registry), so a scrape shows exactly these plus the Go
// runtime's. Safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	runsStarted   *prometheus.CounterVec
	runsFinished  *prometheus.CounterVec
	steps         *prometheus.CounterVec
	tokens        *prometheus.CounterVec
	cost          *prometheus.CounterVec
	toolLatency   *prometheus.HistogramVec
	toolErrors    *prometheus.CounterVec
	provision     *prometheus.HistogramVec
	approvalWait  *prometheus.HistogramVec
	budgetStops   *prometheus.CounterVec
	loopStops     *prometheus.CounterVec
	spansLost     *prometheus.CounterVec
	spansExported prometheus.CounterFunc

	mu    sync.Mutex
	tools map[string]bool
}

var runLabels = []string{"tenant", "agent", "version"}

// New makes the metrics. exported, when set, reports the spans the live
// export delivered so far.
func New(exported func() float64) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry(), tools: map[string]bool{}}
	m.runsStarted = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_runs_started_total",
		Help: "Runs that started, by tenant, agent and version."}, runLabels)
	m.runsFinished = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_runs_finished_total",
		Help: "Runs that ended, by tenant, agent, version and final status."}, append(runLabels, "status"))
	m.steps = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_steps_total",
		Help: "Loop steps started, by tenant, agent and version."}, runLabels)
	m.tokens = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_model_tokens_total",
		Help: "Model tokens by tenant, agent, version and type (input: not cached; cache_read; cache_creation; output)."}, append(runLabels, "type"))
	m.cost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_model_cost_micros_total",
		Help: "Model cost in millionths of the currency, by tenant, agent, version and currency (calls whose price is known)."}, append(runLabels, "currency"))
	m.toolLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentplane_tool_call_duration_seconds",
		Help: "Tool call latency by tool and tier.", Buckets: prometheus.ExponentialBuckets(0.001, 4, 10)}, []string{"tool", "tier"})
	m.toolErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_tool_errors_total",
		Help: "Tool results that were not ok, by tool, tier and status (error, denied, timeout, ...)."}, []string{"tool", "tier", "status"})
	m.provision = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentplane_sandbox_provision_seconds",
		Help:    "Time to provision the sandbox of a call, by tier and lifecycle (created, warm, restored, reused-in-session).",
		Buckets: prometheus.ExponentialBuckets(0.001, 3, 10)}, []string{"tier", "lifecycle"})
	m.approvalWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "agentplane_approval_wait_seconds",
		Help: "Time from an approval's request to its decision, by outcome.", Buckets: prometheus.ExponentialBuckets(1, 4, 10)}, []string{"outcome"})
	m.budgetStops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_budget_stops_total",
		Help: "Runs stopped by a budget, by tenant, agent, version and bound (steps, input_tokens, cost, wall_clock)."}, append(runLabels, "bound"))
	m.loopStops = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_loop_detection_stops_total",
		Help: "Runs stopped by loop detection, by tenant, agent and version."}, runLabels)
	m.spansLost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "agentplane_otel_spans_dropped_total",
		Help: "Spans the live OpenTelemetry export lost, by reason (queue_full, export_failed); agentplane trace export resends a run's."}, []string{"reason"})
	m.reg.MustRegister(m.runsStarted, m.runsFinished, m.steps, m.tokens, m.cost, m.toolLatency, m.toolErrors,
		m.provision, m.approvalWait, m.budgetStops, m.loopStops, m.spansLost,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, r := range []string{"queue_full", "export_failed"} {
		m.spansLost.WithLabelValues(r)
	}
	if exported != nil {
		m.spansExported = prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "agentplane_otel_spans_exported_total",
			Help: "Spans the live OpenTelemetry export delivered."}, exported)
		m.reg.MustRegister(m.spansExported)
	}
	return m
}

// Registry is what /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// SpansDropped counts spans the live export lost.
func (m *Metrics) SpansDropped(reason string, n int) {
	m.spansLost.WithLabelValues(label(reason)).Add(float64(n))
}

// label makes a value safe and short for a label.
func label(s string) string {
	var b strings.Builder
	for _, r := range s {
		if b.Len() >= 64 {
			break
		}
		if r >= 0x20 && r < 0x7f {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 {
		return "_none"
	}
	return b.String()
}

// tool returns the tool label for name.
func (m *Metrics) tool(name string) string {
	name = label(name)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.tools[name] {
		return name
	}
	if len(m.tools) >= MaxTools {
		return "_other"
	}
	m.tools[name] = true
	return name
}

// Run follows one run (tail.Sink).
func (m *Metrics) Run(string) tail.RunSink {
	return &run{m: m, tiers: map[[2]int]int{}, asked: map[string]int64{}}
}

type run struct {
	m      *Metrics
	labels []string // tenant, agent, version; nil until run_started
	tiers  map[[2]int]int
	asked  map[string]int64 // approval id -> requested at, unix ms
}

// modelCall, toolResult and toolAttempt are the fields of
// trace.ModelCall, trace.ToolResult and trace.ToolAttempt the metrics
// read. Their decode methods read only those members (package
// jsonfields), skipping the response's content, the result's preview and
// the arguments without decoding them, which a step's metrics never need
// (the JSON names are trace's; TestNarrowDecode checks them).
type modelCall struct {
	Response *struct {
		Usage model.Usage
	}
	CostMicros int64
	Currency   string
	CostKnown  bool
}

func (mc *modelCall) decode(payload []byte) error {
	var resp jsonfields.Raw
	if err := jsonfields.Decode(payload, jsonfields.Field{Name: "response", Into: &resp}, jsonfields.Field{Name: "cost_micros", Into: &mc.CostMicros},
		jsonfields.Field{Name: "currency", Into: &mc.Currency}, jsonfields.Field{Name: "cost_known", Into: &mc.CostKnown}); err != nil {
		return err
	}
	if resp == nil || string(resp) == "null" {
		return nil
	}
	mc.Response = &struct{ Usage model.Usage }{}
	return jsonfields.Decode(resp, jsonfields.Field{Name: "usage", Into: &mc.Response.Usage})
}

type toolResult struct {
	Index     int
	Tool      string
	Status    string
	LatencyMS int64
	Sandbox   *trace.SandboxInfo
}

func (tr *toolResult) decode(payload []byte) error {
	return jsonfields.Decode(payload, jsonfields.Field{Name: "index", Into: &tr.Index}, jsonfields.Field{Name: "tool", Into: &tr.Tool},
		jsonfields.Field{Name: "status", Into: &tr.Status}, jsonfields.Field{Name: "latency_ms", Into: &tr.LatencyMS},
		jsonfields.Field{Name: "sandbox", Into: &tr.Sandbox})
}

type toolAttempt struct {
	Index, Tier int
}

func (a *toolAttempt) decode(payload []byte) error {
	return jsonfields.Decode(payload, jsonfields.Field{Name: "index", Into: &a.Index}, jsonfields.Field{Name: "tier", Into: &a.Tier})
}

func (r *run) Event(ev *store.Event, live bool) {
	switch ev.Type {
	case trace.EvRunStarted:
		var rs trace.RunStarted
		if json.Unmarshal(ev.Payload, &rs) != nil {
			return
		}
		r.labels = []string{label(rs.Tenant), label(rs.Agent), strconv.Itoa(rs.AgentVersion)}
		if live {
			r.m.runsStarted.WithLabelValues(r.labels...).Inc()
		}
	case trace.EvToolAttempt:
		var a toolAttempt
		if a.decode(ev.Payload) == nil {
			r.tiers[[2]int{ev.Step, a.Index}] = a.Tier
		}
	case trace.EvApprovalReq:
		var ar trace.ApprovalRequested
		if json.Unmarshal(ev.Payload, &ar) == nil && len(r.asked) < 1000 {
			r.asked[ar.ApprovalID] = ev.At.UnixMilli()
		}
	}
	if !live || r.labels == nil {
		return
	}
	switch ev.Type {
	case trace.EvStepStarted:
		r.m.steps.WithLabelValues(r.labels...).Inc()
	case trace.EvModelCall:
		var mc modelCall
		if mc.decode(ev.Payload) != nil {
			return
		}
		if u := mc.Response; u != nil {
			r.m.tokens.WithLabelValues(append(r.labels, "input")...).Add(float64(max(u.Usage.InputTokens, 0)))
			r.m.tokens.WithLabelValues(append(r.labels, "cache_read")...).Add(float64(max(u.Usage.CacheReadTokens, 0)))
			r.m.tokens.WithLabelValues(append(r.labels, "cache_creation")...).Add(float64(max(u.Usage.CacheCreationTokens, 0)))
			r.m.tokens.WithLabelValues(append(r.labels, "output")...).Add(float64(max(u.Usage.OutputTokens, 0)))
		}
		if mc.CostKnown && mc.CostMicros > 0 {
			r.m.cost.WithLabelValues(append(r.labels, label(mc.Currency))...).Add(float64(mc.CostMicros))
		}
	case trace.EvToolResult:
		var tr toolResult
		if tr.decode(ev.Payload) != nil {
			return
		}
		k := [2]int{ev.Step, tr.Index}
		tier := strconv.Itoa(r.tiers[k])
		delete(r.tiers, k)
		tool := r.m.tool(tr.Tool)
		r.m.toolLatency.WithLabelValues(tool, tier).Observe(float64(max(tr.LatencyMS, 0)) / 1000)
		if tr.Status != trace.StatusOK {
			r.m.toolErrors.WithLabelValues(tool, tier, label(tr.Status)).Inc()
		}
		if sb := tr.Sandbox; sb != nil {
			r.m.provision.WithLabelValues(strconv.Itoa(sb.Tier), label(sb.Lifecycle)).Observe(float64(max(sb.ProvisionMS, 0)) / 1000)
		}
	case trace.EvApprovalDec:
		var ad trace.ApprovalDecided
		if json.Unmarshal(ev.Payload, &ad) != nil {
			return
		}
		if at, ok := r.asked[ad.ApprovalID]; ok {
			delete(r.asked, ad.ApprovalID)
			r.m.approvalWait.WithLabelValues(label(ad.Outcome)).Observe(float64(max(ev.At.UnixMilli()-at, 0)) / 1000)
		}
	case trace.EvBudget:
		var b trace.Budget
		if json.Unmarshal(ev.Payload, &b) == nil {
			r.m.budgetStops.WithLabelValues(append(r.labels, label(b.Bound))...).Inc()
		}
	case trace.EvRunCompleted, trace.EvRunFailed:
		var e trace.RunEnded
		if json.Unmarshal(ev.Payload, &e) != nil {
			return
		}
		r.m.runsFinished.WithLabelValues(append(r.labels, label(e.Status))...).Inc()
		if e.Status == store.StatusFailed && strings.HasPrefix(e.Reason, "loop detected") {
			r.m.loopStops.WithLabelValues(r.labels...).Inc()
		}
	}
}

func (r *run) Close() {}
