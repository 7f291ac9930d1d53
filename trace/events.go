// Package trace defines what a run's event log records: the event types, their
// payloads, content stored inline or by reference to the blob store, and the
// transcript builder that turns events into the messages a model sees. The
// same builder is used by the live loop and by observability replay, so a
// reconstructed prompt is byte-for-byte the prompt that was sent, which the
// recorded prompt hash proves.
package trace

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/agentplane/agentplane/model"
	"github.com/agentplane/agentplane/redact"
	"github.com/agentplane/agentplane/store"
)

// Event types.
const (
	EvRunStarted   = "run_started"
	EvStepStarted  = "step_started"
	EvModelCall    = store.EventModelCall
	EvToolAttempt  = "tool_attempt"
	EvToolResult   = "tool_result"
	EvLoopNote     = "loop_note"
	EvSignal       = "signal"
	EvBudget       = "budget_exceeded"
	EvTaint        = "taint"
	EvApprovalReq  = "approval_requested"
	EvApprovalDec  = "approval_decided"
	EvDiverged     = "replay_diverged"
	EvCompaction   = "compaction"
	EvToolsLoaded  = "tools_loaded"
	EvSandboxEnd   = "sandbox_teardown"
	EvRunCompleted = "run_completed"
	EvRunFailed    = "run_failed"
)

// Content is a payload stored inline when small, or in the blob store by
// sha256 with a preview when large.
type Content struct {
	Text    string `json:"text,omitempty"`
	Blob    string `json:"blob,omitempty"` // hex sha256
	Size    int64  `json:"size"`
	Preview string `json:"preview,omitempty"`
}

// IsBlob reports whether the content lives in the blob store.
func (c Content) IsBlob() bool { return c.Blob != "" }

// Sum decodes the blob hash.
func (c Content) Sum() ([32]byte, error) {
	var sum [32]byte
	b, err := hex.DecodeString(c.Blob)
	if err != nil || len(b) != 32 {
		return sum, fmt.Errorf("bad blob reference %q", c.Blob)
	}
	copy(sum[:], b)
	return sum, nil
}

// MakeContent stores data inline if it is at most threshold bytes, otherwise
// in the blob store with a preview of previewLen bytes.
func MakeContent(ctx context.Context, blobs store.BlobStore, data []byte, threshold, previewLen int) (Content, error) {
	if len(data) <= threshold {
		return Content{Text: string(data), Size: int64(len(data))}, nil
	}
	sum, err := blobs.PutBlob(ctx, data)
	if err != nil {
		return Content{}, fmt.Errorf("store blob: %w", err)
	}
	return Content{Blob: hex.EncodeToString(sum[:]), Size: int64(len(data)), Preview: Preview(data, previewLen)}, nil
}

// Load returns the full bytes of c.
func Load(ctx context.Context, blobs store.BlobStore, c Content) ([]byte, error) {
	if !c.IsBlob() {
		return []byte(c.Text), nil
	}
	sum, err := c.Sum()
	if err != nil {
		return nil, err
	}
	return blobs.GetBlob(ctx, sum)
}

