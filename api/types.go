package api

import "github.com/agentplane/agentplane/apiclient"

// The wire types are defined once, in apiclient (which has no dependencies
// beyond the standard library); the server uses them under these names.
type (
	Agent             = apiclient.Agent
	Alias             = apiclient.Alias
	Canary            = apiclient.Canary
	AgentVersion      = apiclient.AgentVersion
	AgentList         = apiclient.AgentList
	SetAliasRequest   = apiclient.SetAliasRequest
	Approval          = apiclient.Approval
	ApprovalList      = apiclient.ApprovalList
	DecideRequest     = apiclient.DecideRequest
	DecisionAccepted  = apiclient.DecisionAccepted
	Tenant            = apiclient.Tenant
	Limits            = apiclient.Limits
	TenantUsage       = apiclient.TenantUsage
	TenantSettings    = apiclient.TenantSettings
	EraseRequest      = apiclient.EraseRequest
	Erasure           = apiclient.Erasure
	EraseResult       = apiclient.EraseResult
	Run               = apiclient.Run
	Usage             = apiclient.Usage
	CreateRunRequest  = apiclient.CreateRunRequest
	RunList           = apiclient.RunList
	EventList         = apiclient.EventList
	MessageRequest    = apiclient.MessageRequest
	SignalAccepted    = apiclient.SignalAccepted
	CancelRequest     = apiclient.CancelRequest
	ReplayRequest     = apiclient.ReplayRequest
	Event             = apiclient.Event
	WebhookMessage    = apiclient.WebhookMessage
	WebhookData       = apiclient.WebhookData
	ErrorResponse     = apiclient.ErrorResponse
	ErrorBody         = apiclient.ErrorBody
	Webhook           = apiclient.Webhook
	PutWebhookRequest = apiclient.PutWebhookRequest
	Delivery          = apiclient.Delivery
	DeliveryAttempt   = apiclient.DeliveryAttempt
	DeliveryList      = apiclient.DeliveryList
)

// The run viewer's wire types (apiclient/viewer.go).
type (
	Session        = apiclient.Session
	Prompt         = apiclient.Prompt
	PromptMessage  = apiclient.PromptMessage
	PromptPart     = apiclient.PromptPart
	AgentMetrics   = apiclient.AgentMetrics
	VersionMetrics = apiclient.VersionMetrics
)
