package api

import (
	"errors"
	"net/http"

	"github.com/agentplane/agentplane/retention"
)

// handleErase erases a run, or everything about one user, of the caller's
// tenant (docs/design/retention.md). The erasure is recorded as requested
// by the caller.
func handleErase(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	var req EraseRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	rep, err := retention.Erase(r.Context(), s.p.Store, retention.EraseRequest{Tenant: p.Tenant, RunID: req.RunID, User: req.User,
		RequestedBy: p.User, Reason: req.Reason}, s.clock())
	if errors.Is(err, retention.ErrBadRequest) {
		s.fail(w, r, badRequest("give exactly one of run_id and user"))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := EraseResult{Erasures: []Erasure{}, BlobsRemoved: rep.BlobsRemoved, Bytes: rep.Bytes, BlobsShared: rep.BlobsShared}
	for _, e := range rep.Erasures {
		out.Erasures = append(out.Erasures, Erasure{ID: e.ID, RunID: e.RunID, User: e.User, RequestedBy: e.RequestedBy,
			Reason: e.Reason, At: e.At, Events: e.Events, Blobs: e.Blobs})
	}
	writeJSON(w, http.StatusOK, out)
}
