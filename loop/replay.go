package loop

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// replayState indexes the original run of a replay. The original has ended,
// so its log never changes: reading it inside the workflow is deterministic.
type replayState struct {
	info     trace.ReplayInfo
	models   map[int][]origModel // by step, in order (a final no-tools call follows)
	calls    map[[2]int]*origCall
	searches map[[2]int]*trace.ToolsLoaded // by step and call index
	diverged bool
}

type origModel struct {
	seq      int64
	noTools  bool
	Model    string
	Response *model.Response
}

type origCall struct {
	attempt trace.ToolAttempt
	result  *trace.ToolResult
}

func (l *Loop) loadOriginal(ctx context.Context, env engine.Env, info *trace.ReplayInfo) (*replayState, error) {
	evs, err := env.RunLog(ctx, info.Of)
	if err != nil {
		return nil, fmt.Errorf("replay: read %s: %w", info.Of, err)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("replay: run %s has no events: %w", info.Of, store.ErrNotFound)
	}
	rs := &replayState{info: *info, models: map[int][]origModel{}, calls: map[[2]int]*origCall{}, searches: map[[2]int]*trace.ToolsLoaded{}}
	for _, ev := range evs {
		switch ev.Type {
		case trace.EvModelCall:
			var mc trace.ModelCall
			if err := json.Unmarshal(ev.Payload, &mc); err != nil {
				return nil, err
			}
			if mc.Response != nil {
				rs.models[ev.Step] = append(rs.models[ev.Step], origModel{seq: ev.Seq, noTools: mc.NoTools, Model: mc.Model, Response: mc.Response})
			}
		case trace.EvToolAttempt:
			var a trace.ToolAttempt
			if err := json.Unmarshal(ev.Payload, &a); err != nil {
				return nil, err
			}
			rs.calls[[2]int{ev.Step, a.Index}] = &origCall{attempt: a}
		case trace.EvToolsLoaded:
			var tl trace.ToolsLoaded
			if err := json.Unmarshal(ev.Payload, &tl); err != nil {
				return nil, err
			}
			rs.searches[[2]int{ev.Step, tl.Index}] = &tl
		case trace.EvToolResult:
			var r trace.ToolResult
			if err := json.Unmarshal(ev.Payload, &r); err != nil {
				return nil, err
			}
			if c := rs.calls[[2]int{ev.Step, r.Index}]; c != nil {
				c.result = &r
			}
		}
	}
	return rs, nil
}

// recordedModel returns the original's response to serve at step, or nil
// when the model must be asked (live mode from FromStep on, or the original
// has no such call).
func (rs *replayState) recordedModel(step int, noTools bool) *origModel {
	if rs == nil || (rs.info.Mode == trace.ReplayLive && step >= rs.info.FromStep) {
		return nil
	}
	for i := range rs.models[step] {
		if rs.models[step][i].noTools == noTools {
			return &rs.models[step][i]
		}
	}
	return nil
}

// replayed is how a replayed tool call is answered.
type replayed struct {
	how      string // trace.Replayed*
	orig     *origCall
	mock     json.RawMessage
	reason   string
	diverged string
}

// serve decides, from the manifest and never by convention, how a call in a
// replay is answered: a call that matches the recording exactly (tool and
// canonical arguments) gets the recorded result; otherwise a tool without
// side effects runs live, an internal one runs live only where the replay's
// environment allows it, and an external one never does: it gets its
// declared mock, or a denial the model sees.
func (rs *replayState) serve(step, index int, name, argsHash string, m *tool.Manifest) *replayed {
	orig := rs.calls[[2]int{step, index}]
	matched := orig != nil && orig.result != nil && orig.attempt.Tool == name && orig.attempt.ArgsHash == argsHash
	r := &replayed{orig: orig}
	if !matched && !rs.diverged {
		r.diverged = fmt.Sprintf("call %s differs from the recording", name)
		if orig != nil {
			r.diverged = fmt.Sprintf("call %s differs from the recorded %s", name, orig.attempt.Tool)
		} else {
			r.diverged = fmt.Sprintf("call %s was not in the recording", name)
		}
	}
	switch {
	case matched && (step < rs.info.FromStep || rs.info.Mode == trace.ReplayRecorded || m.SideEffects != tool.SideEffectsNone):
		r.how = trace.ReplayedRecorded
	case m.SideEffects == tool.SideEffectsNone:
		r.how = trace.ReplayedLive
	case m.SideEffects == tool.SideEffectsInternal && rs.info.InternalLive:
		r.how = trace.ReplayedLive
	case rs.info.Mocks[name] != nil:
		r.how, r.mock = trace.ReplayedMock, rs.info.Mocks[name]
	default:
		r.how = trace.ReplayedDenied
		r.reason = fmt.Sprintf("replay: %s has side_effects %s and this call does not match the recording, so it was not executed (declare a mock for it to continue)", name, m.SideEffects)
	}
	return r
}

// result builds the tool_result of a call not run live.
func (r *replayed) result(callID string, index int, name string) trace.ToolResult {
	tr := trace.ToolResult{CallID: callID, Index: index, Tool: name, Replayed: r.how}
	var out []byte
	switch r.how {
	case trace.ReplayedRecorded:
		o := r.orig.result
		tr.Status, tr.Output, tr.Bytes, tr.Truncated, tr.ResultHash = o.Status, o.Output, o.Bytes, o.Truncated, o.ResultHash
		return tr
	case trace.ReplayedMock:
		tr.Status, out = trace.StatusOK, r.mock
	default:
		tr.Status = trace.StatusDenied
		out, _ = json.Marshal(map[string]string{"error": r.reason, "control": "replay"})
	}
	sum := sha256.Sum256(out)
	tr.Output, tr.Bytes, tr.ResultHash = trace.Content{Text: string(out), Size: int64(len(out))}, int64(len(out)), hex.EncodeToString(sum[:])
	return tr
}

// noteModelDivergence records a divergence when a live response differs
// from the original's at the same step (text or calls).
func (l *Loop) noteModelDivergence(ctx context.Context, st *state, step int, noTools bool, resp *model.Response) error {
	rs := st.replay
	if rs == nil || rs.diverged || resp == nil {
		return nil
	}
	var orig *origModel
	for i := range rs.models[step] {
		if rs.models[step][i].noTools == noTools {
			orig = &rs.models[step][i]
		}
	}
	if orig == nil {
		return l.diverge(ctx, st, step, -1, "the original made no such model call")
	}
	if responseKey(orig.Response) != responseKey(resp) {
		return l.diverge(ctx, st, step, -1, "the model answered differently")
	}
	return nil
}

func responseKey(r *model.Response) string {
	k := r.Text()
	for _, c := range r.ToolCalls() {
		args, err := jsoncanon.Canonicalize(c.Input)
		if err != nil {
			args = c.Input
		}
		k += "\x00" + c.Name + "\x00" + string(args)
	}
	return k
}

func (l *Loop) diverge(ctx context.Context, st *state, step, index int, reason string) error {
	if st.replay == nil || st.replay.diverged {
		return nil
	}
	_, err := st.env.Record(ctx, trace.EvDiverged, step, engine.Buffered, trace.Diverged{Step: step, Index: index, Reason: reason})
	st.replay.diverged = true
	return err
}
