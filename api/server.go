// Package api is agentplane's HTTP run API: runs (idempotent creation,
// server-sent event streams that resume exactly with Last-Event-ID, async
// runs whose end is announced by webhooks signed with the Standard Webhooks
// scheme), messages, cancellation and approvals, agents and aliases, API
// keys and JWT principals, tenant isolation (another tenant's objects answer
// 404), admission quotas (429) and the worker pools that execute runs with
// interactive runs first and background runs shared fairly between tenants.
// HTTPServer and Listener are how it is served: every read and write
// bounded, authentication before any body is read, and per-client caps on
// connections (see listen.go).
//
// The run's event log stays the only record of a run: the stream is the
// log (an event's SSE id is its sequence number), approvals are read from
// it, and decisions, messages and cancels are signals the loop records in it.
// See docs/design/api.md.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/internal/jsoncanon"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/runs"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
	"github.com/agentplane/agentplane/trace/tail"
)

// Backend is the store the API runs on.
type Backend interface {
	store.Store
	store.APIStore
	store.SessionStore
}

// Options configure a Server.
type Options struct {
	// Platform provides the store, registry, loop and directory.
	Platform *platform.Platform
	// Config holds tenants' quotas and weights and trusted JWT issuers.
	Config *Config
	Logger *slog.Logger
	// Clock is the server's time: leases, approval expiry (wake times),
	// webhook schedules and token validity all read it (default time.Now).
	Clock func() time.Time

	// Workers execute runs: interactive first, then background runs by
	// weighted fair queuing between tenants (default 8).
	Workers int
	// InteractiveWorkers only ever take interactive (stream) runs, so chat
	// runs start promptly even when background work fills Workers
	// (default 2).
	InteractiveWorkers int
	// NoWorkers serves the API without executing runs (another process's
	// workers, or a test, execute them).
	NoWorkers bool
	// LeaseTTL is the workers' lease (default 15s).
	LeaseTTL time.Duration
	// Poll is how often an idle worker looks for work (default 50ms; the
	// interactive reserve looks five times as often).
	Poll time.Duration

	// StreamPoll is how often streams look for events nothing announced
	// (default 1s): appends by another process's workers on a store
	// without a change feed (SQLite), or made while the feed (PostgreSQL's
	// LISTEN/NOTIFY) was reconnecting.
	StreamPoll time.Duration
	// Heartbeat is the interval of SSE comments on idle streams (default 15s).
	Heartbeat time.Duration
	// WriteTimeout bounds each write of a response, counted from when it is
	// made (not from the request, so a handler's own time and a stream's
	// length do not count); a client that stalls longer is disconnected, and
	// a stream's client may resume with Last-Event-ID (default 30s).
	WriteTimeout time.Duration

	// Serving limits (HTTPServer, Listener, ServeHTTP); see
	// docs/design/api.md, "Serving".
	//
	// ReadHeaderTimeout bounds reading a request's headers (default 10s).
	ReadHeaderTimeout time.Duration
	// BodyTimeout bounds reading a request's body, counted from when the
	// request has been authenticated; nothing reads the body of a request
	// that has not (default 30s).
	BodyTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long (default 2m).
	IdleTimeout time.Duration
	// MaxHeaderBytes caps a request's header block (default 64 KiB).
	MaxHeaderBytes int
	// MaxConnsPerClient caps the connections one client address holds at
	// once (default 128; negative: no cap). Behind a reverse proxy every
	// client has the proxy's address: cap at the proxy instead.
	MaxConnsPerClient int
	// MaxUnauthenticatedConnsPerClient caps, of those, the connections no
	// request has authenticated on yet (default 16; negative: no cap).
	MaxUnauthenticatedConnsPerClient int

	// WebhookBackoff is the wait before each retry of a delivery; its
	// length is the number of retries (default 5s, 30s, 2m, 10m, 30m, 1h,
	// 3h, 6h, 12h: about a day).
	WebhookBackoff []time.Duration
	// WebhookTimeout bounds one delivery attempt (default 10s).
	WebhookTimeout time.Duration
	// AllowPrivateWebhooks permits webhook URLs on loopback and private
	// networks (tests, single-machine setups). Off, such targets are refused
	// when registered and when dialled.
	AllowPrivateWebhooks bool
	// HTTPClient fetches issuers' JWKS (default: a client with a timeout).
	HTTPClient *http.Client

	// Browser access (session.go, docs/design/viewer.md).
	//
	// UI, when set, is served at /ui/ (the run viewer, package web) and /
	// redirects to it.
	UI http.Handler
	// SessionTTL bounds a browser session from sign-in (default 12h).
	SessionTTL time.Duration
	// SecureCookies marks session cookies Secure even on plain HTTP: set
	// it behind a proxy that terminates TLS (requests that arrive over TLS
	// get Secure cookies anyway).
	SecureCookies bool
	// CORSOrigins are other origins whose pages may call the API with
	// credentials (added to the config's cors_origins). None: CORS is off.
	CORSOrigins []string
	// MetricsToken is the operator's bearer token for GET /metrics
	// (Prometheus metrics of every tenant, so no tenant's key opens it).
	// Empty turns /metrics off (404). See docs/design/telemetry.md.
	MetricsToken string
	// MCP, when set, builds the handler served at MCPPath (the MCP server
	// over Streamable HTTP, package mcpserver) over this server. Requests
	// to it are authenticated like the API's, from the Authorization
	// header only (never a browser session), and the handler finds its
	// caller with PrincipalFrom.
	MCP func(*Server) (http.Handler, error)
}

