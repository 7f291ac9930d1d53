package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/store"
)

// A tenant's MCP connectors (package mcphost): any caller with agents:read
// lists and shows them; adding, diffing (which contacts the server),
// reviewing and removing need tenant:admin. The reviewer is the caller.
// A caller with runs:write connects their own account to an oauth
// connector (oauth:start, then the callback with the authorization
// server's answer, as the same caller: the state is bound to them).
// Text a server wrote (descriptions, titles) is returned as data, never
// rendered: it is untrusted.

// ConnectorSpec is a connector's definition.
type ConnectorSpec struct {
	Name      string          `json:"name"`
	Transport string          `json:"transport"`
	Endpoint  string          `json:"endpoint,omitempty"`
	Command   []string        `json:"command,omitempty"`
	Image     string          `json:"image,omitempty"`
	Auth      string          `json:"auth,omitempty"`
	Allow     []string        `json:"allow,omitempty"`
	OAuth     *ConnectorOAuth `json:"oauth,omitempty"`
}

// ConnectorOAuth is how agentplane is a client of an oauth connector's
// authorization server.
type ConnectorOAuth struct {
	ClientID string   `json:"client_id"`
	Scopes   []string `json:"scopes,omitempty"`
	Issuer   string   `json:"issuer,omitempty"`
}

// OAuthStart is the body of POST /v1/connectors/{connector}/oauth:start.
type OAuthStart struct {
	// RedirectURI is where the authorization server sends the user's
	// browser back: https, or http on loopback (a CLI's listener).
	RedirectURI string `json:"redirect_uri"`
}

// OAuthStarted is its answer.
type OAuthStarted struct {
	AuthorizationURL string `json:"authorization_url"`
}

// OAuthConnected is the answer of GET /v1/connectors/{connector}/oauth/callback.
type OAuthConnected struct {
	Connector string `json:"connector"`
	User      string `json:"user"`
	Connected bool   `json:"connected"`
}

// ConnectorAdd is the body of POST /v1/connectors.
type ConnectorAdd struct {
	Connector ConnectorSpec `json:"connector"`
	// Overlays is the tools' manifest overlay file (YAML documents).
	Overlays string `json:"overlays"`
}

// Connector is a connector as the API shows it.
type Connector struct {
	Connector    ConnectorSpec   `json:"connector"`
	SnapshotHash string          `json:"snapshot_hash,omitempty"`
	ReviewedBy   string          `json:"reviewed_by,omitempty"`
	ReviewedAt   *time.Time      `json:"reviewed_at,omitempty"`
	Tools        []ConnectorTool `json:"tools"`
}

// ConnectorTool is one approved tool of a connector.
type ConnectorTool struct {
	Name        string `json:"name"`
	ServerName  string `json:"server_name"`
	Description string `json:"description"`
	Tier        int    `json:"tier"`
	SideEffects string `json:"side_effects"`
	Approval    string `json:"approval"`
}

// ConnectorList is the answer of GET /v1/connectors.
type ConnectorList struct {
	Connectors []Connector `json:"connectors"`
}

// ConnectorToolDef is a tool as a server lists it (untrusted text).
type ConnectorToolDef struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// ConnectorChange is one difference between the reviewed and the live tools.
type ConnectorChange struct {
	Tool     string            `json:"tool"`
	Kind     string            `json:"kind"`
	Fields   []string          `json:"fields,omitempty"`
	Reviewed *ConnectorToolDef `json:"reviewed,omitempty"`
	Live     *ConnectorToolDef `json:"live,omitempty"`
}

// ConnectorDiff is the answer of GET /v1/connectors/{connector}/diff.
type ConnectorDiff struct {
	LiveHash string            `json:"live_hash"`
	Changes  []ConnectorChange `json:"changes"`
}

// ConnectorReview is the body of POST /v1/connectors/{connector}:review.
type ConnectorReview struct {
	// ExpectHash is the live hash the reviewer saw (from the diff).
	ExpectHash string `json:"expect_hash"`
	// Overlays, when set, replace the stored overlay file.
	Overlays string `json:"overlays,omitempty"`
}

func toConnector(v *platform.ConnectorView) Connector {
	s := v.Spec
	out := Connector{Connector: ConnectorSpec{Name: s.Name, Transport: s.Transport, Endpoint: s.Endpoint, Command: s.Command, Image: s.Image, Auth: s.Auth, Allow: s.Allow},
		SnapshotHash: v.Record.SnapshotHash, ReviewedBy: v.Record.ReviewedBy, Tools: []ConnectorTool{}}
	if o := s.OAuth; o != nil {
		out.Connector.OAuth = &ConnectorOAuth{ClientID: o.ClientID, Scopes: o.Scopes, Issuer: o.Issuer}
	}
	if !v.Record.ReviewedAt.IsZero() {
		at := v.Record.ReviewedAt
		out.ReviewedAt = &at
	}
	for _, m := range v.Tools {
		out.Tools = append(out.Tools, ConnectorTool{Name: m.Name, ServerName: m.MCP.Tool, Description: m.Description, Tier: m.Tier, SideEffects: m.SideEffects, Approval: m.Approval})
	}
	return out
}

