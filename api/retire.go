package api

import (
	"encoding/hex"
	"errors"
	"net/http"
	"strconv"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/store"
)

// Retiring a version closes the escape hatch of pinning an old version to
// run under its older policy: a retired version starts no new run by any
// reference, and no alias can be moved to it. Runs already pinned to it
// finish on it.

// versionError maps the registry's refusals of a reference to answers.
func versionError(err error) error {
	switch {
	case errors.Is(err, agent.ErrRetired):
		return &httpError{http.StatusConflict, "agent_version_retired", err.Error()}
	case errors.Is(err, agent.ErrAliasRequired):
		return &httpError{http.StatusForbidden, "alias_required", err.Error()}
	}
	return nil
}

func handleRetireAgentVersion(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	name := params["agent"]
	if err := s.agentOwned(r.Context(), p, name, false); err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := strconv.Atoi(params["version"])
	if err != nil || n < 1 {
		s.fail(w, r, notFound("agent version"))
		return
	}
	still, err := s.p.Registry.Retire(r.Context(), name, n)
	if errors.Is(err, store.ErrNotFound) {
		s.fail(w, r, notFound("agent version"))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v, err := s.st.GetAgentVersion(r.Context(), name, n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := toAgentVersion(v)
	out.StillAliased = still
	writeJSON(w, http.StatusOK, out)
}

func toAgentVersion(v *store.AgentVersion) AgentVersion {
	out := AgentVersion{Agent: v.Name, Version: v.Version, SpecHash: hex.EncodeToString(v.SpecHash[:]), CreatedAt: v.CreatedAt}
	if !v.RetiredAt.IsZero() {
		at := v.RetiredAt
		out.RetiredAt = &at
	}
	return out
}
