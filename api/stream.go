package api

import (
	"encoding/json"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// StreamVersion is the version of the public run event stream. The stream
// is a contract with API consumers, kept apart from the internal log types
// (trace.Ev*), which may evolve: a new internal type maps to an existing
// public event or to log.event, and a change that would break a consumer
// needs a new StreamVersion. Consumers ignore event types and fields they
// do not know.
const StreamVersion = 1

// Public stream event types (seed 004's names). Every one that mirrors a
// log event carries the log's sequence number as its SSE id, so
// Last-Event-ID resumes exactly.
const (
	StreamRunStarted       = "run.started"
	StreamStepStarted      = "step.started"
	StreamModelCall        = "step.model_call"
	StreamCompaction       = "step.compacted"
	StreamToolCall         = "step.tool_call"
	StreamToolResult       = "step.tool_result"
	StreamLoopNote         = "step.loop_note"
	StreamApprovalRequired = "approval.required"
	StreamApprovalDecided  = "approval.decided"
	StreamSignal           = "run.signal"
	StreamTainted          = "run.tainted"
	StreamBudgetExceeded   = "run.budget_exceeded"
	StreamReplayDiverged   = "replay.diverged"
	StreamSandboxTeardown  = "sandbox.teardown"
	StreamRunCompleted     = "run.completed"
	StreamRunFailed        = "run.failed"
	StreamRunCancelled     = "run.cancelled"
	StreamLogEvent         = "log.event"
	// StreamRunWaiting is not a log event: the stream sends it when it has
	// caught up with a waiting run's log, with the id of the last event, so
	// a client that reconnects to a run still waiting is told again.
	StreamRunWaiting = "run.waiting"
	// StreamMessageDelta is live model text; it has no id (it is not a
	// record: the step.model_call that follows is) and never arrives
	// before the step.started of its step.
	StreamMessageDelta = "message.delta"
	// StreamEnd closes a finished run's stream; a client that reconnects
	// after it is answered 204, which stops a standard EventSource.
	StreamEnd = "stream.end"
)

// StreamEvent is one event of the public run stream: the SSE frame's data.
type StreamEvent struct {
	V     int       `json:"v"`
	ID    int64     `json:"id"`
	Type  string    `json:"type"`
	RunID string    `json:"run_id"`
	Step  int       `json:"step,omitempty"`
	At    time.Time `json:"at"`
	// Data is the type's documented shape (components/schemas/Stream* in
	// the OpenAPI document).
	Data json.RawMessage `json:"data"`
	// Log is the internal log event behind this one, only when the client
	// asked for it (include=log): agentplane's own clients render the
	// audit timeline from it. It follows the log's types, not this
	// contract.
	Log *Event `json:"log,omitempty"`
}

// Shapes of the stream events' data.
type (
	StreamRunStartedData struct {
		Agent          string `json:"agent"`
		AgentVersion   int    `json:"agent_version"`
		User           string `json:"user"`
		ModelAlias     string `json:"model_alias"`
		ReplayOf       string `json:"replay_of,omitempty"`
		ReplayFromStep int    `json:"replay_from_step,omitempty"`
	}
	StreamStepStartedData struct {
		Steps       int   `json:"steps"`
		InputTokens int64 `json:"input_tokens"`
		CostMicros  int64 `json:"cost_micros"`
		ElapsedMS   int64 `json:"elapsed_ms"`
	}
	StreamToolUse struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	}
	StreamModelCallData struct {
		Model               string          `json:"model,omitempty"`
		ModelAlias          string          `json:"model_alias"`
		StopReason          string          `json:"stop_reason,omitempty"`
		Text                string          `json:"text,omitempty"`
		ToolCalls           []StreamToolUse `json:"tool_calls"`
		InputTokens         int64           `json:"input_tokens"`
		OutputTokens        int64           `json:"output_tokens"`
		CacheReadTokens     int64           `json:"cache_read_tokens"`
		CacheCreationTokens int64           `json:"cache_creation_tokens"`
		CostMicros          int64           `json:"cost_micros"`
		Currency            string          `json:"currency,omitempty"`
		LatencyMS           int64           `json:"latency_ms"`
		PromptHash          string          `json:"prompt_hash"`
		Error               string          `json:"error,omitempty"`
	}
	StreamCompactionData struct {
		KeptMessages      int   `json:"kept_messages"`
		CompactedMessages int   `json:"compacted_messages"`
		InputTokens       int64 `json:"input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	}
	StreamToolCallData struct {
		CallID         string `json:"call_id"`
		Index          int    `json:"index"`
		Tool           string `json:"tool"`
		ArgsHash       string `json:"args_hash"`
		IdempotencyKey string `json:"idempotency_key"`
		Tier           int    `json:"tier,omitempty"`
		SideEffects    string `json:"side_effects,omitempty"`
		// Decision is allowed, denied or approval_required.
		Decision string `json:"decision"`
		Control  string `json:"control,omitempty"`
		Reason   string `json:"reason,omitempty"`
	}
	StreamSandboxData struct {
		Executor    string `json:"executor"`
		Tier        int    `json:"tier"`
		Lifecycle   string `json:"lifecycle"`
		ProvisionMS int64  `json:"provision_ms"`
		WallMS      int64  `json:"wall_ms"`
		Outcome     string `json:"outcome"`
		ExitCode    int    `json:"exit_code"`
		// Unclean says why the command did not end cleanly (its sandbox
		// was destroyed); empty when it did.
		Unclean string `json:"unclean,omitempty"`
	}
	StreamToolResultData struct {
		CallID    string             `json:"call_id"`
		Index     int                `json:"index"`
		Tool      string             `json:"tool"`
		Status    string             `json:"status"`
		Bytes     int64              `json:"bytes"`
		Truncated bool               `json:"truncated"`
		LatencyMS int64              `json:"latency_ms"`
		Replayed  string             `json:"replayed,omitempty"`
		Sandbox   *StreamSandboxData `json:"sandbox,omitempty"`
	}
	StreamLoopNoteData struct {
		Reason string `json:"reason"`
		Text   string `json:"text"`
	}
	StreamApprovalRequiredData struct {
		ApprovalID string    `json:"approval_id"`
		CallID     string    `json:"call_id"`
		Tool       string    `json:"tool"`
		Action     string    `json:"action"`
		Group      string    `json:"group"`
		Requester  string    `json:"requester"`
		ExpiresAt  time.Time `json:"expires_at"`
	}
	StreamApprovalDecidedData struct {
		ApprovalID string `json:"approval_id"`
		// Outcome is approved, rejected, edited or expired.
		Outcome string `json:"outcome"`
		Decider string `json:"decider,omitempty"`
		Comment string `json:"comment,omitempty"`
		Edited  bool   `json:"edited"`
	}
	StreamSignalData struct {
		Kind string `json:"kind"`
	}
	StreamTaintedData struct {
		Tool   string `json:"tool"`
		CallID string `json:"call_id"`
	}
	StreamBudgetData struct {
		Bound string `json:"bound"`
		Limit int64  `json:"limit"`
		Value int64  `json:"value"`
	}
	StreamDivergedData struct {
		Index  int    `json:"index"`
		Reason string `json:"reason"`
	}
	StreamTeardownData struct {
		Sandboxes []StreamTeardownSandbox `json:"sandboxes"`
	}
	StreamTeardownSandbox struct {
		ID       string `json:"id"`
		Executor string `json:"executor"`
		By       string `json:"by"`
		Uses     int    `json:"uses"`
		Error    string `json:"error,omitempty"`
	}
	StreamRunEndedData struct {
		Status string `json:"status"`
		Result string `json:"result,omitempty"`
		Reason string `json:"reason,omitempty"`
	}
	StreamLogEventData struct {
		LogType string `json:"log_type"`
	}
	StreamRunWaitingData struct {
		Status string     `json:"status"`
		WakeAt *time.Time `json:"wake_at,omitempty"`
	}
	StreamMessageDeltaData struct {
		RunID string `json:"run_id"`
		Step  int    `json:"step"`
		Text  string `json:"text,omitempty"`
		Reset bool   `json:"reset,omitempty"`
	}
	StreamEndData struct {
		RunID       string `json:"run_id"`
		Status      string `json:"status"`
		LastEventID int64  `json:"last_event_id"`
	}
)

// publicEvent maps one log event to its public stream event. A payload the
// mapping cannot decode still yields the event (type and id), with empty
// data fields: the stream never stops on one odd record.
func publicEvent(ev *store.Event, withLog bool) StreamEvent {
	typ, data := publicData(ev)
	b, _ := json.Marshal(data)
	out := StreamEvent{V: StreamVersion, ID: ev.Seq, Type: typ, RunID: ev.RunID, Step: ev.Step, At: ev.At, Data: b}
	if withLog {
		l := toEvent(ev)
		out.Log = &l
	}
	return out
}

func publicData(ev *store.Event) (string, any) {
	p := ev.Payload
	switch ev.Type {
	case trace.EvRunStarted:
		var rs trace.RunStarted
		_ = json.Unmarshal(p, &rs)
		d := StreamRunStartedData{Agent: rs.Agent, AgentVersion: rs.AgentVersion, User: rs.User, ModelAlias: rs.ModelAlias}
		if rs.Replay != nil {
			d.ReplayOf, d.ReplayFromStep = rs.Replay.Of, rs.Replay.FromStep
		}
		return StreamRunStarted, d
	case trace.EvStepStarted:
		var s trace.StepStarted
		_ = json.Unmarshal(p, &s)
		return StreamStepStarted, StreamStepStartedData(s)
	case trace.EvModelCall:
		var mc trace.ModelCall
		_ = json.Unmarshal(p, &mc)
		d := StreamModelCallData{Model: mc.Model, ModelAlias: mc.Alias, CostMicros: mc.CostMicros, Currency: mc.Currency,
			LatencyMS: mc.LatencyMS, PromptHash: mc.PromptHash, Error: mc.Error, ToolCalls: []StreamToolUse{}}
		if r := mc.Response; r != nil {
			d.StopReason, d.Text = r.StopReason, r.Text()
			d.InputTokens, d.OutputTokens = r.Usage.InputTokens, r.Usage.OutputTokens
			d.CacheReadTokens, d.CacheCreationTokens = r.Usage.CacheReadTokens, r.Usage.CacheCreationTokens
			for _, c := range r.ToolCalls() {
				d.ToolCalls = append(d.ToolCalls, StreamToolUse{ID: c.ToolUseID, Name: c.Name})
			}
		}
		return StreamModelCall, d
	case trace.EvCompaction:
		var c trace.Compaction
		_ = json.Unmarshal(p, &c)
		return StreamCompaction, StreamCompactionData{KeptMessages: c.KeptMessages, CompactedMessages: c.CompactedMessages,
			InputTokens: c.InputTokens, OutputTokens: c.OutputTokens}
	case trace.EvToolAttempt:
		var a trace.ToolAttempt
		_ = json.Unmarshal(p, &a)
		decision := "denied"
		switch {
		case a.Decision.Approval != nil:
			decision = "approval_required"
		case a.Decision.Allowed:
			decision = "allowed"
		}
		return StreamToolCall, StreamToolCallData{CallID: a.CallID, Index: a.Index, Tool: a.Tool, ArgsHash: a.ArgsHash,
			IdempotencyKey: a.IdempotencyKey, Tier: a.Tier, SideEffects: a.SideEffects, Decision: decision,
			Control: a.Decision.Control, Reason: a.Decision.Reason}
	case trace.EvToolResult:
		var r trace.ToolResult
		_ = json.Unmarshal(p, &r)
		d := StreamToolResultData{CallID: r.CallID, Index: r.Index, Tool: r.Tool, Status: r.Status, Bytes: r.Bytes,
			Truncated: r.Truncated, LatencyMS: r.LatencyMS, Replayed: r.Replayed}
		if sb := r.Sandbox; sb != nil {
			d.Sandbox = &StreamSandboxData{Executor: sb.Executor, Tier: sb.Tier, Lifecycle: sb.Lifecycle,
				ProvisionMS: sb.ProvisionMS, WallMS: sb.WallMS, Outcome: sb.Outcome, ExitCode: sb.ExitCode, Unclean: sb.Unclean}
		}
		return StreamToolResult, d
	case trace.EvLoopNote:
		var n trace.LoopNote
		_ = json.Unmarshal(p, &n)
		return StreamLoopNote, StreamLoopNoteData(n)
	case trace.EvApprovalReq:
		var q trace.ApprovalRequested
		_ = json.Unmarshal(p, &q)
		return StreamApprovalRequired, StreamApprovalRequiredData{ApprovalID: q.ApprovalID, CallID: q.CallID, Tool: q.Tool,
			Action: q.Description, Group: q.Group, Requester: q.Requester, ExpiresAt: q.ExpiresAt}
	case trace.EvApprovalDec:
		var d trace.ApprovalDecided
		_ = json.Unmarshal(p, &d)
		return StreamApprovalDecided, StreamApprovalDecidedData{ApprovalID: d.ApprovalID, Outcome: d.Outcome,
			Decider: d.Decider, Comment: d.Comment, Edited: d.EditedArgs != nil}
	case trace.EvSignal:
		var s trace.Signal
		_ = json.Unmarshal(p, &s)
		return StreamSignal, StreamSignalData{Kind: s.Kind}
	case trace.EvTaint:
		var t trace.Taint
		_ = json.Unmarshal(p, &t)
		return StreamTainted, StreamTaintedData{Tool: t.Tool, CallID: t.CallID}
	case trace.EvBudget:
		var b trace.Budget
		_ = json.Unmarshal(p, &b)
		return StreamBudgetExceeded, StreamBudgetData(b)
	case trace.EvDiverged:
		var d trace.Diverged
		_ = json.Unmarshal(p, &d)
		return StreamReplayDiverged, StreamDivergedData{Index: d.Index, Reason: d.Reason}
	case trace.EvSandboxEnd:
		var t trace.SandboxTeardowns
		_ = json.Unmarshal(p, &t)
		d := StreamTeardownData{Sandboxes: []StreamTeardownSandbox{}}
		for _, s := range t.Sandboxes {
			d.Sandboxes = append(d.Sandboxes, StreamTeardownSandbox{ID: s.ID, Executor: s.Executor, By: s.By, Uses: s.Uses, Error: s.Err})
		}
		return StreamSandboxTeardown, d
	case trace.EvRunCompleted, trace.EvRunFailed:
		var e trace.RunEnded
		_ = json.Unmarshal(p, &e)
		typ := StreamRunCompleted
		switch {
		case e.Status == store.StatusCancelled:
			typ = StreamRunCancelled
		case ev.Type == trace.EvRunFailed:
			typ = StreamRunFailed
		}
		return typ, StreamRunEndedData(e)
	}
	return StreamLogEvent, StreamLogEventData{LogType: ev.Type}
}

// PublicEventType is the public stream type a log event is shown as.
func PublicEventType(ev *store.Event) string {
	typ, _ := publicData(ev)
	return typ
}
