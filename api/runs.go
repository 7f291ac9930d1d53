package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

func toRun(r *store.Run) Run {
	out := Run{ID: r.ID, Tenant: r.Tenant, User: r.User, Agent: r.Agent, AgentVersion: r.AgentVersion, Mode: r.Mode,
		Status: r.Status, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, LastEventID: r.LastSeq, ParentRunID: r.ParentRunID, Bindings: r.Bindings,
		Usage: Usage{Steps: r.Steps, InputTokens: r.InputTokens, OutputTokens: r.OutputTokens, CostMicros: r.CostMicros,
			Currency: r.Currency, CostKnown: !r.CostUnknown}}
	if store.Terminal(r.Status) {
		out.Output = r.Result
	}
	if r.Status == store.StatusWaiting && !r.WakeAt.IsZero() {
		w := r.WakeAt
		out.WakeAt = &w
	}
	return out
}

// agentRef turns agent + version into the registry's reference.
func agentRef(c *CreateRunRequest) (string, error) {
	if c.Agent == "" || strings.Contains(c.Agent, "@") {
		return "", badRequest("agent must be an agent name (put the version or alias in version)")
	}
	if len(c.Version) == 0 || string(c.Version) == "null" {
		return c.Agent, nil
	}
	var n int
	if err := json.Unmarshal(c.Version, &n); err == nil {
		return c.Agent + "@" + strconv.Itoa(n), nil
	}
	var alias string
	if err := json.Unmarshal(c.Version, &alias); err == nil && alias != "" {
		return c.Agent + "@" + alias, nil
	}
	return "", badRequest("version must be a version number or an alias name")
}

func taskOf(c *CreateRunRequest) (string, error) {
	if strings.TrimSpace(c.Input) == "" {
		return "", badRequest("input is required")
	}
	if len(c.Context) == 0 {
		return c.Input, nil
	}
	b, err := json.Marshal(c.Context)
	if err != nil {
		return "", badRequest("context: %v", err)
	}
	canon, err := jsoncanon.Canonicalize(b)
	if err != nil {
		return "", badRequest("context: %v", err)
	}
	return c.Input + "\n\nContext: " + string(canon), nil
}

// maxIdempotencyKey bounds the Idempotency-Key header.
const maxIdempotencyKey = 255

