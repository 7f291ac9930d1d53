package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Read routes the run viewer needs beyond the runs and events
// (docs/design/viewer.md): the prompt of one model call rebuilt from the
// log, and seed 004's online metrics per agent version.

// handlePrompt rebuilds the request of the model call recorded at event
// seq (trace.Prompts: the same transcript builder the loop ran), and says
// whether its hash is the one recorded. With render=safe every text is
// neutralised for display.
func handlePrompt(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	run, err := s.runOf(r.Context(), p, params["run_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	seq, err := strconv.ParseInt(r.URL.Query().Get("seq"), 10, 64)
	if err != nil || seq < 1 {
		s.fail(w, r, badRequest("seq must be the sequence number of a model_call event"))
		return
	}
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pol, err := s.renderPolicy(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	evs, err := s.st.Events(r.Context(), run.ID, 0, int(min(seq, 1<<30)))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var out *Prompt
	err = trace.Prompts(r.Context(), trace.SourceFor(s.st, run.Tenant), evs, func(ev *store.Event, mc *trace.ModelCall, req *model.Request) error {
		if ev.Seq == seq {
			out = toPrompt(run.ID, ev, mc, req, safe, pol)
		}
		return nil
	})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if out == nil {
		s.fail(w, r, notFound("model call"))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func toPrompt(runID string, ev *store.Event, mc *trace.ModelCall, req *model.Request, safe bool, pol *render.Policy) *Prompt {
	text := func(t string) string {
		if safe {
			t, _ = pol.Text(t)
		}
		return t
	}
	raw := func(j json.RawMessage) json.RawMessage {
		if len(j) == 0 || !safe {
			return j
		}
		out, _ := pol.JSON(j)
		return out
	}
	hash, _ := trace.PromptHash(req)
	out := &Prompt{RunID: runID, Seq: ev.Seq, Step: ev.Step, Model: mc.Model, PromptHash: mc.PromptHash,
		Verified: hash == mc.PromptHash, System: text(req.System), Tools: []string{}, Messages: []PromptMessage{}}
	for _, t := range req.Tools {
		out.Tools = append(out.Tools, t.Name)
	}
	for _, m := range req.Messages {
		pm := PromptMessage{Role: m.Role, Parts: []PromptPart{}}
		for _, pt := range m.Content {
			pm.Parts = append(pm.Parts, PromptPart{Type: pt.Type, Text: text(pt.Text), ToolUseID: pt.ToolUseID, Name: pt.Name,
				Input: raw(pt.Input), IsError: pt.IsError})
		}
		out.Messages = append(out.Messages, pm)
	}
	if safe {
		out.Render = "safe"
	}
	return out
}

// maxMetricRuns bounds how many runs of one version the metrics read.
const maxMetricRuns = 5000

// handleAgentMetrics computes seed 004's online metrics for the versions
// asked (versions=1,2; default every version the tenant ran), each over
// the tenant's most recent runs of that version (limit, default 1000).
func handleAgentMetrics(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	name := params["agent"]
	if err := s.agentVisible(r.Context(), p, name); err != nil {
		s.fail(w, r, err)
		return
	}
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), 1000, maxMetricRuns)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var versions []int
	for _, f := range strings.Split(q.Get("versions"), ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 1 || len(versions) >= 20 {
			s.fail(w, r, badRequest("versions must be up to 20 version numbers, comma-separated"))
			return
		}
		if !slices.Contains(versions, v) {
			versions = append(versions, v)
		}
	}
	if len(versions) == 0 {
		rs, err := s.st.ListRuns(r.Context(), store.RunFilter{Tenant: p.Tenant, Agent: name, Newest: true, Limit: maxMetricRuns})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		for _, run := range rs {
			if !slices.Contains(versions, run.AgentVersion) {
				versions = append(versions, run.AgentVersion)
			}
		}
		slices.Sort(versions)
	}
	out := AgentMetrics{Agent: name, Versions: []VersionMetrics{}}
	for _, v := range versions {
		rs, err := s.st.ListRuns(r.Context(), store.RunFilter{Tenant: p.Tenant, Agent: name, AgentVersion: v, Newest: true, Limit: limit})
		if err != nil {
			s.fail(w, r, err)
			return
		}
		m := VersionMetrics{Version: v}
		var acc metricsAcc
		for _, run := range rs {
			if !store.Terminal(run.Status) {
				m.Runs++
				continue
			}
			evs, err := s.st.Events(r.Context(), run.ID, 0, 0)
			if err != nil {
				s.fail(w, r, err)
				return
			}
			acc.add(&m, run, evs)
		}
		acc.finish(&m)
		out.Versions = append(out.Versions, m)
	}
	writeJSON(w, http.StatusOK, out)
}

// metricsAcc gathers what VersionMetrics needs beyond counts.
type metricsAcc struct {
	steps     []int
	cost      int64
	currency  string
	mixed     bool
	costUnkwn bool
}

// add counts one ended run and its log.
func (a *metricsAcc) add(m *VersionMetrics, run *store.Run, evs []store.Event) {
	m.Runs++
	m.Ended++
	if run.Status == store.StatusCompleted {
		m.Succeeded++
	}
	a.steps = append(a.steps, run.Steps)
	a.cost += run.CostMicros
	if run.CostUnknown {
		a.costUnkwn = true
	}
	if run.Currency != "" {
		if a.currency != "" && a.currency != run.Currency {
			a.mixed = true
		}
		a.currency = run.Currency
	}
	budget, loopStop := false, false
	for i := range evs {
		ev := &evs[i]
		switch ev.Type {
		case trace.EvBudget:
			budget = true
		case trace.EvToolResult:
			var tr trace.ToolResult
			if json.Unmarshal(ev.Payload, &tr) == nil {
				m.ToolResults++
				if tr.Status == trace.StatusError || tr.Status == trace.StatusTimeout {
					m.ToolErrors++
				}
			}
		case trace.EvApprovalDec:
			var d trace.ApprovalDecided
			if json.Unmarshal(ev.Payload, &d) == nil && d.Decider != "" {
				m.Decisions++
				if d.Outcome == trace.ApprovalRejected || d.Outcome == trace.ApprovalEdited {
					m.Overridden++
				}
			}
		case trace.EvRunFailed:
			var e trace.RunEnded
			if json.Unmarshal(ev.Payload, &e) == nil && (strings.HasPrefix(e.Result, "loop detected") || strings.HasPrefix(e.Reason, "loop detected")) {
				loopStop = true
			}
		}
	}
	if budget {
		m.StoppedByBudget++
	}
	if loopStop {
		m.StoppedByLoop++
	}
}

func (a *metricsAcc) finish(m *VersionMetrics) {
	rate := func(n, of int) float64 {
		if of == 0 {
			return 0
		}
		return float64(n) / float64(of)
	}
	m.TaskSuccess = rate(m.Succeeded, m.Ended)
	m.OverrideRate = rate(m.Overridden, m.Decisions)
	m.ToolErrorRate = rate(m.ToolErrors, m.ToolResults)
	m.BudgetStopRate = rate(m.StoppedByBudget, m.Ended)
	m.LoopStopRate = rate(m.StoppedByLoop, m.Ended)
	m.CostKnown = !a.costUnkwn && !a.mixed
	if !a.mixed {
		m.Currency = a.currency
	}
	if m.Succeeded > 0 && m.CostKnown {
		m.CostPerSuccessMicros = a.cost / int64(m.Succeeded)
	}
	slices.Sort(a.steps)
	m.StepsP50, m.StepsP95 = percentile(a.steps, 50), percentile(a.steps, 95)
}

// percentile is the nearest-rank percentile of sorted values (0 if none).
func percentile(sorted []int, p int) int {
	if len(sorted) == 0 {
		return 0
	}
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}
