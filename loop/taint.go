package loop

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Taint: once text the platform did not write or review is in the model's
// context, the run is tainted for the rest of its life and policies see
// run.tainted. Under trace.TaintRules2 the sources are: the description of a
// granted tool whose manifest the platform did not review (from the start),
// the output of any tool but a reviewed tier-1 tool that declares trusted
// output, a message added to the run, and an approver's comment. Runs
// started under older rules keep them (only untrusted_output tools taint),
// so their logs replay as recorded.

// taint records the first taint of the run (later ones change nothing).
func (l *Loop) taint(ctx context.Context, st *state, step int, t trace.Taint) error {
	if st.tainted {
		return nil
	}
	if st.started.TaintRules < trace.TaintRules2 && t.Source != trace.TaintToolOutput {
		return nil
	}
	if st.started.TaintRules < trace.TaintRules2 {
		t.Source, t.Detail = "", "" // the older event's shape
	}
	if _, err := st.env.Record(ctx, trace.EvTaint, step, engine.Buffered, t); err != nil {
		return err
	}
	st.tainted = true
	return nil
}

// taintAtStart taints a run whose model is shown the description of a tool
// the platform did not review.
func (l *Loop) taintAtStart(ctx context.Context, st *state) error {
	if st.started.TaintRules < trace.TaintRules2 {
		return nil
	}
	var names []string
	for _, ref := range st.started.Tools {
		if !ref.Reviewed {
			names = append(names, ref.Name)
		}
	}
	if len(names) == 0 {
		return nil
	}
	shown := names
	if len(shown) > 8 {
		shown = append(shown[:8:8], fmt.Sprintf("and %d more", len(names)-8))
	}
	return l.taint(ctx, st, 0, trace.Taint{Source: trace.TaintToolDescription, Tool: names[0],
		Detail: "the model is shown the descriptions of tools whose manifests the platform has not reviewed: " + strings.Join(shown, ", ")})
}

// outputTaints reports whether a result of m taints the run.
func (st *state) outputTaints(m *tool.Manifest) bool {
	if st.started.TaintRules < trace.TaintRules2 {
		return m.UntrustedOutput
	}
	return !(m.Tier == 1 && !m.UntrustedOutput && st.reviewed[m.Name])
}

// taintMessages taints the run when sigs hold a user message.
func (l *Loop) taintMessages(ctx context.Context, st *state, step int, sigs []engine.Event) error {
	for _, ev := range sigs {
		var sg trace.Signal
		if json.Unmarshal(ev.Payload, &sg) == nil && sg.Kind == trace.SignalMessage {
			return l.taint(ctx, st, step, trace.Taint{Source: trace.TaintMessage, Seq: ev.Seq,
				Detail: "a message added to the run while it ran"})
		}
	}
	return nil
}
