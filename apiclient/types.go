package apiclient

import (
	"encoding/json"
	"time"
)

// The types below are the API's wire format, shared by the server (package
// api) and this client, so the two cannot drift; the OpenAPI document at
// /v1/openapi.json describes the same shapes and a test keeps it true.

// Agent describes an agent the caller can see.
type Agent struct {
	Name string `json:"name"`
	// Platform is true for an operator's agent that every tenant may run.
	Platform bool  `json:"platform"`
	Versions []int `json:"versions"`
	// Retired lists the retired versions: they start no new run.
	Retired []int   `json:"retired"`
	Aliases []Alias `json:"aliases"`
}

// Alias points a name at a version, optionally with a canary.
type Alias struct {
	Alias     string    `json:"alias"`
	Version   int       `json:"version"`
	Canary    *Canary   `json:"canary,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Canary sends Percent of new runs (chosen by run id, deterministically)
// to Version.
type Canary struct {
	Version int `json:"version"`
	Percent int `json:"percent"`
}

// AgentVersion is one stored, immutable version.
type AgentVersion struct {
	Agent     string    `json:"agent"`
	Version   int       `json:"version"`
	SpecHash  string    `json:"spec_hash"`
	CreatedAt time.Time `json:"created_at"`
	// Created is false when identical content was stored already.
	Created bool `json:"created"`
	// Definition is the canonical JSON of the definition.
	Definition json.RawMessage `json:"definition,omitempty"`
	// RetiredAt is set once the version is retired.
	RetiredAt *time.Time `json:"retired_at,omitempty"`
	// StillAliased, in the answer to a retire, lists the aliases that
	// still lead to the version: runs through them are refused until
	// they move.
	StillAliased []string `json:"still_aliased,omitempty"`
}

// AgentList is the body of GET /v1/agents.
type AgentList struct {
	Agents []Agent `json:"agents"`
}

// SetAliasRequest is the body of PUT /v1/agents/{agent}/aliases/{alias}.
type SetAliasRequest struct {
	Version int     `json:"version"`
	Canary  *Canary `json:"canary,omitempty"`
}

// Approval is a tool call waiting for (or decided by) a human, as read from
// its run's log.
type Approval struct {
	ID          string          `json:"id"`
	RunID       string          `json:"run_id"`
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args,omitempty"`
	ArgsPreview string          `json:"args_preview,omitempty"`
	ArgsHash    string          `json:"args_hash"`
	Group       string          `json:"group"`
	Requester   string          `json:"requester"`
	Description string          `json:"description"`
	RequestedAt time.Time       `json:"requested_at"`
	ExpiresAt   time.Time       `json:"expires_at"`
	// Status is pending, approved, rejected, edited, expired, or withdrawn
	// (the run ended without a decision, e.g. cancelled).
	Status    string     `json:"status"`
	Decider   string     `json:"decider,omitempty"`
	Comment   string     `json:"comment,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	// Warnings caution the approver in plain words: a look-alike or
	// mixed-script address, invisible characters, %-routing.
	Warnings []string `json:"warnings,omitempty"`
	// Groups are every group the call needs when it needs more than one
	// (Group is the one asked by this request).
	Groups []string `json:"groups,omitempty"`
	// Round counts the requests for one call (2 and up: an edit needed
	// another group, or a group was not yet covered); Previous is the
	// request this one follows and Why says why it was needed.
	Round    int    `json:"round,omitempty"`
	Previous string `json:"previous,omitempty"`
	Why      string `json:"why,omitempty"`
	// EditedArgs are the arguments an edit decided (status edited).
	EditedArgs json.RawMessage `json:"edited_args,omitempty"`
}

// ApprovalList is the body of GET /v1/approvals.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// DecideRequest is the body of POST /v1/approvals/{approval_id}:decide.
type DecideRequest struct {
	// Decision is approve, reject or edit.
	Decision string `json:"decision"`
	// Args are the edited arguments (edit only): a new call, checked again.
	Args    json.RawMessage `json:"args,omitempty"`
	Comment string          `json:"comment,omitempty"`
}

// DecisionAccepted answers a decision: recorded as a signal to the run,
// which acts on it when a worker resumes it.
type DecisionAccepted struct {
	ApprovalID string `json:"approval_id"`
	RunID      string `json:"run_id"`
	Decision   string `json:"decision"`
	Decider    string `json:"decider"`
}

// Tenant is the caller's identity, its tenant's limits and current usage.
type Tenant struct {
	Tenant   string         `json:"tenant"`
	User     string         `json:"user"`
	Scopes   []string       `json:"scopes"`
	Via      string         `json:"via"`
	Limits   Limits         `json:"limits"`
	Usage    TenantUsage    `json:"usage"`
	Settings TenantSettings `json:"settings"`
}

// TenantSettings is a tenant's own configuration, the body of PUT
// /v1/tenant/settings (scope tenant:admin) and part of GET /v1/tenant.
type TenantSettings struct {
	// LinkDomains are the domains (with their subdomains) that model text
	// rendered for this tenant may link to; other links are made inert.
	LinkDomains []string `json:"link_domains"`
	// RequireAlias: callers without the tenant:admin scope start runs only
	// through an alias (or a bare name while prod is set), never by
	// version number or latest.
	RequireAlias bool       `json:"require_alias"`
	UpdatedAt    *time.Time `json:"updated_at,omitempty"`
}

// Limits are a tenant's quotas; zero means none.
type Limits struct {
	MaxConcurrentRuns int     `json:"max_concurrent_runs"`
	DailyCost         string  `json:"daily_cost,omitempty"`
	MonthlyCost       string  `json:"monthly_cost,omitempty"`
	Weight            float64 `json:"weight"`
}

// TenantUsage is what counts against the limits now.
type TenantUsage struct {
	OpenRuns  int              `json:"open_runs"`
	DailyCost map[string]int64 `json:"daily_cost_micros"`
	// MonthlyCost is by currency, in micro-units.
	MonthlyCost map[string]int64 `json:"monthly_cost_micros"`
}

// Run is a run as the API shows it.
type Run struct {
	ID           string    `json:"id"`
	Tenant       string    `json:"tenant"`
	User         string    `json:"user"`
	Agent        string    `json:"agent"`
	AgentVersion int       `json:"agent_version"`
	Mode         string    `json:"mode"`
	Status       string    `json:"status"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
	// WakeAt is when a waiting run's timer fires (an approval's expiry).
	WakeAt      *time.Time `json:"wake_at,omitempty"`
	Usage       Usage      `json:"usage"`
	Output      string     `json:"output,omitempty"`
	LastEventID int64      `json:"last_event_id"`
	ParentRunID string     `json:"parent_run_id,omitempty"`
	// Bindings are the argument values the run may act on.
	Bindings map[string]string `json:"bindings,omitempty"`
	// PendingApprovals lists the approvals a waiting run waits for.
	PendingApprovals []Approval `json:"pending_approvals,omitempty"`
	// OutputFlags (on a single run's read) name what rendering the run's
	// model text neutralises for this tenant: remote_image,
	// unlisted_link, html, bidi, invisible, idn_domain.
	OutputFlags []string `json:"output_flags,omitempty"`
}