func toToolDef(t *mcphost.ToolDef) *ConnectorToolDef {
	if t == nil {
		return nil
	}
	return &ConnectorToolDef{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema}
}

// connectorError maps the platform's refusals to answers.
func connectorError(err error) error {
	var he *httpError
	switch {
	case errors.As(err, &he), errors.Is(err, store.ErrNotFound), errors.Is(err, store.ErrConflict):
		return err
	case errors.Is(err, platform.ErrConnectorReview):
		return &httpError{http.StatusUnprocessableEntity, "review_refused", err.Error()}
	}
	return &httpError{http.StatusBadGateway, "connector_unreachable", "the connector's server could not be listed: " + err.Error()}
}

func handleListConnectors(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	vs, err := s.p.ListConnectors(r.Context(), p.Tenant)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := ConnectorList{Connectors: []Connector{}}
	for _, v := range vs {
		out.Connectors = append(out.Connectors, toConnector(v))
	}
	writeJSON(w, http.StatusOK, out)
}

func handleAddConnector(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	var req ConnectorAdd
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	spec, _ := json.Marshal(req.Connector)
	sp, err := s.p.AddConnector(r.Context(), p.Tenant, spec, []byte(req.Overlays))
	if errors.Is(err, store.ErrConflict) {
		s.fail(w, r, &httpError{http.StatusConflict, "conflict", "another tenant holds this connector name"})
		return
	}
	if err != nil {
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "invalid_connector", err.Error()})
		return
	}
	v, err := s.p.GetConnector(r.Context(), p.Tenant, sp.Name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, toConnector(v))
}

func handleGetConnector(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	v, err := s.p.GetConnector(r.Context(), p.Tenant, params["connector"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toConnector(v))
}

func handleDiffConnector(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	changes, live, err := s.p.DiffConnector(r.Context(), p.Tenant, params["connector"], p.User)
	if err != nil {
		s.fail(w, r, connectorError(err))
		return
	}
	out := ConnectorDiff{LiveHash: live.Hash(), Changes: []ConnectorChange{}}
	for _, c := range changes {
		out.Changes = append(out.Changes, ConnectorChange{Tool: c.Tool, Kind: c.Kind, Fields: c.Fields, Reviewed: toToolDef(c.Reviewed), Live: toToolDef(c.Live)})
	}
	writeJSON(w, http.StatusOK, out)
}

func handleReviewConnector(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req ConnectorReview
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.ExpectHash == "" {
		s.fail(w, r, badRequest("expect_hash is required: the live_hash of the diff the reviewer read"))
		return
	}
	var ov []byte
	if req.Overlays != "" {
		ov = []byte(req.Overlays)
	}
	v, err := s.p.ReviewConnector(r.Context(), platform.ReviewRequest{Tenant: p.Tenant, Name: params["connector"], Reviewer: p.User, Overlays: ov, ExpectHash: req.ExpectHash})
	if err != nil {
		s.fail(w, r, connectorError(err))
		return
	}
	writeJSON(w, http.StatusOK, toConnector(v))
}

func handleDeleteConnector(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	if err := s.p.RemoveConnector(r.Context(), p.Tenant, params["connector"]); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func handleStartOAuth(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req OAuthStart
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	u, err := s.p.ConnectAccount(r.Context(), p.Tenant, p.User, params["connector"], req.RedirectURI)
	if err != nil {
		s.fail(w, r, oauthError(err))
		return
	}
	writeJSON(w, http.StatusOK, OAuthStarted{AuthorizationURL: u})
}

func handleOAuthCallback(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	q := r.URL.Query()
	cb := mcphost.Callback{State: q.Get("state"), Code: q.Get("code"), Iss: q.Get("iss"), Error: q.Get("error")}
	if err := s.p.FinishConnect(r.Context(), p.Tenant, p.User, params["connector"], cb); err != nil {
		s.fail(w, r, oauthError(err))
		return
	}
	writeJSON(w, http.StatusOK, OAuthConnected{Connector: params["connector"], User: p.User, Connected: true})
}

// oauthError maps a failed connection: a refused flow is the caller's to
// start again (422); a server that cannot be reached is 502.
func oauthError(err error) error {
	var he *httpError
	switch {
	case errors.As(err, &he), errors.Is(err, store.ErrNotFound):
		return err
	case errors.Is(err, mcphost.ErrFlowRefused):
		return &httpError{http.StatusUnprocessableEntity, "oauth_refused", err.Error()}
	}
	return &httpError{http.StatusBadGateway, "connector_unreachable", "the connector's authorization could not be discovered or completed: " + err.Error()}
}
