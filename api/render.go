package api

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
)

// Reads of runs and events take ?render=safe: model text is then
// neutralised for display under the tenant's link domains (package
// render): images replaced by a marker naming their domain, links off the
// list made inert, raw HTML removed, bidi and invisible characters made
// visible. The default (raw) is the stored bytes, which are the audit
// record and what trace verification needs; a safe event keeps the hash
// of the stored payload, not of what it shows.

// renderSafe reads the render parameter.
func renderSafe(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("render") {
	case "", "raw":
		return false, nil
	case "safe":
		return true, nil
	}
	return false, badRequest("render must be raw or safe")
}

// renderPolicy is the caller's tenant's policy.
func (s *Server) renderPolicy(ctx context.Context, p *Principal) (*render.Policy, error) {
	return s.p.RenderPolicy(ctx, p.Tenant)
}

// outputFlags names what rendering the run's model text neutralises.
func outputFlags(pol *render.Policy, evs []store.Event) []string {
	names := platform.OutputFlags(pol, evs).Names()
	if len(names) == 0 {
		return nil
	}
	return names
}

// safeEvent neutralises an event's payload for display.
func safeEvent(pol *render.Policy, ev Event) Event {
	out, _ := pol.JSON(ev.Payload)
	ev.Payload = json.RawMessage(out)
	return ev
}