// MCPPath is where Options.MCP is served.
const MCPPath = "/mcp"

// Server serves the API and runs the workers.
type Server struct {
	o      Options
	p      *platform.Platform
	st     Backend
	cfg    *Config
	log    *slog.Logger
	clock  func() time.Time
	auth   *authenticator
	router *router
	hub    *hub
	hooks  *dispatcher
	// corsOrigins are the origins CORS answers (Options and config).
	corsOrigins []string
	// mcp is Options.MCP's handler (nil: none).
	mcp http.Handler

	stopOnce sync.Once
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// New builds a server; Start runs its workers and webhook dispatcher.
func New(o Options) (*Server, error) {
	if o.Platform == nil {
		return nil, errors.New("api: Platform is required")
	}
	st, ok := any(o.Platform.Store).(Backend)
	if !ok {
		return nil, errors.New("api: the platform's store does not implement store.APIStore")
	}
	if o.Config == nil {
		o.Config = &Config{}
	}
	if err := o.Config.validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.InteractiveWorkers <= 0 {
		o.InteractiveWorkers = 2
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 15 * time.Second
	}
	if o.Poll <= 0 {
		o.Poll = 50 * time.Millisecond
	}
	if o.StreamPoll <= 0 {
		o.StreamPoll = defaultStreamPoll
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 15 * time.Second
	}
	if o.WriteTimeout <= 0 {
		o.WriteTimeout = 30 * time.Second
	}
	if o.ReadHeaderTimeout <= 0 {
		o.ReadHeaderTimeout = 10 * time.Second
	}
	if o.BodyTimeout <= 0 {
		o.BodyTimeout = 30 * time.Second
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = 64 << 10
	}
	if o.MaxConnsPerClient == 0 {
		o.MaxConnsPerClient = 128
	}
	if o.MaxUnauthenticatedConnsPerClient == 0 {
		o.MaxUnauthenticatedConnsPerClient = 16
	}
	if o.WebhookBackoff == nil {
		o.WebhookBackoff = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute,
			30 * time.Minute, time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour}
	}
	if o.WebhookTimeout <= 0 {
		o.WebhookTimeout = 10 * time.Second
	}
	if o.HTTPClient == nil {
		o.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = defaultSessionTTL
	}
	origins := append(slices.Clone(o.Config.CORSOrigins), o.CORSOrigins...)
	if err := validateOrigins(origins); err != nil {
		return nil, err
	}
	s := &Server{o: o, p: o.Platform, st: st, cfg: o.Config, log: o.Logger, clock: o.Clock, corsOrigins: origins}
	s.auth = newAuthenticator(st, o.Config.Issuers, o.HTTPClient, o.Clock)
	s.router = newRouter(Routes())
	s.hub = newHub(st, o.Logger, o.StreamPoll)
	s.hooks = newDispatcher(s)
	if o.MCP != nil {
		h, err := o.MCP(s)
		if err != nil {
			return nil, fmt.Errorf("api: the MCP server: %w", err)
		}
		s.mcp = h
	}
	return s, nil
}