// Preview returns at most n bytes of data, cut at a UTF-8 boundary.
func Preview(data []byte, n int) string {
	if len(data) <= n {
		return string(data)
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(data[cut]) {
		cut--
	}
	return string(data[:cut])
}

// ToolRef names a tool manifest pinned by a run.
type ToolRef struct {
	Name string `json:"name"`
	Hash string `json:"hash"`
	// Reviewed says whether the platform reviewed this manifest (its
	// catalog lists the same manifest hash): only then are its description
	// and, if it declares so, its output trusted text (see
	// RunStarted.TaintRules).
	Reviewed bool `json:"reviewed,omitempty"`
}

// RunStarted is the first event of every run.
type RunStarted struct {
	Agent        string          `json:"agent"`
	AgentVersion int             `json:"agent_version"`
	AgentHash    string          `json:"agent_hash"`
	Tenant       string          `json:"tenant"`
	User         string          `json:"user"`
	Task         string          `json:"task"`
	ModelAlias   string          `json:"model_alias"`
	Tools        []ToolRef       `json:"tools"`
	System       Content         `json:"system"`
	ToolDefs     Content         `json:"tool_defs"` // JSON []model.ToolDef offered to the model
	Budgets      json.RawMessage `json:"budgets"`
	Replay       *ReplayInfo     `json:"replay,omitempty"`
	// Compaction, when set, is how older steps are compacted.
	Compaction *CompactionPolicy `json:"compaction,omitempty"`
	// Temperature is the sampling temperature the agent version asks for
	// (nil: the provider's default).
	Temperature *float64 `json:"temperature,omitempty"`
	// Bindings are the argument values this run may act on (for example
	// the customer a ticket is about), narrowing its user's; every call is
	// checked against them.
	Bindings map[string]string `json:"bindings,omitempty"`
	// TaintRules is the version of the taint rules the run was started
	// under: 0 (logs before it existed) taints only on the output of a
	// tool marked untrusted_output; TaintRules2 also on a granted tool
	// whose manifest the platform did not review (at the start), on the
	// output of any tool that is not a reviewed tier-1 tool declaring
	// trusted output, on a message added to the run, and on an approver's
	// comment. A run keeps the rules it started with, so its log replays.
	TaintRules int `json:"taint_rules,omitempty"`
	// LoopVersion is the version of the loop's recording rules the run
	// started under, so a newer loop replays an older log as recorded: 0
	// (logs before it existed) records sandbox_teardown only after a result
	// that carries a sandbox boundary record; LoopVersion1 records it
	// whenever a tier-2/3 call ran, so no sandbox is ended unrecorded.
	LoopVersion int `json:"loop_version,omitempty"`
	// Searchable are the tools the agent may find with search_tools
	// (package toolsearch), sorted by name: the manifests of its search
	// grants that were reviewed, offerable (not quarantined) and not
	// already in Tools when the run started. None of them is offered
	// until a search loads it (ToolsLoaded). Empty for an agent without a
	// search grant, whose ToolDefs then have no search_tools.
	Searchable []ToolRef `json:"searchable,omitempty"`
}

// ToolsLoaded records one search_tools call, between its tool_attempt and
// its tool_result: the query, the ranking, and the tools it added to the
// model's tools. Loaded tools are offered after the tools of run_started
// (the cached prompt prefix stays as it was), in the order of these
// events and, within one, of Loaded. A replay and a verifying re-run read
// this event; nothing searches again.
type ToolsLoaded struct {
	CallID string `json:"call_id"`
	Index  int    `json:"index"`
	Query  string `json:"query"`
	Limit  int    `json:"limit"`
	// Hits are the ranked matches the run's user may use, best first.
	Hits []SearchHit `json:"hits"`
	// Loaded are the hits not offered before, in hit order.
	Loaded []ToolRef `json:"loaded"`
	// Defs is the JSON []model.ToolDef of Loaded, in the same order.
	Defs Content `json:"defs"`
	// Replayed is ReplayedRecorded when the hits were taken from the
	// original run of a replay rather than searched.
	Replayed string `json:"replayed,omitempty"`
	// Dropped names recorded hits a replay did not load because they are
	// no longer searchable for this run (quarantined, changed, not
	// permitted).
	Dropped []string `json:"dropped,omitempty"`
	// Error is why the search was refused (bad arguments): the model is
	// told, and nothing is loaded.
	Error string `json:"error,omitempty"`
}

// SearchHit is one ranked tool of a search.
type SearchHit struct {
	Name  string  `json:"name"`
	Score float64 `json:"score"`
}

// LoopVersion1 is the first versioned set of loop recording rules.
const LoopVersion1 = 1

// TaintRules2 is the current RunStarted.TaintRules.
const TaintRules2 = 2

// CompactionPolicy is the agent version's compaction settings as pinned by
// the run.
type CompactionPolicy struct {
	Alias      string `json:"alias"`
	AtTokens   int64  `json:"at_tokens,omitempty"`
	EverySteps int    `json:"every_steps,omitempty"`
	KeepSteps  int    `json:"keep_steps"`
}

// Compaction records that older steps were rewritten into a progress note.
// The raw steps stay in the log; the transcript keeps the first message,
// the note, and the last KeptMessages messages.
type Compaction struct {
	Note              Content  `json:"note"`
	KeptMessages      int      `json:"kept_messages"`
	CompactedMessages int      `json:"compacted_messages"`
	Identifiers       int      `json:"identifiers"`
	Restored          []string `json:"restored,omitempty"`
	Model             string   `json:"model,omitempty"`
	InputTokens       int64    `json:"input_tokens"`
	OutputTokens      int64    `json:"output_tokens"`
	CostMicros        int64    `json:"cost_micros"`
	CostKnown         bool     `json:"cost_known"`
	LatencyMS         int64    `json:"latency_ms"`
	Error             string   `json:"error,omitempty"`
}

// Replay determinism modes.
const (
	// ReplayRecorded serves the original's model outputs at every step it
	// has; tool results are served from the recording where calls match.
	ReplayRecorded = "recorded"
	// ReplayLive serves steps before FromStep from the recording and asks
	// the model again from FromStep on.
	ReplayLive = "live"
)

// ReplayInfo links a replay run to its original and says how it replays:
// steps before FromStep are served from the original's log exactly; from
// FromStep on the loop goes live with the patch applied, and side effects
// are enforced from each tool's manifest.
type ReplayInfo struct {
	Of       string `json:"of"`
	FromStep int    `json:"from_step"`
	Mode     string `json:"mode"` // recorded | live
	// Patch: a different model alias or instructions (the agent version, if
	// changed, is the run's pinned version).
	ModelAlias   string `json:"model_alias,omitempty"`
	Instructions string `json:"instructions,omitempty"`
	// Mocks are explicit outputs per tool, served when a call does not match
	// the recording and the tool may not run live.
	Mocks map[string]json.RawMessage `json:"mocks,omitempty"`
	// InternalLive marks the target environment as one where tools with
	// side_effects internal may run live.
	InternalLive bool `json:"internal_live,omitempty"`
}

// Where a replayed tool result came from.
const (
	ReplayedRecorded = "recorded"
	ReplayedMock     = "mock"
	ReplayedDenied   = "denied"
	ReplayedLive     = "live"
)

// Diverged records the first point where a replay left its original.
type Diverged struct {
	Step   int    `json:"step"`
	Index  int    `json:"index"`
	Reason string `json:"reason"`
}

// StepStarted marks a step boundary and records the usage the bounds were
// checked against; its event time is the loop's clock reading.
type StepStarted struct {
	Steps       int   `json:"steps"`
	InputTokens int64 `json:"input_tokens"`
	CostMicros  int64 `json:"cost_micros"`
	ElapsedMS   int64 `json:"elapsed_ms"`
}

// ModelCall records one model call: which transcript events were added to
// the prompt since the previous call (Delta, by sequence number), the hash
// of the full request, and the response.
type ModelCall struct {
	Alias       string          `json:"alias"`
	Model       string          `json:"model,omitempty"`
	Delta       []int64         `json:"delta"`
	PromptHash  string          `json:"prompt_hash"`
	PromptBytes int64           `json:"prompt_bytes"`
	NoTools     bool            `json:"no_tools,omitempty"`
	Response    *model.Response `json:"response,omitempty"`
	Error       string          `json:"error,omitempty"`
	CostMicros  int64           `json:"cost_micros"`
	Currency    string          `json:"currency,omitempty"`
	CostKnown   bool            `json:"cost_known"`
	LatencyMS   int64           `json:"latency_ms"`
	// ReplayedFrom is the original's model_call seq when a replay served
	// this response from the recording (no model call, no cost).
	ReplayedFrom int64 `json:"replayed_from,omitempty"`
	// Temperature is what the call was sent with (nil: provider default).
	Temperature *float64 `json:"temperature,omitempty"`
	// BudgetRefused is set when the gateway refused the call before
	// sending it, because its estimate would cross a bound.
	BudgetRefused *Budget `json:"budget_refused,omitempty"`
}

// Decision is the broker's verdict on a proposed tool call.
type Decision struct {
	Allowed bool   `json:"allowed"`
	Control string `json:"control,omitempty"` // which control decided: grant, schema, authz, policy, rate_limit, approval, replay
	Reason  string `json:"reason,omitempty"`
	// Approval is set when Control is "approval": who must approve, within
	// how long, and which rule asked for it.
	Approval *ApprovalNeed `json:"approval,omitempty"`
	// Rule names the rule that decided, when one did: "policy:NAME",
	// "manifest:TOOL" or "rate_limit:10/min per run".
	Rule string `json:"rule,omitempty"`
}

// ApprovalNeed says what approval a call needs.
type ApprovalNeed struct {
	Group     string `json:"group"`
	ExpiresMS int64  `json:"expires_ms"`
	Rule      string `json:"rule,omitempty"`
	// Groups are all the groups the rules asked, Group first: the call
	// runs only once approvers covering every one have approved it. Empty
	// in older logs, where Group alone was asked.
	Groups []string `json:"groups,omitempty"`
	// Warnings are plain-words cautions for the approver about the
	// arguments (a look-alike or mixed-script address, invisible
	// characters), shown wherever the request is.
	Warnings []string `json:"warnings,omitempty"`
	// Binding is the hex sha256 of the tool name and the canonical
	// arguments (see broker.Binding): an approval covers exactly this call.
	Binding string `json:"binding,omitempty"`
}

// ToolAttempt is written (durably, for tools with side effects) before the
// tool runs.
type ToolAttempt struct {
	CallID         string   `json:"call_id"`
	Index          int      `json:"index"`
	Tool           string   `json:"tool"`
	Args           Content  `json:"args"`
	ArgsHash       string   `json:"args_hash"`
	IdempotencyKey string   `json:"idempotency_key"`
	SideEffects    string   `json:"side_effects,omitempty"`
	Tier           int      `json:"tier,omitempty"`
	Decision       Decision `json:"decision"`
}

// Tool result statuses.
const (
	StatusOK      = "ok"
	StatusError   = "error"   // the tool ran and reported failure
	StatusDenied  = "denied"  // a control refused the call
	StatusInvalid = "invalid" // arguments failed the schema
	StatusTimeout = "timeout"
)

// ToolResult records a tool's output as the model will see it.
type ToolResult struct {
	CallID     string  `json:"call_id"`
	Index      int     `json:"index"`
	Tool       string  `json:"tool"`
	Status     string  `json:"status"`
	Output     Content `json:"output"`
	Bytes      int64   `json:"bytes"` // measured before any truncation
	Truncated  bool    `json:"truncated,omitempty"`
	ResultHash string  `json:"result_hash,omitempty"`
	LatencyMS  int64   `json:"latency_ms"`
	// Redactions counts secrets the broker removed from the output before
	// it was stored or shown.
	Redactions int `json:"redactions,omitempty"`
	// Replayed says where a replay run's result came from (recorded, mock,
	// denied, live); empty outside replays.
	Replayed string `json:"replayed,omitempty"`
	// Sandbox is the boundary record of a tool that ran at tier 2 or 3.
	Sandbox *SandboxInfo `json:"sandbox,omitempty"`
}

// SandboxInfo is what the host measured at the sandbox boundary of one
// tool call. Every field is the host's own measurement except Claim, which
// holds what the wrapper inside the sandbox reported and never replaces a
// host field.
type SandboxInfo struct {
	ID       string `json:"id"`
	Host     string `json:"host"`
	Executor string `json:"executor"` // bubblewrap | gvisor | firecracker
	Tier     int    `json:"tier"`
	// RequestedTier and Downgraded record a tier-3 tool run at tier 2
	// because the operator allowed it.
	RequestedTier int    `json:"requested_tier,omitempty"`
	Downgraded    bool   `json:"downgraded,omitempty"`
	Lifecycle     string `json:"lifecycle"` // created | warm | restored | reused-in-session
	// ProvisionMS is the time to get a sandbox, WallMS what the host waited
	// for the command.
	ProvisionMS int64 `json:"provision_ms"`
	WallMS      int64 `json:"wall_ms"`
	// Outcome keeps ok, exit, timeout, oom, killed and sandbox apart.
	Outcome  string `json:"outcome"`
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	// Unclean says why the command did not end cleanly as the host saw it
	// (timer fired, the wrapper's report never came, processes outlived
	// it); such a sandbox was destroyed, not reused.
	Unclean string `json:"unclean,omitempty"`
	// Byte counts are measured by the host before any truncation.
	BytesIn         int64 `json:"bytes_in"`
	StdoutBytes     int64 `json:"stdout_bytes"`
	StderrBytes     int64 `json:"stderr_bytes"`
	StdoutTruncated bool  `json:"stdout_truncated,omitempty"`
	StderrTruncated bool  `json:"stderr_truncated,omitempty"`
	PeakMemoryBytes int64 `json:"peak_memory_bytes,omitempty"`
	// Teardown is caller, reaper or nobody once the sandbox is gone; empty
	// while the run's session keeps it (its teardown is logged later under
	// the same id).
	Teardown    string          `json:"teardown,omitempty"`
	Traceparent string          `json:"traceparent,omitempty"`
	Egress      []EgressAttempt `json:"egress,omitempty"`
	// Claim is the guest's claim: the wrapper's own report of the command.
	Claim *SandboxClaim `json:"guest_claim,omitempty"`
	// GuestSpans are the spans the program emitted, as the host accepted
	// them: exported as children of the call's execute_tool span, never
	// trusted as a measurement.
	GuestSpans *GuestSpans `json:"guest_spans,omitempty"`
}

// GuestSpan is one span a sandboxed program emitted, as the host accepted
// it (sandbox.ParseGuestSpans): offsets are from the start of the host's window of the command.
type GuestSpan struct {
	Name string `json:"name"`
	// Parent is the index of an earlier span of the same call, or -1 for
	// the call's execute_tool span.
	Parent     int            `json:"parent"`
	StartUS    int64          `json:"start_us"`
	DurationUS int64          `json:"duration_us"`
	Error      bool           `json:"error,omitempty"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// GuestSpans is what the host kept of one call's emitted spans.
type GuestSpans struct {
	Spans []GuestSpan `json:"spans,omitempty"`
	// Dropped counts lines refused or over a limit; Reasons says why, one
	// entry a kind of refusal (bounded).
	Dropped int      `json:"dropped,omitempty"`
	Reasons []string `json:"reasons,omitempty"`
}

// SandboxClaim is what the wrapper inside a sandbox reported of one
// command (its sidecar). It was written next to the code that ran, so it
// is kept as the guest's claim, beside what the host measured, and never
// overrides a host field: where it contradicts one, Disputed names the
// host field and the host's value stands.
type SandboxClaim struct {
	// ExecMS, ExitCode and Signal are the wrapper's figures (nil ExitCode:
	// no report).
	ExecMS          int64  `json:"exec_ms,omitempty"`
	ExitCode        *int   `json:"exit_code,omitempty"`
	Signal          string `json:"signal,omitempty"`
	PeakMemoryBytes int64  `json:"peak_memory_bytes,omitempty"`
	// Report is the whole sidecar: size-capped, schema-checked, scrubbed.
	Report json.RawMessage `json:"report,omitempty"`
	// Error says why there is no report, or why it was refused.
	Error string `json:"error,omitempty"`
	// Disputed lists the host fields the claim contradicts (outcome,
	// exit_code, signal, wall_ms).
	Disputed []string `json:"disputed,omitempty"`
}

// SandboxTeardowns records how a run's sandboxes ended: written once, before
// the terminal event, by a run that used any. Sandboxes the reaper destroyed
// while the run waited are listed too (by reaper).
type SandboxTeardowns struct {
	Sandboxes []SandboxTeardown `json:"sandboxes"`
}

// SandboxTeardown is one destroyed sandbox.
type SandboxTeardown struct {
	ID       string `json:"id"`
	Executor string `json:"executor"`
	By       string `json:"by"` // caller | reaper | nobody
	Reason   string `json:"reason"`
	Uses     int    `json:"uses"`
	Err      string `json:"error,omitempty"`
}

// EgressAttempt is one connection the egress proxy allowed or refused.
type EgressAttempt struct {
	Host    string `json:"host"`
	Port    int    `json:"port"`
	Allowed bool   `json:"allowed"`
	Reason  string `json:"reason"`
	Addr    string `json:"addr,omitempty"`
}

// NoteApproval is the LoopNote reason of what the model is told about the
// approval of one of its calls (edits, approvers' comments); the transcript
// shows it at the next step's start, after every result of the step.
const NoteApproval = "approval"

// LoopNote is a message the platform adds for the model.
type LoopNote struct {
	Reason string `json:"reason"`
	Text   string `json:"text"`
}

// Signal records an external input consumed by the loop.
type Signal struct {
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// Taint sources: what put text the platform did not write or review into
// the run's context.
const (
	TaintToolOutput      = "tool_output"      // a tool whose output is not trusted returned a result
	TaintToolDescription = "tool_description" // a granted tool's manifest was not reviewed by the platform
	TaintMessage         = "message"          // a message added to the run while it ran
	TaintApprovalComment = "approval_comment" // an approver's comment, which the model is shown
)

// Taint records that the run read untrusted content, and from where.
type Taint struct {
	// Source is one of the Taint* constants; empty in older logs, where
	// it was always a tool's output.
	Source string `json:"source,omitempty"`
	Tool   string `json:"tool,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Seq    int64  `json:"seq,omitempty"` // the event that carried it (tool_result, signal)
	// Detail says in words what was untrusted.
	Detail string `json:"detail,omitempty"`
}

// Signal kinds the loop understands. Payloads are JSON objects:
//
//	message  {"text": "..."}                       the user adds information
//	cancel   {"reason": "..."}                     stop at the next step boundary
//	approval {"approval_id": "...", "decision": "approve"|"reject"|"edit",
//	          "args_hash": "...", "args": {...} (edit only),
//	          "decider": "user id", "comment": "..."}
const (
	SignalMessage  = "message"
	SignalCancel   = "cancel"
	SignalApproval = "approval"
)

// MessagePayload is the payload of a message signal carrying text a user
// typed or pasted. Secret shapes in it (see package redact) are replaced by
// their [REDACTED:kind] placeholder first, so the signal, the log, every
// export and the model hold the placeholder, never the secret. It returns
// how many were replaced.
func MessagePayload(text string) ([]byte, int) {
	clean, n := UserText(text)
	b, _ := json.Marshal(map[string]string{"text": clean}) // a string map always encodes
	return b, n
}

// UserText is what is recorded of free text a caller supplies (a run's
// task, a message): the text with every recognised secret shape replaced
// by its placeholder. What the model then sees, and why, is in
// docs/design/broker.md.
func UserText(s string) (string, int) {
	return (*redact.Redactor)(nil).String(s)
}

// ApprovalSignal is the payload of an approval signal. The API checks the
// decider's group and that the decider is not the requester before storing
// it; the loop checks that it names a pending approval and binds to the same
// tool and canonical arguments (ArgsHash).
type ApprovalSignal struct {
	ApprovalID string          `json:"approval_id"`
	Decision   string          `json:"decision"` // approve | reject | edit
	ArgsHash   string          `json:"args_hash"`
	Args       json.RawMessage `json:"args,omitempty"`
	Decider    string          `json:"decider"`
	Comment    string          `json:"comment,omitempty"`
}

// ApprovalID names the approval of call index of step in run: stable, so a
// replayed run asks for the same approval, and parseable, so the API can find
// the run from it.
func ApprovalID(runID string, step, index int) string {
	return fmt.Sprintf("apr_%s_%d_%d", runID, step, index)
}

// ApprovalRoundID names the round-th request for the same call (round 1 is
// ApprovalID): a call asks again when an edit needs another group, or when
// its approvers so far do not cover every group it needs.
func ApprovalRoundID(runID string, step, index, round int) string {
	if round <= 1 {
		return ApprovalID(runID, step, index)
	}
	return fmt.Sprintf("%s.%d", ApprovalID(runID, step, index), round)
}

// ParseApprovalID is the inverse of ApprovalID and ApprovalRoundID (the
// round is dropped).
func ParseApprovalID(id string) (runID string, step, index int, err error) {
	rest, ok := strings.CutPrefix(id, "apr_")
	if !ok {
		return "", 0, 0, fmt.Errorf("bad approval id %q", id)
	}
	if i := strings.LastIndexByte(rest, '.'); i > strings.LastIndexByte(rest, '_') {
		round, err := strconv.Atoi(rest[i+1:])
		if err != nil || round < 2 || rest[i+1:] != strconv.Itoa(round) {
			return "", 0, 0, fmt.Errorf("bad approval id %q", id)
		}
		rest = rest[:i]
	}
	i := strings.LastIndexByte(rest, '_')
	if i < 0 {
		return "", 0, 0, fmt.Errorf("bad approval id %q", id)
	}
	j := strings.LastIndexByte(rest[:i], '_')
	if j < 0 {
		return "", 0, 0, fmt.Errorf("bad approval id %q", id)
	}
	step, err1 := strconv.Atoi(rest[j+1 : i])
	index, err2 := strconv.Atoi(rest[i+1:])
	if err1 != nil || err2 != nil || step < 1 || index < 0 || rest[:j] == "" {
		return "", 0, 0, fmt.Errorf("bad approval id %q", id)
	}
	return rest[:j], step, index, nil
}

// ApprovalRequested records that a call waits for a human. It is written
// after the call's tool_attempt (whose decision names the approval control).
type ApprovalRequested struct {
	ApprovalID  string    `json:"approval_id"`
	CallID      string    `json:"call_id"`
	Index       int       `json:"index"`
	Tool        string    `json:"tool"`
	Args        Content   `json:"args"`
	ArgsHash    string    `json:"args_hash"`
	Group       string    `json:"group"`
	Requester   string    `json:"requester"`
	ExpiresAt   time.Time `json:"expires_at"`
	Description string    `json:"description"`
	Rule        string    `json:"rule,omitempty"`
	// Groups are every group the call needs (Group is the one asked now).
	Groups []string `json:"groups,omitempty"`
	// Warnings caution the approver in plain words (see ApprovalNeed).
	Warnings []string `json:"warnings,omitempty"`
	// Round counts the requests for this call (1 for the first; omitted).
	Round int `json:"round,omitempty"`
	// Previous is the request this one follows, and Why says why another
	// request was needed (an edit that needs another group, a group not
	// yet covered).
	Previous string `json:"previous,omitempty"`
	Why      string `json:"why,omitempty"`
}

// Approval outcomes.
const (
	ApprovalApproved = "approved"
	ApprovalRejected = "rejected"
	ApprovalEdited   = "edited"
	ApprovalExpired  = "expired"
)

// ApprovalDecided records the outcome the loop acted on.
type ApprovalDecided struct {
	ApprovalID string  `json:"approval_id"`
	Outcome    string  `json:"outcome"`
	Decider    string  `json:"decider,omitempty"`
	Comment    string  `json:"comment,omitempty"`
	EditedArgs *string `json:"edited_args,omitempty"` // canonical JSON
	// PreviousArgs are the arguments the approver saw, canonical JSON,
	// recorded with an edit so the trace shows old beside new.
	PreviousArgs *string `json:"previous_args,omitempty"`
	// Recheck is the broker's decision on edited arguments: every control
	// again, as a new call.
	Recheck *Decision `json:"recheck,omitempty"`
	// Checked is set when the loop checked the decider itself (logs
	// before it trusted the API's check of the request's group).
	Checked bool `json:"checked,omitempty"`
	// Covers are the groups, of those the call needs, that the decider
	// belongs to (none when the decider started the run).
	Covers []string `json:"covers,omitempty"`
}

// Budget records which bound was reached.
type Budget struct {
	Bound string `json:"bound"` // steps | input_tokens | cost | wall_clock
	Limit int64  `json:"limit"`
	Value int64  `json:"value"`
}

// RunEnded is the payload of run_completed and run_failed.
type RunEnded struct {
	Status string `json:"status"`
	Result string `json:"result,omitempty"`
	Reason string `json:"reason,omitempty"`
}
