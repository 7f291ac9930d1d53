package api

import (
	_ "embed"
	"net/http"
	"time"
)

// Routes returns the API's route table.
func Routes() []Route {
	return []Route{
		{Method: "GET", Pattern: "/v1/openapi.json", Operation: "getOpenAPI", handle: handleOpenAPI},

		{Method: "POST", Pattern: "/v1/session", Operation: "createSession", Scope: ScopeRunsRead, handle: handleCreateSession},
		{Method: "GET", Pattern: "/v1/session", Operation: "getSession", Scope: ScopeRunsRead, handle: handleGetSession},
		{Method: "DELETE", Pattern: "/v1/session", Operation: "deleteSession", Scope: ScopeRunsRead, handle: handleDeleteSession},

		{Method: "POST", Pattern: "/v1/runs", Operation: "createRun", Scope: ScopeRunsWrite, handle: handleCreateRun},
		{Method: "GET", Pattern: "/v1/runs", Operation: "listRuns", Scope: ScopeRunsRead, handle: handleListRuns},
		{Method: "GET", Pattern: "/v1/runs/{run_id}", Operation: "getRun", Scope: ScopeRunsRead, handle: handleGetRun},
		{Method: "GET", Pattern: "/v1/runs/{run_id}/events", Operation: "listRunEvents", Scope: ScopeRunsRead, handle: handleEvents},
		{Method: "GET", Pattern: "/v1/runs/{run_id}/blobs/{sha256}", Operation: "getRunBlob", Scope: ScopeRunsRead, handle: handleBlob},
		{Method: "GET", Pattern: "/v1/runs/{run_id}/prompt", Operation: "getRunPrompt", Scope: ScopeRunsRead, handle: handlePrompt},
		{Method: "POST", Pattern: "/v1/runs/{run_id}/messages", Operation: "sendMessage", Scope: ScopeRunsWrite, handle: handleMessage},
		{Method: "POST", Pattern: "/v1/runs/{run_id}:cancel", Operation: "cancelRun", Scope: ScopeRunsWrite, handle: handleCancel},
		{Method: "POST", Pattern: "/v1/runs/{run_id}:replay", Operation: "replayRun", Scope: ScopeRunsWrite, handle: handleReplay},

		{Method: "GET", Pattern: "/v1/approvals", Operation: "listApprovals", Scope: ScopeRunsRead, handle: handleListApprovals},
		{Method: "GET", Pattern: "/v1/approvals/{approval_id}", Operation: "getApproval", Scope: ScopeRunsRead, handle: handleGetApproval},
		{Method: "POST", Pattern: "/v1/approvals/{approval_id}:decide", Operation: "decideApproval", Scope: ScopeApprovals, handle: handleDecide},

		{Method: "GET", Pattern: "/v1/agents", Operation: "listAgents", Scope: ScopeAgentsRead, handle: handleListAgents},
		{Method: "GET", Pattern: "/v1/agents/{agent}", Operation: "getAgent", Scope: ScopeAgentsRead, handle: handleGetAgent},
		{Method: "GET", Pattern: "/v1/agents/{agent}/metrics", Operation: "getAgentMetrics", Scope: ScopeRunsRead, handle: handleAgentMetrics},
		{Method: "POST", Pattern: "/v1/agents/{agent}/versions", Operation: "createAgentVersion", Scope: ScopeAgentsWrite, handle: handleCreateAgentVersion},
		{Method: "GET", Pattern: "/v1/agents/{agent}/versions/{version}", Operation: "getAgentVersion", Scope: ScopeAgentsRead, handle: handleGetAgentVersion},
		{Method: "POST", Pattern: "/v1/agents/{agent}/versions/{version}:retire", Operation: "retireAgentVersion", Scope: ScopeAgentsWrite, handle: handleRetireAgentVersion},
		{Method: "PUT", Pattern: "/v1/agents/{agent}/aliases/{alias}", Operation: "setAlias", Scope: ScopeAgentsWrite, handle: handleSetAlias},

		{Method: "GET", Pattern: "/v1/webhook", Operation: "getWebhook", Scope: ScopeWebhooks, handle: handleGetWebhook},
		{Method: "PUT", Pattern: "/v1/webhook", Operation: "putWebhook", Scope: ScopeWebhooks, handle: handlePutWebhook},
		{Method: "DELETE", Pattern: "/v1/webhook", Operation: "deleteWebhook", Scope: ScopeWebhooks, handle: handleDeleteWebhook},
		{Method: "GET", Pattern: "/v1/webhook/deliveries", Operation: "listDeliveries", Scope: ScopeWebhooks, handle: handleListDeliveries},
		{Method: "GET", Pattern: "/v1/webhook/deliveries/{delivery_id}", Operation: "getDelivery", Scope: ScopeWebhooks, handle: handleGetDelivery},

		{Method: "GET", Pattern: "/v1/connectors", Operation: "listConnectors", Scope: ScopeAgentsRead, handle: handleListConnectors},
		{Method: "POST", Pattern: "/v1/connectors", Operation: "addConnector", Scope: ScopeAdmin, handle: handleAddConnector},
		{Method: "GET", Pattern: "/v1/connectors/{connector}", Operation: "getConnector", Scope: ScopeAgentsRead, handle: handleGetConnector},
		{Method: "DELETE", Pattern: "/v1/connectors/{connector}", Operation: "deleteConnector", Scope: ScopeAdmin, handle: handleDeleteConnector},
		{Method: "GET", Pattern: "/v1/connectors/{connector}/diff", Operation: "diffConnector", Scope: ScopeAdmin, handle: handleDiffConnector},
		{Method: "POST", Pattern: "/v1/connectors/{connector}:review", Operation: "reviewConnector", Scope: ScopeAdmin, handle: handleReviewConnector},
		{Method: "POST", Pattern: "/v1/connectors/{connector}/oauth:start", Operation: "startConnectorOAuth", Scope: ScopeRunsWrite, handle: handleStartOAuth},
		{Method: "GET", Pattern: "/v1/connectors/{connector}/oauth/callback", Operation: "finishConnectorOAuth", Scope: ScopeRunsWrite, handle: handleOAuthCallback},

		{Method: "GET", Pattern: "/v1/tenant", Operation: "getTenant", Scope: ScopeRunsRead, handle: handleGetTenant},
		{Method: "PUT", Pattern: "/v1/tenant/settings", Operation: "putTenantSettings", Scope: ScopeAdmin, handle: handlePutTenantSettings},
		{Method: "POST", Pattern: "/v1/erasures", Operation: "eraseRuns", Scope: ScopeAdmin, handle: handleErase},
	}
}

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the API's OpenAPI 3.1 document.
func OpenAPI() []byte { return openAPIDoc }

func handleOpenAPI(s *Server, w http.ResponseWriter, r *http.Request, _ *Principal, _ map[string]string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDoc)
}

func handleGetTenant(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	tc := s.cfg.tenant(p.Tenant)
	now := s.clock().UTC()
	day := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	open, costs, err := s.st.Usage(r.Context(), p.Tenant, []time.Time{day, month})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ts, err := s.p.TenantSettings(r.Context(), p.Tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Tenant{Tenant: p.Tenant, User: p.User, Scopes: p.Scopes, Via: p.Via,
		Limits:   Limits{MaxConcurrentRuns: tc.MaxConcurrentRuns, DailyCost: tc.DailyCost, MonthlyCost: tc.MonthlyCost, Weight: tc.Weight},
		Usage:    TenantUsage{OpenRuns: open, DailyCost: costs[0], MonthlyCost: costs[1]},
		Settings: toTenantSettings(ts)})
}