// Start sets tenants' fair-queuing weights and starts the stream hub's
// poller and change feed, the webhook dispatcher and (unless NoWorkers) the workers. They
// stop with ctx or Stop.
func (s *Server) Start(ctx context.Context) error {
	for name, t := range s.cfg.Tenants {
		if err := s.st.SetFairWeight(ctx, name, t.Weight); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	s.ctx, s.cancel = ctx, cancel
	s.goRun(func() { s.hub.run(ctx) })
	if cf, ok := any(s.st).(store.ChangeFeed); ok {
		s.goRun(func() {
			if err := cf.Watch(ctx, s.hub.changed); err != nil {
				s.log.Error("change feed", "err", err)
			}
		})
	}
	s.goRun(func() { s.hooks.run(ctx) })
	if s.o.NoWorkers {
		return nil
	}
	return s.StartWorkers()
}

// StartWorkers starts the worker pools of a started server made with
// NoWorkers (a test queues a backlog first, for example).
func (s *Server) StartWorkers() error {
	if s.ctx == nil {
		return errors.New("api: StartWorkers before Start")
	}
	ns := &notifyingStore{Backend: s.st, hub: s.hub}
	if s.p.Telemetry != nil {
		ns.tail = s.p.Telemetry.Tail
	}
	emb := s.p.Embedded
	if emb == nil {
		// Another engine's workers: one pool, scheduled by that engine;
		// its appends in this process wake the streams at once when the
		// engine can run over a wrapped store.
		e := s.p.Engine
		if w, ok := e.(storeWrapper); ok {
			e = w.WithStore(func(store.Store) store.Store { return ns })
		}
		s.goRun(func() { s.work(s.ctx, e, s.o.Workers+s.o.InteractiveWorkers) })
		return nil
	}
	// The embedded engine's pools claim through the API's store: fair
	// queuing between tenants, a reserve for interactive runs, and every
	// append and release wakes the streams at once.
	po := engine.PoolOptions{Wrap: func(store.Store) store.Store { return ns }, LeaseTTL: s.o.LeaseTTL, Poll: s.o.Poll, Clock: s.clock, Logger: s.log}
	general, err := emb.Pool(po)
	if err != nil {
		return err
	}
	po.Wrap, po.Poll = func(store.Store) store.Store { return &interactiveStore{notifyingStore: ns} }, s.o.Poll/5
	reserve, err := emb.Pool(po)
	if err != nil {
		return err
	}
	s.goRun(func() { s.work(s.ctx, general, s.o.Workers) })
	s.goRun(func() { s.work(s.ctx, reserve, s.o.InteractiveWorkers) })
	return nil
}

func (s *Server) work(ctx context.Context, e engine.Engine, n int) {
	for ctx.Err() == nil {
		// Work returns early only with the first error of a run; keep going.
		if err := e.Work(ctx, engine.WorkOptions{Concurrency: n}); err != nil && ctx.Err() == nil {
			s.log.Error("worker", "err", err)
		}
	}
}

func (s *Server) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// Stop stops what Start started and waits for it. It is idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.wg.Wait()
	})
}