// Usage is a run's recorded consumption.
type Usage struct {
	Steps        int    `json:"steps"`
	InputTokens  int64  `json:"input_tokens"`
	OutputTokens int64  `json:"output_tokens"`
	CostMicros   int64  `json:"cost_micros"`
	Currency     string `json:"currency,omitempty"`
	CostKnown    bool   `json:"cost_known"`
}

// CreateRunRequest is the body of POST /v1/runs.
type CreateRunRequest struct {
	Agent string `json:"agent"`
	// Version is a version number or an alias (default: prod, else the
	// latest version).
	Version json.RawMessage `json:"version,omitempty"`
	Input   string          `json:"input"`
	// Context is structured input appended to the task as JSON.
	Context map[string]any `json:"context,omitempty"`
	// Bindings narrow what the run may act on: every call that names one
	// of these arguments must name this value (for example
	// {"customer_id": "c_88213"}). They may narrow the caller's own
	// bindings, never contradict them (422).
	Bindings map[string]string `json:"bindings,omitempty"`
	// Mode is stream (answer with an SSE stream; an interactive run) or
	// async (answer 202; a background run). Default async.
	Mode string `json:"mode,omitempty"`
}

// RunList is the body of GET /v1/runs.
type RunList struct {
	Runs []Run `json:"runs"`
}

// EventList is the body of GET /v1/runs/{run_id}/events (JSON).
type EventList struct {
	Events []Event `json:"events"`
	// Status is the run's status when the events were read.
	Status string `json:"status"`
	// Render is "safe" when the payloads were neutralised for display
	// (?render=safe); their hashes are then those of the stored payloads.
	Render string `json:"render,omitempty"`
}

// MessageRequest is the body of POST /v1/runs/{run_id}/messages.
type MessageRequest struct {
	Text string `json:"text"`
}

// SignalAccepted answers a message or cancel: stored, effective at the
// run's next step boundary.
type SignalAccepted struct {
	RunID  string `json:"run_id"`
	Kind   string `json:"kind"`
	Status string `json:"status"` // the run's status when the signal was stored
}

// CancelRequest is the optional body of POST /v1/runs/{run_id}:cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"`
}

// ReplayRequest is the body of POST /v1/runs/{run_id}:replay.
type ReplayRequest struct {
	FromStep     int                        `json:"from_step"`
	Mode         string                     `json:"mode,omitempty"` // recorded | live
	Version      json.RawMessage            `json:"version,omitempty"`
	ModelAlias   string                     `json:"model_alias,omitempty"`
	Instructions string                     `json:"instructions,omitempty"`
	Mocks        map[string]json.RawMessage `json:"mocks,omitempty"`
}