func handleCreateRun(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	body, err := readBody(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var req CreateRunRequest
	if err := decodeJSON(body, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if req.Mode == "" {
		req.Mode = "async"
	}
	if req.Mode != "stream" && req.Mode != "async" {
		s.fail(w, r, badRequest("mode must be stream or async"))
		return
	}
	ref, err := agentRef(&req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	task, err := taskOf(&req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.agentVisible(r.Context(), p, req.Agent); err != nil {
		s.fail(w, r, err)
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		s.fail(w, r, badRequest("Idempotency-Key must be at most %d printable ASCII characters", maxIdempotencyKey))
		return
	}
	run, replayed, err := s.createRun(r.Context(), p, key, body, runs.StartRequest{Agent: ref, Task: task,
		Tenant: p.Tenant, User: p.User, Mode: req.Mode, Bindings: req.Bindings, Admin: p.Has(ScopeAdmin)})
	if err != nil {
		s.fail(w, r, err)
		return
	}
	hdr := http.Header{}
	hdr.Set("Location", "/v1/runs/"+run.ID)
	if replayed {
		hdr.Set("Idempotent-Replayed", "true")
	}
	if run.Mode == "stream" {
		after, err := lastEventID(r)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		hdr.Set("X-Run-Id", run.ID)
		s.stream(w, r, run.ID, after, http.StatusOK, hdr)
		return
	}
	for k, v := range hdr {
		w.Header()[k] = v
	}
	writeJSON(w, http.StatusAccepted, toRun(run))
}

// createRun admits and creates a run, or finds the run an earlier request
// with the same idempotency key created. The key is reserved (bound to the
// request's hash and a fresh run id) before the run is created, so a crash
// in between leaves a key whose retry creates the run under that same id.
func (s *Server) createRun(ctx context.Context, p *Principal, key string, body []byte, sr runs.StartRequest) (*store.Run, bool, error) {
	sr.ID = runs.NewRunID()
	var reserved *store.Idempotency
	if key != "" {
		hash, err := requestHash(body)
		if err != nil {
			return nil, false, err
		}
		rec, created, err := s.st.ReserveIdempotencyKey(ctx, &store.Idempotency{Tenant: p.Tenant, Key: key,
			RequestHash: hash, RunID: sr.ID, CreatedAt: s.clock().UTC()})
		if err != nil {
			return nil, false, err
		}
		if !created {
			if rec.RequestHash != hash {
				return nil, false, &httpError{http.StatusUnprocessableEntity, "idempotency_key_reused",
					"this Idempotency-Key was used with a different request body"}
			}
			run, err := s.st.GetRun(ctx, rec.RunID)
			if err == nil {
				return run, true, nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return nil, false, err
			}
			sr.ID = rec.RunID // reserved but never created: create it now
		} else {
			reserved = rec
		}
	}
	release := func() {
		s.forget(ctx, sr.ID)
		if reserved != nil {
			if err := s.st.DeleteIdempotencyKey(context.WithoutCancel(ctx), reserved.Tenant, reserved.Key, reserved.RunID); err != nil {
				s.log.Warn("release idempotency key", "err", err)
			}
		}
	}
	if err := s.admit(ctx, p.Tenant, sr.ID); err != nil {
		release()
		return nil, false, err
	}
	run, err := s.p.Runs.Start(ctx, sr)
	if err != nil && key != "" && errors.Is(err, store.ErrConflict) {
		// Another process read the same reservation and created its run
		// first: that run is this request's answer, and the key stays bound.
		if run, gerr := s.st.GetRun(ctx, sr.ID); gerr == nil {
			return run, true, nil
		}
	}
	if err != nil {
		release()
		var ua *agent.UnknownAliasError
		if errors.As(err, &ua) {
			return nil, false, &httpError{http.StatusNotFound, "alias_not_found", ua.Error()}
		}
		if ve := versionError(err); ve != nil {
			return nil, false, ve
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil, false, notFound("agent")
		}
		if errors.Is(err, store.ErrConflict) || errors.Is(err, runs.ErrDirectory) {
			return nil, false, err // 409; a platform failure is a 500 without details
		}
		return nil, false, &httpError{http.StatusUnprocessableEntity, "invalid_run", err.Error()}
	}
	return run, false, nil
}

// requestHash is the sha256 of the request body's canonical JSON, so that
// a retry that only reorders keys or spaces is the same request.
func requestHash(body []byte) ([32]byte, error) {
	c, err := jsoncanon.Canonicalize(body)
	if err != nil {
		return [32]byte{}, badRequest("the body is not valid JSON: %v", err)
	}
	return sha256.Sum256(c), nil
}

func readBody(r *http.Request) ([]byte, error) {
	var raw json.RawMessage
	if err := decodeBody(r, &raw); err != nil {
		return nil, err
	}
	return raw, nil
}

// runOf returns the caller's run; another tenant's run is not found.
func (s *Server) runOf(ctx context.Context, p *Principal, id string) (*store.Run, error) {
	run, err := s.st.GetRun(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && run.Tenant != p.Tenant) {
		return nil, notFound("run")
	}
	return run, err
}

func handleGetRun(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	run, err := s.runOf(r.Context(), p, params["run_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	pol, err := s.renderPolicy(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	evs, err := s.st.Events(r.Context(), run.ID, 0, 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := toRun(run)
	out.OutputFlags = outputFlags(pol, evs)
	if safe {
		out.Output, _ = pol.Text(out.Output)
	}
	if run.Status == store.StatusWaiting {
		for _, a := range approvalsIn(run, evs) {
			if a.Status == "pending" {
				out.PendingApprovals = append(out.PendingApprovals, a)
			}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func handleListRuns(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, _ map[string]string) {
	q := r.URL.Query()
	limit, err := intParam(q.Get("limit"), 100, 1000)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ph := q.Get("prompt_hash")
	if _, ok := store.PromptHashHex(ph); ph != "" && !ok {
		s.fail(w, r, badRequest("prompt_hash must be a sha256 as a model call records it: sha256:HEX or HEX, 64 lower-case hex digits"))
		return
	}
	f := store.RunFilter{Tenant: p.Tenant, Agent: q.Get("agent"), Status: q.Get("status"), User: q.Get("user"), PromptHash: ph, Limit: limit}
	if v := q.Get("version"); v != "" {
		if f.AgentVersion, err = strconv.Atoi(v); err != nil || f.AgentVersion < 1 {
			s.fail(w, r, badRequest("version must be a version number"))
			return
		}
	}
	if v := q.Get("offset"); v != "" {
		if f.Offset, err = strconv.Atoi(v); err != nil || f.Offset < 0 || f.Offset > 10_000_000 {
			s.fail(w, r, badRequest("offset must be a number of runs to skip"))
			return
		}
	}
	switch q.Get("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		s.fail(w, r, badRequest("order must be oldest or newest"))
		return
	}
	rs, err := s.st.ListRuns(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var pol *render.Policy
	if safe {
		if pol, err = s.renderPolicy(r.Context(), p); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	out := RunList{Runs: make([]Run, 0, len(rs))}
	for _, run := range rs {
		x := toRun(run)
		if safe {
			x.Output, _ = pol.Text(x.Output)
		}
		out.Runs = append(out.Runs, x)
	}
	writeJSON(w, http.StatusOK, out)
}

func intParam(v string, def, max int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, badRequest("limit must be between 1 and %d", max)
	}
	return n, nil
}

// handleEvents answers with an SSE stream when the client accepts one, and
// with the same events as JSON otherwise.
func handleEvents(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	run, err := s.runOf(r.Context(), p, params["run_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	after, err := lastEventID(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		if safe {
			// The stream carries the stored events as they are written; a
			// client asking for safe text must not be handed raw text.
			s.fail(w, r, badRequest("render=safe is not available on the event stream; read the events as JSON"))
			return
		}
		switch {
		case after > 0 && after >= run.LastSeq && store.Terminal(run.Status):
			// The client has every event of a finished run: 204 tells a
			// standard EventSource to stop reconnecting.
			w.WriteHeader(http.StatusNoContent)
		case after > run.LastSeq:
			s.fail(w, r, badRequest("Last-Event-ID %d is past run %s's last event (%d): it names an event this run does not have", after, run.ID, run.LastSeq))
		default:
			s.stream(w, r, run.ID, after, http.StatusOK, nil)
		}
		return
	}
	limit, err := intParam(r.URL.Query().Get("limit"), 1000, 5000)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var pol *render.Policy
	if safe {
		if pol, err = s.renderPolicy(r.Context(), p); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	evs, err := s.st.Events(r.Context(), run.ID, after, limit)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := EventList{Events: make([]Event, 0, len(evs)), Status: run.Status}
	for i := range evs {
		ev := toEvent(&evs[i])
		if safe {
			ev = safeEvent(pol, ev)
		}
		out.Events = append(out.Events, ev)
	}
	if safe {
		out.Render = "safe"
	}
	writeJSON(w, http.StatusOK, out)
}

// handleBlob returns a blob the run's log refers to. Blobs are kept per
// tenant, and read here from the run's tenant only, so another tenant's
// content is out of reach whatever hash is asked for. Within the tenant a
// hash alone still proves nothing: only a blob the platform itself recorded
// in one of the caller's run's events (a Content field, trace.BlobRefs) is
// served. A hash that merely appears in the log — in the task, a message, a
// model's output, anything a caller or a model could write — names nothing.
// The decision is made from the caller's own log before the blob store is
// asked, so a hash that is not the run's gets the same answer, after the
// same work, whether or not anyone stored that content.
func handleBlob(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	run, err := s.runOf(r.Context(), p, params["run_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	h := params["sha256"]
	b, err := hex.DecodeString(h)
	if err != nil || len(b) != 32 {
		s.fail(w, r, badRequest("sha256 must be 64 hex digits"))
		return
	}
	var sum [32]byte
	copy(sum[:], b)
	evs, err := s.st.Events(r.Context(), run.ID, 0, 0)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	referenced := false
	for i := range evs {
		refs, _ := trace.BlobRefs(&evs[i]) // an undecodable payload names no blob
		for _, c := range refs {
			if got, err := c.Sum(); err == nil && got == sum {
				referenced = true
			}
		}
	}
	if !referenced {
		s.fail(w, r, notFound("blob"))
		return
	}
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	data, err := s.st.Blobs(run.Tenant).GetBlob(r.Context(), sum)
	if errors.Is(err, store.ErrNotFound) {
		err = notFound("blob") // the run's own blob, lost: the same answer
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if safe {
		// For display (the run viewer): the text neutralised under the
		// tenant's link domains, every string of it when it is JSON.
		pol, err := s.renderPolicy(r.Context(), p)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if json.Valid(data) {
			data, _ = pol.JSON(data)
		} else {
			var t string
			t, _ = pol.Text(strings.ToValidUTF8(string(data), "\uFFFD"))
			data = []byte(t)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(data)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(data)
}

func handleMessage(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req MessageRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	if strings.TrimSpace(req.Text) == "" || len(req.Text) > 64<<10 {
		s.fail(w, r, badRequest("text is required, at most 64 KiB"))
		return
	}
	s.signal(w, r, p, params["run_id"], trace.SignalMessage, func(ctx context.Context, run *store.Run) (*store.Run, error) {
		return s.p.Runs.Message(ctx, runs.MessageRequest{RunID: run.ID, Tenant: p.Tenant, Text: req.Text})
	})
}

func handleCancel(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req CancelRequest
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	s.signal(w, r, p, params["run_id"], trace.SignalCancel, func(ctx context.Context, run *store.Run) (*store.Run, error) {
		return s.p.Runs.Cancel(ctx, runs.CancelRequest{RunID: run.ID, Tenant: p.Tenant, By: p.User, Reason: req.Reason})
	})
}

// signal finds the caller's run and sends it kind through send (a use
// case of package runs); a run that has ended is a 409.
func (s *Server) signal(w http.ResponseWriter, r *http.Request, p *Principal, runID, kind string,
	send func(context.Context, *store.Run) (*store.Run, error)) {
	run, err := s.runOf(r.Context(), p, runID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	run, err = send(r.Context(), run)
	if errors.Is(err, runs.ErrRunEnded) {
		err = conflict("%v", err)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, SignalAccepted{RunID: run.ID, Kind: kind, Status: run.Status})
}

func handleReplay(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req ReplayRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	orig, err := s.runOf(r.Context(), p, params["run_id"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ref := ""
	if len(req.Version) > 0 {
		c := CreateRunRequest{Agent: orig.Agent, Version: req.Version}
		if ref, err = agentRef(&c); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	id := runs.NewRunID()
	if err := s.admit(r.Context(), p.Tenant, id); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.p.Runs.Replay(r.Context(), runs.ReplayRequest{ID: id, Of: orig.ID, FromStep: req.FromStep, Agent: ref,
		ModelAlias: req.ModelAlias, Instructions: req.Instructions, Mode: req.Mode, Mocks: req.Mocks, Tenant: p.Tenant, Admin: p.Has(ScopeAdmin)})
	if err != nil {
		s.forget(r.Context(), id)
		if ve := versionError(err); ve != nil {
			s.fail(w, r, ve)
			return
		}
		if errors.Is(err, store.ErrNotFound) {
			s.fail(w, r, notFound("run"))
			return
		}
		s.fail(w, r, &httpError{http.StatusUnprocessableEntity, "invalid_replay", err.Error()})
		return
	}
	w.Header().Set("Location", "/v1/runs/"+run.ID)
	writeJSON(w, http.StatusAccepted, toRun(run))
}

// errAgentNotFound keeps another tenant's agents invisible.
var errAgentNotFound = notFound("agent")

// agentVisible checks that the caller may use agent: one its tenant owns,
// or a platform agent (applied by the operator, owned by no tenant).
func (s *Server) agentVisible(ctx context.Context, p *Principal, agent string) error {
	owner, err := s.st.AgentOwner(ctx, agent)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	case owner != p.Tenant:
		return errAgentNotFound
	}
	return nil
}