// storeWrapper is an engine other than the embedded one whose workers can
// append through a wrapped store (the Temporal engine).
type storeWrapper interface {
	WithStore(wrap func(store.Store) store.Store) engine.Engine
}

// notifyingStore tells the stream hub about every append and release of
// the workers, so streams wake without polling, and the platform's
// telemetry tail about every append, so metrics and spans follow the log.
type notifyingStore struct {
	Backend
	hub  *hub
	tail *tail.Tail
}

func (n *notifyingStore) Append(ctx context.Context, req store.AppendRequest) error {
	err := n.Backend.Append(ctx, req)
	switch {
	case err != nil:
	case len(req.Events) > 0:
		last := req.Events[len(req.Events)-1].Seq
		n.hub.notify(req.RunID, last)
		if n.tail != nil {
			n.tail.Appended(req.RunID, req.Events[0].Seq, last)
		}
	case req.Update != nil:
		// The row alone changed (a run that waits): streams re-read it.
		n.hub.notify(req.RunID, 0)
	}
	return err
}

func (n *notifyingStore) ReleaseRun(ctx context.Context, id string, epoch int64, u store.RunUpdate) error {
	err := n.Backend.ReleaseRun(ctx, id, epoch, u)
	n.hub.notify(id, 0)
	return err
}

// interactiveStore makes an engine claim interactive runs only.
type interactiveStore struct{ *notifyingStore }

func (i *interactiveStore) ClaimRun(ctx context.Context, owner string, ttl time.Duration, now time.Time) (*store.Run, error) {
	return i.Backend.ClaimInteractive(ctx, owner, ttl, now)
}

// ServeHTTP finds the request's route, authenticates the request and
// checks the route's scope, all from the headers: the body of a request
// that is refused is never read (the answer closes the connection, so the
// server does not drain it either), and the body of an accepted one must
// arrive within BodyTimeout.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w = &writeDeadline{ResponseWriter: w, rc: http.NewResponseController(w), d: s.o.WriteTimeout}
	h := w.Header()
	h.Set("X-Content-Type-Options", "nosniff")
	if r.URL.Path == metricsPath {
		s.serveMetrics(w, r)
		return
	}
	if r.URL.Path == MCPPath && s.mcp != nil {
		s.serveMCP(w, r)
		return
	}
	if s.cors(w, r) {
		return
	}
	if s.o.UI != nil && (r.URL.Path == "/" || r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/")) {
		s.serveUI(w, r)
		return
	}
	// API answers are data, never a page: nothing in them may load or run.
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	rt, params, allow := s.router.lookup(r.Method, r.URL.EscapedPath())
	if rt == nil {
		if len(allow) > 0 {
			w.Header().Set("Allow", strings.Join(allow, ", "))
			refuse(w, r, http.StatusMethodNotAllowed, "method_not_allowed", fmt.Sprintf("%s is not allowed here", r.Method))
			return
		}
		refuse(w, r, http.StatusNotFound, "not_found", "no such route")
		return
	}
	var p *Principal
	if rt.Scope != "" {
		var ok bool
		if p, ok = s.principal(w, r, s.authenticate); !ok {
			return
		}
		if !p.Has(rt.Scope) {
			refuse(w, r, http.StatusForbidden, "forbidden", "this credential lacks the scope "+rt.Scope)
			return
		}
		if err := s.checkCSRF(r, p); err != nil {
			var he *httpError
			errors.As(err, &he)
			refuse(w, r, he.status, he.code, he.msg)
			return
		}
	}
	s.bodyDeadline(w, r)
	rt.handle(s, w, r, p, params)
}