// Event is an event of a run's log as the API shows it: in JSON lists and as
// the data of each SSE message (whose id is Seq).
type Event struct {
	RunID    string          `json:"run_id"`
	Seq      int64           `json:"seq"`
	Type     string          `json:"type"`
	Step     int             `json:"step"`
	At       time.Time       `json:"at"`
	Payload  json.RawMessage `json:"payload"`
	PrevHash string          `json:"prev_hash"`
	Hash     string          `json:"hash"`
}

// StreamEvent is one message of the public run stream (the API's
// StreamEvent): a versioned type and shape, the log's sequence number as
// its id, and the log event behind it when asked for with include=log.
type StreamEvent struct {
	V     int             `json:"v"`
	ID    int64           `json:"id"`
	Type  string          `json:"type"`
	RunID string          `json:"run_id"`
	Step  int             `json:"step,omitempty"`
	At    time.Time       `json:"at"`
	Data  json.RawMessage `json:"data"`
	Log   *Event          `json:"log,omitempty"`
}

// WebhookMessage is the body POSTed when a run ends.
type WebhookMessage struct {
	Type      string      `json:"type"` // run.completed, run.completed_partial, run.failed, run.cancelled
	Timestamp time.Time   `json:"timestamp"`
	Data      WebhookData `json:"data"`
}

// WebhookData describes the run that ended.
type WebhookData struct {
	RunID        string `json:"run_id"`
	Agent        string `json:"agent"`
	AgentVersion int    `json:"agent_version"`
	User         string `json:"user"`
	Status       string `json:"status"`
	Output       string `json:"output,omitempty"`
	Usage        Usage  `json:"usage"`
	LastEventID  int64  `json:"last_event_id"`
}

// Webhook is a tenant's endpoint as the API shows it.
type Webhook struct {
	URL string `json:"url"`
	// Secret is returned when the webhook is registered or its secret
	// rotated, and never by GET.
	Secret    string    `json:"secret,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// PutWebhookRequest is the body of PUT /v1/webhook.
type PutWebhookRequest struct {
	URL string `json:"url"`
	// RotateSecret makes a new secret; otherwise an existing one is kept.
	RotateSecret bool `json:"rotate_secret,omitempty"`
}

// Delivery is a webhook message and its attempts.
type Delivery struct {
	ID            string            `json:"id"`
	RunID         string            `json:"run_id"`
	Type          string            `json:"type"`
	URL           string            `json:"url"`
	Status        string            `json:"status"` // pending | delivered | failed | dropped (the webhook was deleted)
	Attempts      int               `json:"attempts"`
	NextAttemptAt *time.Time        `json:"next_attempt_at,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	LastError     string            `json:"last_error,omitempty"`
	Payload       json.RawMessage   `json:"payload,omitempty"`
	AttemptLog    []DeliveryAttempt `json:"attempt_log,omitempty"`
}

// DeliveryAttempt is one POST of a delivery.
type DeliveryAttempt struct {
	N          int       `json:"n"`
	At         time.Time `json:"at"`
	StatusCode int       `json:"status_code"`
	Error      string    `json:"error,omitempty"`
	DurationMS int64     `json:"duration_ms"`
}

// DeliveryList is the body of GET /v1/webhook/deliveries.
type DeliveryList struct {
	Deliveries []Delivery `json:"deliveries"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error ErrorBody `json:"error"`
}

// ErrorBody says what went wrong: a stable code and a message for people.
type ErrorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Quota details (429 only).
	Quota      string `json:"quota,omitempty"`
	Limit      string `json:"limit,omitempty"`
	Used       string `json:"used,omitempty"`
	RetryAfter int64  `json:"retry_after_seconds,omitempty"`
}

// EraseRequest is the body of POST /v1/erasures (scope tenant:admin):
// exactly one of RunID and User, of the caller's tenant.
type EraseRequest struct {
	RunID  string `json:"run_id,omitempty"`
	User   string `json:"user,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Erasure is the record of one run's erasure.
type Erasure struct {
	ID          string    `json:"id"`
	RunID       string    `json:"run_id"`
	User        string    `json:"user,omitempty"`
	RequestedBy string    `json:"requested_by"`
	Reason      string    `json:"reason,omitempty"`
	At          time.Time `json:"at"`
	Events      int       `json:"events"`
	Blobs       int       `json:"blobs"`
}

// EraseResult is the answer of POST /v1/erasures.
type EraseResult struct {
	Erasures []Erasure `json:"erasures"`
	// BlobsRemoved payloads had their keys destroyed (Bytes in all);
	// BlobsShared were kept because runs not erased hold the same content.
	BlobsRemoved int   `json:"blobs_removed"`
	Bytes        int64 `json:"bytes"`
	BlobsShared  int   `json:"blobs_shared"`
}
