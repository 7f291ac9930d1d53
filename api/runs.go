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
	run, replayed, err := s.startRun(r.Context(), p, &req, r.Header.Get("Idempotency-Key"), body)
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

// StartRun starts a run as p, as POST /v1/runs does (the agent must be
// visible to the tenant, quotas admit it, an idempotency key returns the
// run it created before), and returns it and whether the key had created
// it already. The run is async unless req.Mode says stream, whose events
// the caller reads itself.
func (s *Server) StartRun(ctx context.Context, p *Principal, req CreateRunRequest, idempotencyKey string) (Run, bool, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Run{}, false, badRequest("the request is not JSON: %v", err)
	}
	run, replayed, err := s.startRun(ctx, p, &req, idempotencyKey, body)
	if err != nil {
		return Run{}, false, err
	}
	return toRun(run), replayed, nil
}

// startRun checks a create request and creates its run; body is the
// request as sent, which an idempotency key is bound to.
func (s *Server) startRun(ctx context.Context, p *Principal, req *CreateRunRequest, key string, body []byte) (*store.Run, bool, error) {
	if req.Mode == "" {
		req.Mode = "async"
	}
	if req.Mode != "stream" && req.Mode != "async" {
		return nil, false, badRequest("mode must be stream or async")
	}
	ref, err := agentRef(req)
	if err != nil {
		return nil, false, err
	}
	task, err := taskOf(req)
	if err != nil {
		return nil, false, err
	}
	if err := s.agentVisible(ctx, p, req.Agent); err != nil {
		return nil, false, err
	}
	if len(key) > maxIdempotencyKey || strings.ContainsFunc(key, func(c rune) bool { return c < 0x21 || c > 0x7e }) {
		return nil, false, badRequest("Idempotency-Key must be at most %d printable ASCII characters", maxIdempotencyKey)
	}
	return s.createRun(ctx, p, key, body, runs.StartRequest{Agent: ref, Task: task,
		Tenant: p.Tenant, User: p.User, Mode: req.Mode, Bindings: req.Bindings, Admin: p.Has(ScopeAdmin)})
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
	safe, err := renderSafe(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.GetRun(r.Context(), p, params["run_id"], safe)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// GetRun reads one of p's tenant's runs as GET /v1/runs/{run_id} answers
// it: status, usage, output (neutralised when safe), output flags and the
// pending approvals. Another tenant's run is not found.
func (s *Server) GetRun(ctx context.Context, p *Principal, id string, safe bool) (Run, error) {
	run, err := s.runOf(ctx, p, id)
	if err != nil {
		return Run{}, err
	}
	pol, err := s.renderPolicy(ctx, p)
	if err != nil {
		return Run{}, err
	}
	evs, err := s.st.Events(ctx, run.ID, 0, 0)
	if err != nil {
		return Run{}, err
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
	return out, nil
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
	limit, err := intParam(r.URL.Query().Get("limit"), 1000, MaxEventsPage)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out, err := s.RunEvents(r.Context(), p, run.ID, after, limit, safe)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// MaxEventsPage bounds the events one read returns.
const MaxEventsPage = 5000

// RunEvents reads the events of p's tenant's run after the sequence number
// after, at most limit of them (1 to MaxEventsPage), as GET
// /v1/runs/{run_id}/events answers them as JSON; safe neutralises every
// string of their payloads for display.
func (s *Server) RunEvents(ctx context.Context, p *Principal, id string, after int64, limit int, safe bool) (EventList, error) {
	if after < 0 {
		return EventList{}, badRequest("after must be a non-negative event sequence number")
	}
	if limit < 1 || limit > MaxEventsPage {
		return EventList{}, badRequest("limit must be between 1 and %d", MaxEventsPage)
	}
	run, err := s.runOf(ctx, p, id)
	if err != nil {
		return EventList{}, err
	}
	var pol *render.Policy
	if safe {
		if pol, err = s.renderPolicy(ctx, p); err != nil {
			return EventList{}, err
		}
	}
	evs, err := s.st.Events(ctx, run.ID, after, limit)
	if err != nil {
		return EventList{}, err
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
	return out, nil
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
	out, err := s.Message(r.Context(), p, params["run_id"], req.Text)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

func handleCancel(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req CancelRequest
	if r.ContentLength != 0 {
		if err := decodeBody(r, &req); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	out, err := s.Cancel(r.Context(), p, params["run_id"], req.Reason)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, out)
}

// Message adds text from p's user to p's tenant's run id, read at its next
// step, as POST /v1/runs/{run_id}/messages does; a run that has ended is a
// conflict.
func (s *Server) Message(ctx context.Context, p *Principal, id, text string) (SignalAccepted, error) {
	if strings.TrimSpace(text) == "" || len(text) > 64<<10 {
		return SignalAccepted{}, badRequest("text is required, at most 64 KiB")
	}
	return s.signal(ctx, p, id, trace.SignalMessage, func(ctx context.Context, run *store.Run) (*store.Run, error) {
		return s.p.Runs.Message(ctx, runs.MessageRequest{RunID: run.ID, Tenant: p.Tenant, Text: text})
	})
}

// Cancel asks p's tenant's run id to stop at its next step boundary, as
// POST /v1/runs/{run_id}:cancel does; a run that has ended is a conflict.
func (s *Server) Cancel(ctx context.Context, p *Principal, id, reason string) (SignalAccepted, error) {
	if len(reason) > 4096 {
		return SignalAccepted{}, badRequest("reason is longer than 4096 bytes")
	}
	return s.signal(ctx, p, id, trace.SignalCancel, func(ctx context.Context, run *store.Run) (*store.Run, error) {
		return s.p.Runs.Cancel(ctx, runs.CancelRequest{RunID: run.ID, Tenant: p.Tenant, By: p.User, Reason: reason})
	})
}

// signal finds the caller's run and sends it kind through send (a use
// case of package runs); a run that has ended is a 409.
func (s *Server) signal(ctx context.Context, p *Principal, runID, kind string,
	send func(context.Context, *store.Run) (*store.Run, error)) (SignalAccepted, error) {
	run, err := s.runOf(ctx, p, runID)
	if err != nil {
		return SignalAccepted{}, err
	}
	run, err = send(ctx, run)
	if errors.Is(err, runs.ErrRunEnded) {
		err = conflict("%v", err)
	}
	if err != nil {
		return SignalAccepted{}, err
	}
	return SignalAccepted{RunID: run.ID, Kind: kind, Status: run.Status}, nil
}

func handleReplay(s *Server, w http.ResponseWriter, r *http.Request, p *Principal, params map[string]string) {
	var req ReplayRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, r, err)
		return
	}
	run, err := s.Replay(r.Context(), p, params["run_id"], req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/runs/"+run.ID)
	writeJSON(w, http.StatusAccepted, run)
}

// Replay starts an execution replay of p's tenant's ended run id, as POST
// /v1/runs/{run_id}:replay does (quotas admit it; runs.Service.Replay
// checks the rest) and returns the new run.
func (s *Server) Replay(ctx context.Context, p *Principal, id string, req ReplayRequest) (Run, error) {
	orig, err := s.runOf(ctx, p, id)
	if err != nil {
		return Run{}, err
	}
	ref := ""
	if len(req.Version) > 0 {
		c := CreateRunRequest{Agent: orig.Agent, Version: req.Version}
		if ref, err = agentRef(&c); err != nil {
			return Run{}, err
		}
	}
	newID := runs.NewRunID()
	if err := s.admit(ctx, p.Tenant, newID); err != nil {
		return Run{}, err
	}
	run, err := s.p.Runs.Replay(ctx, runs.ReplayRequest{ID: newID, Of: orig.ID, FromStep: req.FromStep, Agent: ref,
		ModelAlias: req.ModelAlias, Instructions: req.Instructions, Mode: req.Mode, Mocks: req.Mocks, Tenant: p.Tenant, Admin: p.Has(ScopeAdmin)})
	if err != nil {
		s.forget(ctx, newID)
		if ve := versionError(err); ve != nil {
			return Run{}, ve
		}
		if errors.Is(err, store.ErrNotFound) {
			return Run{}, notFound("run")
		}
		return Run{}, &httpError{http.StatusUnprocessableEntity, "invalid_replay", err.Error()}
	}
	return toRun(run), nil
}

// VerifyRun checks p's tenant's run id as agentplane trace verify does:
// the hash chain, every blob its log names (hashed as read, from the
// tenant's blobs) and every prompt rebuilt from the log against its
// recorded hash. A queued run with no events has nothing to verify: its
// report counts no events and holds no problems.
func (s *Server) VerifyRun(ctx context.Context, p *Principal, id string) (*trace.Report, error) {
	run, err := s.runOf(ctx, p, id)
	if err != nil {
		return nil, err
	}
	src := trace.SourceFor(s.st, run.Tenant)
	if run.Status == store.StatusQueued {
		if evs, err := src.Events(ctx, run.ID, 0, 1); err == nil && len(evs) == 0 {
			return &trace.Report{}, nil
		}
	}
	return trace.Verify(ctx, src, run.ID)
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