// principal authenticates r with authn and marks its connection
// authenticated; otherwise it answers (401, or 503 when the store cannot
// be asked) and reports false. The body is never read before.
func (s *Server) principal(w http.ResponseWriter, r *http.Request, authn func(*http.Request) (*Principal, error)) (*Principal, bool) {
	p, err := authn(r)
	if err != nil {
		if errors.Is(err, store.ErrUnavailable) {
			// The key could not be looked up: not the client's fault.
			s.log.Warn("authenticate: store unavailable", "err", err)
			writeUnavailable(w)
			return nil, false
		}
		if !errors.Is(err, ErrUnauthenticated) {
			s.log.Warn("authenticate", "err", err)
		}
		w.Header().Set("WWW-Authenticate", `Bearer realm="agentplane"`)
		w.Header().Set("Connection", "close") // an unauthenticated client keeps no connection
		msg := ErrUnauthenticated.Error()
		if r.URL.Path == MCPPath {
			msg += ": " + MCPPath + " takes an agentplane API key (or a JWT of a trusted issuer) as Authorization: Bearer KEY, as /v1 does"
		}
		refuse(w, r, http.StatusUnauthorized, "unauthenticated", msg)
		return nil, false
	}
	markAuthenticated(r)
	return p, true
}

// serveMCP serves Options.MCP's handler to a caller authenticated by the
// Authorization header (a session cookie is not enough: no browser page
// may drive the MCP server with a user's session). Each tool checks the
// scope it needs.
func (s *Server) serveMCP(w http.ResponseWriter, r *http.Request) {
	p, ok := s.principal(w, r, s.auth.authenticate)
	if !ok {
		return
	}
	s.bodyDeadline(w, r)
	s.mcp.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
}

// bodyDeadline bounds reading an authenticated request's body.
func (s *Server) bodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		// Only a request with a body: on one without, the server is
		// already reading ahead to see the client leave, and a deadline
		// would end that read (and the request's context).
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(s.o.BodyTimeout))
	}
}

// refuseLinger is how long, after refusing a request with a body, the
// server goes on discarding what arrives before it closes the connection:
// time for the client to read the answer (closing a socket with unread
// input resets it, and a reset can destroy an answer not yet read).
const refuseLinger = 500 * time.Millisecond

// refuse answers a request whose body will not be read. When it has one,
// the connection closes after the answer and the server discards at most
// refuseLinger of the body (net/http otherwise drains up to 256 KiB of it
// without any deadline, which a slow client could drip for ever), and
// never parses it as the next request.
func refuse(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(refuseLinger))
	}
	writeError(w, status, code, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, ErrorResponse{Error: ErrorBody{Code: code, Message: msg}})
}

// httpError carries a status and code to the handler's caller.
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &httpError{http.StatusBadRequest, "invalid_request", fmt.Sprintf(format, args...)}
}

func notFound(what string) error {
	return &httpError{http.StatusNotFound, "not_found", what + " not found"}
}

func conflict(format string, args ...any) error {
	return &httpError{http.StatusConflict, "conflict", fmt.Sprintf(format, args...)}
}

// fail answers err (see Failure); a client that went away gets nothing.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var qe *quotaError
	if errors.As(err, &qe) {
		qe.write(w)
		return
	}
	status, body := s.Failure(err)
	switch {
	case status == http.StatusServiceUnavailable && body.Code == "store_unavailable":
		// Never a 4xx, and never the driver's words: the client retries.
		s.log.Warn("store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		writeUnavailable(w)
	case status == http.StatusInternalServerError && r.Context().Err() != nil:
		// The client went away; nobody reads the answer.
	case status == http.StatusInternalServerError:
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		writeError(w, status, body.Code, body.Message)
	default:
		writeError(w, status, body.Code, body.Message)
	}
}

