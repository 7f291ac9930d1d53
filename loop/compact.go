package loop

import (
	"context"
	"encoding/json"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/trace"
)

// maybeCompact rewrites older steps into a progress note when the pinned
// policy says it is due. It is a recorded activity: a replay reads the note
// from the log and rebuilds the same transcript. The raw steps stay in the
// log; only the prompt gets shorter.
func (l *Loop) maybeCompact(ctx context.Context, st *state, step int) error {
	c := st.started.Compaction
	if c == nil || step < st.compactAfter {
		return nil
	}
	pol := model.CompactionPolicy{MaxPromptTokens: c.AtTokens, EverySteps: c.EverySteps, KeepSteps: c.KeepSteps}
	msgs := st.tr.Messages()
	if !pol.Due(msgs, model.EstimateTokens(st.tr.Request(false))) {
		return nil
	}
	var ev engine.Event
	var err error
	if head, old, recent, ok := model.SplitSteps(msgs, c.KeepSteps); ok {
		ev, err = st.env.Execute(ctx, engine.Call{Activity: ActCompact, Event: trace.EvCompaction, Step: step, Durability: engine.Buffered,
			Input: CompactInput{Alias: c.Alias, PreviousNote: model.PreviousNote(head), Steps: old, Kept: len(recent), Currency: st.budgets.MaxCost.Currency,
				Attribution: model.Attribution{Tenant: st.run.Tenant, User: st.run.User, Agent: st.run.Agent, AgentVersion: st.run.AgentVersion, RunID: st.run.ID, Step: step}}})
	} else {
		ev, err = st.env.Record(ctx, trace.EvCompaction, step, engine.Buffered, trace.Compaction{Error: "nothing to compact"})
	}
	if err != nil {
		return err
	}
	var out trace.Compaction
	if err := json.Unmarshal(ev.Payload, &out); err != nil {
		return err
	}
	// The note's own call is the run's usage.
	st.inTokens += out.InputTokens
	st.outTokens += out.OutputTokens
	if out.CostKnown {
		st.cost += out.CostMicros
	} else if out.InputTokens > 0 {
		st.costUnknown = true
	}
	if out.Error != "" {
		st.compactAfter = step + max(c.EverySteps, 3)
		return nil
	}
	return st.add(ev)
}
