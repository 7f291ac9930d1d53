package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/store"
)

// Agents created through the API belong to the tenant that created them
// (the first to use the name); other tenants are told they do not exist.
// Agents applied by the operator with the CLI belong to no tenant: every
// tenant may run them, and none may change them.

var errPlatformAgent = &httpError{http.StatusConflict, "platform_agent", "this agent is managed by the operator and cannot be changed through the API"}

// agentOwned checks that the caller's tenant owns agent (or may take the
// name, when claim is set and nobody has it): another tenant's agent is not
// found, and a platform agent is read-only.
func (s *Server) agentOwned(ctx context.Context, p *Principal, name string, claim bool) error {
	owner, err := s.st.AgentOwner(ctx, name)
	if err == nil {
		if owner != p.Tenant {
			return errAgentNotFound
		}
		return nil
	}
	if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	vs, err := s.st.ListAgentVersions(ctx, name)
	if err != nil {
		return err
	}
	if len(vs) > 0 {
		return errPlatformAgent
	}
	if !claim {
		return errAgentNotFound
	}
	owner, err = s.st.ClaimAgentName(ctx, name, p.Tenant, s.clock().UTC())
	if err != nil {
		return err
	}
	if owner != p.Tenant {
		return errAgentNotFound
	}
	return nil
}

func handleCreateAgentVersion(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	name := params["agent"]
	// A definition is YAML, of which JSON is a subset.
	if err := requireMediaType(r, "application/yaml", "application/x-yaml", "text/yaml", "application/json"); err != nil {
		s.fail(w, r, err)
		return
	}
	data, err := readBodyBytes(r, agent.MaxDefinitionBytes)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	d, err := agent.ParseDefinition(name+".yaml", data, nil)
	if err != nil {
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "invalid_definition", err.Error()})
		return
	}
	if d.Agent != name {
		s.fail(w, r, badRequest("the definition is agent %q, the path names %q", d.Agent, name))
		return
	}
	if err := s.agentOwned(r.Context(), p, name, true); err != nil {
		s.fail(w, r, err)
		return
	}
	created, err := s.p.Registry.Apply(r.Context(), d)
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			s.fail(w, r, conflict("%v", err))
			return
		}
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "invalid_definition", err.Error()})
		return
	}
	v, err := s.st.GetAgentVersion(r.Context(), name, d.Version)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/agents/"+name+"/versions/"+strconv.Itoa(d.Version))
	writeJSON(w, status, AgentVersion{Agent: name, Version: v.Version, SpecHash: hex.EncodeToString(v.SpecHash[:]),
		CreatedAt: v.CreatedAt, Created: created})
}

// visibleAgent describes agent if the caller may see it.
func (s *Server) visibleAgent(ctx context.Context, p *Principal, name string) (*Agent, error) {
	if err := s.agentVisible(ctx, p, name); err != nil {
		return nil, err
	}
	vs, err := s.st.ListAgentVersions(ctx, name)
	if err != nil {
		return nil, err
	}
	if len(vs) == 0 {
		return nil, errAgentNotFound
	}
	_, ownErr := s.st.AgentOwner(ctx, name)
	a := &Agent{Name: name, Platform: errors.Is(ownErr, store.ErrNotFound), Versions: []int{}, Retired: []int{}, Aliases: []Alias{}}
	for _, v := range vs {
		if v.Name == name {
			a.Versions = append(a.Versions, v.Version)
			if !v.RetiredAt.IsZero() {
				a.Retired = append(a.Retired, v.Version)
			}
		}
	}
	als, err := s.st.ListAliases(ctx, name)
	if err != nil {
		return nil, err
	}
	for _, al := range als {
		x := Alias{Alias: al.Alias, Version: al.Version, UpdatedAt: al.UpdatedAt}
		if al.CanaryPercent > 0 {
			x.Canary = &Canary{Version: al.CanaryVersion, Percent: al.CanaryPercent}
		}
		a.Aliases = append(a.Aliases, x)
	}
	return a, nil
}

func handleGetAgent(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	a, err := s.visibleAgent(r.Context(), p, params["agent"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func handleListAgents(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	all, err := s.p.Registry.List(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := AgentList{Agents: []Agent{}}
	for _, sm := range all {
		a, err := s.visibleAgent(r.Context(), p, sm.Name)
		if errors.Is(err, errAgentNotFound) {
			continue
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
		out.Agents = append(out.Agents, *a)
	}
	writeJSON(w, http.StatusOK, out)
}

func handleGetAgentVersion(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	name := params["agent"]
	if err := s.agentVisible(r.Context(), p, name); err != nil {
		s.fail(w, r, err)
		return
	}
	n, err := strconv.Atoi(params["version"])
	if err != nil || n < 1 {
		s.fail(w, r, notFound("agent version"))
		return
	}
	v, err := s.st.GetAgentVersion(r.Context(), name, n)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := toAgentVersion(v)
	out.Definition = json.RawMessage(v.Spec)
	writeJSON(w, http.StatusOK, out)
}

func handleSetAlias(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req SetAliasRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	name, alias := params["agent"], params["alias"]
	if err := s.agentOwned(r.Context(), p, name, false); err != nil {
		s.fail(w, r, err)
		return
	}
	cv, cp := 0, 0
	if req.Canary != nil {
		cv, cp = req.Canary.Version, req.Canary.Percent
	}
	if err := s.p.Registry.SetAlias(r.Context(), name, alias, req.Version, cv, cp); err != nil {
		if ve := versionError(err); ve != nil {
			s.fail(w, r, ve)
			return
		}
		if errors.Is(err, store.ErrNotFound) {
			s.fail(w, r, notFound("agent version"))
			return
		}
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "invalid_alias", err.Error()})
		return
	}
	a, err := s.st.GetAlias(r.Context(), name, alias)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := Alias{Alias: a.Alias, Version: a.Version, UpdatedAt: a.UpdatedAt}
	if a.CanaryPercent > 0 {
		out.Canary = &Canary{Version: a.CanaryVersion, Percent: a.CanaryPercent}
	}
	writeJSON(w, http.StatusOK, out)
}
