package apiclient

import (
	"encoding/json"
	"time"
)

// Session is a browser's sign-in: the answer of POST and GET /v1/session.
// The session itself travels in an HttpOnly cookie; CSRFToken must be sent
// in the X-CSRF-Token header of every state-changing request made with it.
type Session struct {
	Tenant    string    `json:"tenant"`
	User      string    `json:"user"`
	Scopes    []string  `json:"scopes"`
	Via       string    `json:"via"`
	CSRFToken string    `json:"csrf_token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// Prompt is the request of one model call as rebuilt from the run's log
// (GET /v1/runs/{id}/prompt): byte for byte what was sent when Verified
// (its hash equals the recorded prompt_hash).
type Prompt struct {
	RunID      string          `json:"run_id"`
	Seq        int64           `json:"seq"`
	Step       int             `json:"step"`
	Model      string          `json:"model,omitempty"`
	PromptHash string          `json:"prompt_hash"`
	Verified   bool            `json:"verified"`
	System     string          `json:"system"`
	Tools      []string        `json:"tools"`
	Messages   []PromptMessage `json:"messages"`
	Render     string          `json:"render,omitempty"`
}

// PromptMessage is one message of a rebuilt prompt.
type PromptMessage struct {
	Role  string       `json:"role"`
	Parts []PromptPart `json:"parts"`
}

// PromptPart is one part of a message: text, a tool call (Name, Input) or
// a tool result (ToolUseID, IsError).
type PromptPart struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ToolUseID string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

// AgentMetrics holds seed 004's online metrics of an agent's versions over
// the caller's tenant's most recent runs (GET /v1/agents/{agent}/metrics).
type AgentMetrics struct {
	Agent    string           `json:"agent"`
	Versions []VersionMetrics `json:"versions"`
}

// VersionMetrics are one version's online metrics. Rates are fractions
// (0..1) of the runs, calls or decisions they count, 0 when there are none.
type VersionMetrics struct {
	Version int `json:"version"`
	// Runs is how many runs were read (the most recent, up to the limit);
	// Ended of them have ended.
	Runs  int `json:"runs"`
	Ended int `json:"ended"`
	// Succeeded ended completed (not partially, not failed, not cancelled).
	Succeeded   int     `json:"succeeded"`
	TaskSuccess float64 `json:"task_success"`
	// CostPerSuccessMicros is the cost of every ended run divided by the
	// successful ones (a cheap version that fails twice is expensive);
	// CostKnown is false when some run's cost is unknown.
	CostPerSuccessMicros int64  `json:"cost_per_success_micros"`
	Currency             string `json:"currency,omitempty"`
	CostKnown            bool   `json:"cost_known"`
	StepsP50             int    `json:"steps_p50"`
	StepsP95             int    `json:"steps_p95"`
	// Decisions are approval decisions made by a person; Overridden of
	// them rejected or edited the proposed call.
	Decisions    int     `json:"decisions"`
	Overridden   int     `json:"overridden"`
	OverrideRate float64 `json:"override_rate"`
	// ToolResults counts tool results; ToolErrors those that failed or
	// timed out.
	ToolResults   int     `json:"tool_results"`
	ToolErrors    int     `json:"tool_errors"`
	ToolErrorRate float64 `json:"tool_error_rate"`
	// StoppedByBudget and StoppedByLoop count ended runs that a budget or
	// loop detection stopped, and their shares of Ended.
	StoppedByBudget int     `json:"stopped_by_budget"`
	StoppedByLoop   int     `json:"stopped_by_loop"`
	BudgetStopRate  float64 `json:"budget_stop_rate"`
	LoopStopRate    float64 `json:"loop_stop_rate"`
}
