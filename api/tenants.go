package api

import (
	"net/http"

	"github.com/agentplane/agentplane/store"
)

// A tenant's settings (package store's TenantSettings) are its own: the
// domains model text may link to, and whether runs start only through
// aliases. Any caller of the tenant reads them (GET /v1/tenant); only its
// admins (tenant:admin) change them.

func toTenantSettings(ts store.TenantSettings) TenantSettings {
	out := TenantSettings{LinkDomains: ts.LinkDomains, RequireAlias: ts.RequireAlias}
	if out.LinkDomains == nil {
		out.LinkDomains = []string{}
	}
	if !ts.UpdatedAt.IsZero() {
		at := ts.UpdatedAt
		out.UpdatedAt = &at
	}
	return out
}

func handlePutTenantSettings(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	var req TenantSettings
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	ts, err := s.p.PutTenantSettings(r.Context(), store.TenantSettings{Tenant: p.Tenant, LinkDomains: req.LinkDomains,
		RequireAlias: req.RequireAlias, UpdatedAt: s.clock().UTC()})
	if err != nil {
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "invalid_settings", err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, toTenantSettings(ts))
}
