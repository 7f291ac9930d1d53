package eval

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

// Metrics are the per-version figures of seed 004's online metrics,
// computed over a set of graded runs.
type Metrics struct {
	Runs   int `json:"runs"`
	Passed int `json:"passed"`
	// Errors counts runs the harness could not complete (not graded).
	Errors int `json:"errors"`
	// SuccessRate is Passed / Runs.
	SuccessRate float64 `json:"success_rate"`
	// CostMicros is the cost of every run; CostPerSuccess divides it by the
	// runs that passed (a cheap version that fails twice is expensive). It
	// is -1 when nothing passed.
	CostMicros     int64  `json:"cost_micros"`
	Currency       string `json:"currency"`
	CostPerSuccess int64  `json:"cost_per_success_micros"`
	// StepsP50 and StepsP95 are model calls per run (nearest rank).
	StepsP50 int `json:"steps_p50"`
	StepsP95 int `json:"steps_p95"`
	// Approvals requested, and overridden by the human (rejected or
	// edited): OverrideRate = Overridden / Requested (0 when none).
	ApprovalsRequested  int     `json:"approvals_requested"`
	ApprovalsOverridden int     `json:"approvals_overridden"`
	OverrideRate        float64 `json:"override_rate"`
	// ToolCalls proposed, and the ones that ended in error, timeout or
	// invalid arguments: ToolErrorRate = ToolErrors / ToolCalls.
	ToolCalls     int     `json:"tool_calls"`
	ToolErrors    int     `json:"tool_errors"`
	ToolErrorRate float64 `json:"tool_error_rate"`
	// Stopped counts runs ended by a budget or by loop detection.
	Stopped     int     `json:"stopped"`
	StoppedRate float64 `json:"stopped_rate"`
	// Diverged counts replays that left their recording.
	Diverged int `json:"diverged"`
}

// Summarise computes the metrics of graded results.
func Summarise(rs []*TaskResult) Metrics {
	var m Metrics
	var steps []int
	for _, r := range rs {
		m.Runs++
		if r.Err != nil || r.Outcome == nil {
			m.Errors++
			continue
		}
		o := r.Outcome
		if r.Passed() {
			m.Passed++
		}
		if m.Currency == "" {
			m.Currency = o.Currency
		}
		m.CostMicros += o.CostMicros
		steps = append(steps, o.Steps)
		m.ApprovalsRequested += o.Approvals.Requested
		m.ApprovalsOverridden += o.Approvals.Overridden()
		for _, c := range o.Calls {
			m.ToolCalls++
			switch c.Effective {
			case "error", "timeout", "invalid":
				m.ToolErrors++
			}
		}
		if o.StoppedBy != "" {
			m.Stopped++
		}
		if o.Diverged != nil {
			m.Diverged++
		}
	}
	m.SuccessRate = ratio(m.Passed, m.Runs)
	m.CostPerSuccess = -1
	if m.Passed > 0 {
		m.CostPerSuccess = m.CostMicros / int64(m.Passed)
	}
	m.StepsP50, m.StepsP95 = percentile(steps, 50), percentile(steps, 95)
	m.OverrideRate = ratio(m.ApprovalsOverridden, m.ApprovalsRequested)
	m.ToolErrorRate = ratio(m.ToolErrors, m.ToolCalls)
	m.StoppedRate = ratio(m.Stopped, m.Runs)
	return m
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// percentile is the nearest-rank percentile (0 for no values).
func percentile(xs []int, p int) int {
	if len(xs) == 0 {
		return 0
	}
	s := append([]int(nil), xs...)
	sort.Ints(s)
	rank := int(math.Ceil(float64(p) / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// CostString formats the cost per successful task.
func (m Metrics) CostString() string {
	if m.CostPerSuccess < 0 {
		return "n/a (no task passed)"
	}
	return strings.TrimSpace(fmt.Sprintf("%s %s", micros(m.CostPerSuccess), m.Currency))
}
