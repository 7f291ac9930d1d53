package runmetrics_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
	"github.com/agentplane/agentplane/trace/runmetrics"
)

// events builds a run's log from (type, payload) pairs, a second apart.
func events(run string, parts ...any) []store.Event {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var out []store.Event
	for i := 0; i+1 < len(parts); i += 2 {
		p, _ := json.Marshal(parts[i+1])
		out = append(out, store.Event{RunID: run, Seq: int64(len(out) + 1), Type: parts[i].(string), Step: 1,
			At: t0.Add(time.Duration(len(out)) * time.Second), Payload: p})
	}
	return out
}

func sandboxedRun(run string) []store.Event {
	return events(run,
		trace.EvRunStarted, trace.RunStarted{Agent: "helpdesk", AgentVersion: 2, Tenant: "hosp"},
		trace.EvStepStarted, trace.StepStarted{},
		trace.EvModelCall, trace.ModelCall{CostKnown: true, CostMicros: 1500, Currency: "USD",
			Response: &model.Response{Usage: model.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 7, CacheCreationTokens: 3}}},
		trace.EvToolAttempt, trace.ToolAttempt{Tool: "run_python", Index: 0, Tier: 2},
		trace.EvApprovalReq, trace.ApprovalRequested{ApprovalID: "ap_1"},
		trace.EvApprovalDec, trace.ApprovalDecided{ApprovalID: "ap_1", Outcome: "approved"},
		trace.EvToolResult, trace.ToolResult{Tool: "run_python", Index: 0, Status: "error", LatencyMS: 250,
			Sandbox: &trace.SandboxInfo{Tier: 2, Lifecycle: "warm", ProvisionMS: 40}},
		trace.EvBudget, trace.Budget{Bound: "cost"},
		trace.EvRunFailed, trace.RunEnded{Status: store.StatusFailed, Reason: "loop detected: 3 tool calls in a row failed"},
	)
}

// value sums the samples of a metric family whose labels include want.
func value(t *testing.T, m *runmetrics.Metrics, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, s := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range s.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range want {
				if have[k] != v {
					continue next
				}
			}
			switch mf.GetType() {
			case dto.MetricType_COUNTER:
				sum += s.GetCounter().GetValue()
			case dto.MetricType_HISTOGRAM:
				sum += s.GetHistogram().GetSampleSum()
			}
		}
	}
	return sum
}

func feed(m *runmetrics.Metrics, evs []store.Event, live bool) {
	r := m.Run(evs[0].RunID)
	for i := range evs {
		r.Event(&evs[i], live)
	}
	r.Close()
}

// Every metric of a run is counted under its tenant, agent and version
// (or its tool and tier), and a replayed (not live) run counts nothing.
func TestMetricsFromTheEventStream(t *testing.T) {
	m := runmetrics.New(nil)
	feed(m, sandboxedRun("r1"), true)
	feed(m, sandboxedRun("r2"), false)
	run := map[string]string{"tenant": "hosp", "agent": "helpdesk", "version": "2"}
	with := func(k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range run {
			out[a] = b
		}
		return out
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"agentplane_runs_started_total", run, 1},
		{"agentplane_runs_finished_total", with("status", "failed"), 1},
		{"agentplane_steps_total", run, 1},
		{"agentplane_model_tokens_total", with("type", "input"), 100},
		{"agentplane_model_tokens_total", with("type", "output"), 20},
		{"agentplane_model_tokens_total", with("type", "cache_read"), 7},
		{"agentplane_model_tokens_total", with("type", "cache_creation"), 3},
		{"agentplane_model_cost_micros_total", with("currency", "USD"), 1500},
		{"agentplane_tool_call_duration_seconds", map[string]string{"tool": "run_python", "tier": "2"}, 0.25},
		{"agentplane_tool_errors_total", map[string]string{"tool": "run_python", "tier": "2", "status": "error"}, 1},
		{"agentplane_sandbox_provision_seconds", map[string]string{"tier": "2", "lifecycle": "warm"}, 0.04},
		{"agentplane_approval_wait_seconds", map[string]string{"outcome": "approved"}, 1},
		{"agentplane_budget_stops_total", with("bound", "cost"), 1},
		{"agentplane_loop_detection_stops_total", run, 1},
	} {
		if got := value(t, m, c.name, c.labels); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// A model asking for hundreds of made-up tools does not make hundreds of
// series: past MaxTools the names share "_other", and no label carries a
// run id or raw control characters.
func TestToolLabelsAreBounded(t *testing.T) {
	m := runmetrics.New(nil)
	for i := 0; i < runmetrics.MaxTools+100; i++ {
		feed(m, events(fmt.Sprintf("run_%d", i),
			trace.EvRunStarted, trace.RunStarted{Agent: "a", AgentVersion: 1, Tenant: "t"},
			trace.EvToolResult, trace.ToolResult{Tool: fmt.Sprintf("made_up_%d\x1b[31m", i), Status: "denied"}), true)
	}
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "agentplane_tool_errors_total" {
			continue
		}
		if n := len(mf.GetMetric()); n != runmetrics.MaxTools+1 {
			t.Errorf("%d series, want %d", n, runmetrics.MaxTools+1)
		}
		for _, s := range mf.GetMetric() {
			for _, lp := range s.GetLabel() {
				if strings.ContainsAny(lp.GetValue(), "\x1b") || strings.HasPrefix(lp.GetValue(), "run_") {
					t.Fatalf("label %s=%q", lp.GetName(), lp.GetValue())
				}
			}
		}
	}
	if got := value(t, m, "agentplane_tool_errors_total", map[string]string{"tool": "_other"}); got != 100 {
		t.Errorf("_other = %v, want 100", got)
	}
}
