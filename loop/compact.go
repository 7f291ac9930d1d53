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
	ev, err := st.env.Do(ctx, trace.EvCompaction, step, engine.Buffered, func(ctx context.Context) ([]byte, error) {
		var out trace.Compaction
		head, old, recent, ok := model.SplitSteps(msgs, c.KeepSteps)
		if !ok {
			out.Error = "nothing to compact"
			return json.Marshal(out)
		}
		comp := &model.Compactor{Models: l.o.Models, Alias: c.Alias}
		res, err := comp.Compact(ctx, model.CompactInput{PreviousNote: model.PreviousNote(head), Steps: old}, model.Attribution{
			Tenant: st.run.Tenant, User: st.run.User, Agent: st.run.Agent, AgentVersion: st.run.AgentVersion, RunID: st.run.ID, Step: step})
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			out.Error = err.Error()
			return json.Marshal(out)
		}
		note, err := trace.MakeContent(ctx, st.env.Blobs(), []byte(res.Note), l.o.InlineLimit, displayPreview)
		if err != nil {
			return nil, err
		}
		out.Note, out.KeptMessages, out.CompactedMessages = note, len(recent), len(old)
		out.Identifiers, out.Restored = len(res.Identifiers), res.Restored
		if call := res.Call; call != nil {
			out.Model, out.LatencyMS = call.ModelID, call.LatencyMS
			out.InputTokens, out.OutputTokens = call.Usage.TotalInput(), call.Usage.OutputTokens
			if call.CostKnown {
				out.CostMicros, _, out.CostKnown = l.convert(call.Cost, st.budgets.MaxCost.Currency)
			}
		}
		return json.Marshal(out)
	})
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
	return st.tr.Add(ev)
}