// Failure is how the API answers an error of one of its operations: an
// *httpError or a quota refusal as it says, store and use-case sentinels
// by their meaning, anything else as a 500 whose message says nothing of
// the cause (the caller logs it). Front ends other than HTTP (the MCP
// server) answer with the same code and message.
func (s *Server) Failure(err error) (int, ErrorBody) {
	var he *httpError
	var qe *quotaError
	switch {
	case errors.As(err, &qe):
		return http.StatusTooManyRequests, ErrorBody{Code: "quota_exceeded", Message: qe.msg, Quota: qe.quota, Limit: qe.limit, Used: qe.used,
			RetryAfter: int64(qe.retryAfter.Round(time.Second) / time.Second)}
	case errors.As(err, &he):
		return he.status, ErrorBody{Code: he.code, Message: he.msg}
	case errors.Is(err, store.ErrUnavailable):
		return http.StatusServiceUnavailable, ErrorBody{Code: "store_unavailable", Message: "the run store is unavailable; retry after the time in Retry-After"}
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, ErrorBody{Code: "not_found", Message: "not found"}
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, ErrorBody{Code: "conflict", Message: err.Error()}
	case errors.Is(err, runs.ErrApprovalNotPending):
		return http.StatusConflict, ErrorBody{Code: "approval_not_pending", Message: err.Error()}
	case errors.Is(err, runs.ErrNotApprover):
		return http.StatusForbidden, ErrorBody{Code: "not_approver", Message: err.Error()}
	}
	return http.StatusInternalServerError, ErrorBody{Code: "internal", Message: "internal error"}
}

// storeRetryAfter is the Retry-After, in seconds, of a 503 answered
// because the store is unavailable.
const storeRetryAfter = 2

// writeUnavailable answers a request the store could not serve: 503 with
// Retry-After and a message that says nothing of the driver.
func writeUnavailable(w http.ResponseWriter) {
	w.Header().Set("Retry-After", strconv.Itoa(storeRetryAfter))
	writeError(w, http.StatusServiceUnavailable, "store_unavailable", "the run store is unavailable; retry after the time in Retry-After")
}

// maxBody bounds request bodies (an agent definition is at most 1 MiB).
const maxBody = 2 << 20

// readBodyBytes reads up to limit+1 bytes of the body. A body that does not
// arrive within BodyTimeout (the deadline ServeHTTP set) is a 408.
func readBodyBytes(r *http.Request, limit int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, &httpError{http.StatusRequestTimeout, "body_timeout", "the body did not arrive in time"}
	}
	if err != nil {
		return nil, badRequest("reading the body: %v", err)
	}
	return data, nil
}

// requireMediaType answers 415 unless the request's Content-Type is one of
// the types given (parameters such as charset are allowed). Without it a
// form post or a text/plain body would be parsed as if the client had
// meant to send JSON.
func requireMediaType(r *http.Request, types ...string) error {
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && slices.Contains(types, mt) {
		return nil
	}
	got := "no Content-Type"
	if ct != "" {
		got = fmt.Sprintf("Content-Type %q", trace.Preview([]byte(ct), 100))
	}
	return &httpError{http.StatusUnsupportedMediaType, "unsupported_media_type",
		fmt.Sprintf("the body must be %s; the request has %s", strings.Join(types, " or "), got)}
}

// decodeBody reads a JSON body strictly: the Content-Type must say JSON and
// unknown fields are errors.
func decodeBody(r *http.Request, v any) error {
	if err := requireMediaType(r, "application/json"); err != nil {
		return err
	}
	data, err := readBodyBytes(r, maxBody)
	if err != nil {
		return err
	}
	if len(data) > maxBody {
		return &httpError{http.StatusRequestEntityTooLarge, "too_large", "the body is larger than 2 MiB"}
	}
	return decodeJSON(data, v)
}

func decodeJSON(data []byte, v any) error {
	if err := jsoncanon.NoDuplicateKeys(data); err != nil {
		return badRequest("the body is not the expected JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return badRequest("the body is not the expected JSON: %v", err)
	}
	if dec.More() {
		return badRequest("the body holds more than one JSON value")
	}
	return nil
}
