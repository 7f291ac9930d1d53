package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/internal/addrpolicy"
	"github.com/agentplane/agentplane/sandbox/toolrun"
	"github.com/agentplane/agentplane/tool"
)

// Meta keys the host puts in every tools/call request's _meta.
const (
	// MetaIdempotencyKey carries run_id:step:index: a server with side
	// effects must answer a key it has seen with its first result.
	MetaIdempotencyKey = "io.agentplane/idempotency-key"
	// MetaTraceparent carries the W3C traceparent of the call.
	MetaTraceparent = "traceparent"
)

// Controls a refusal of the host names (broker.Refused.Control).
const (
	ControlQuarantine = "quarantine"
	ControlConnector  = "connector"
)

// Connector is a registered connector as the host uses it.
type Connector struct {
	Tenant string
	Spec   *Spec
	// Reviewed is the approved snapshot (nil: never reviewed) and
	// Manifests the tool manifests built from it with the overlays.
	Reviewed  *Snapshot
	Manifests []*tool.Manifest
}

// Registry finds connectors by name (names are unique across tenants).
// It returns an error wrapping ErrUnknown for a name nobody registered.
type Registry interface {
	Connector(ctx context.Context, name string) (*Connector, error)
}

// ErrUnknown is wrapped by a Registry for a connector nobody registered.
var ErrUnknown = errors.New("unknown connector")

// Launcher starts a stdio server inside a sandbox (tier 2) and returns its
// standard streams. Nothing else may start one: without a Launcher, stdio
// connectors are refused.
type Launcher interface {
	Launch(ctx context.Context, l Launch) (Process, error)
}

// Launch describes one stdio server to start.
type Launch struct {
	Tenant, RunID, Connector string
	Command                  []string
	Image                    string
	// Allow is the egress allowlist of the sandbox.
	Allow []string
	// Env is the server's complete environment (KEY=VALUE).
	Env []string
}

// Process is a running stdio server. Stop ends it (and its sandbox)
// within a bounded time and may be called more than once.
type Process interface {
	Stdin() io.WriteCloser
	Stdout() io.ReadCloser
	Stop() error
}

// Options configure a Host.
type Options struct {
	Registry Registry
	// Policy judges every address an http connector's dialer reaches;
	// the zero policy (nil) allows public addresses only. Loopback is
	// opened only by an explicit Policy with Loopback set (tests).
	Policy *addrpolicy.Policy
	// Launcher starts stdio servers in sandboxes (nil: stdio refused).
	Launcher Launcher
	// OAuth holds users' tokens for connectors with auth oauth; listing
	// such a server acts as a user with their token (nil: refused).
	OAuth *OAuth
	// IdleTimeout closes a run's session unused for this long (default
	// 2 minutes); ConnectTimeout bounds connecting and listing (default
	// 15 s).
	IdleTimeout    time.Duration
	ConnectTimeout time.Duration
	// ProtocolVersion, when set, is the revision the client asks for
	// first (the server may answer with an older one it supports).
	ProtocolVersion string
	Logger          *slog.Logger
	Clock           func() time.Time
}

// Host is the broker's MCP host: one client session per connector per run.
// Safe for concurrent use; Close ends every session.
type Host struct {
	o Options

	mu       sync.Mutex
	sessions map[sessionKey]*session
	closed   bool
	stop     chan struct{}
	done     chan struct{}
}

type sessionKey struct{ run, connector, snapshot string }

var _ broker.Remote = (*Host)(nil)

// New returns a host and starts its idle reaper.
func New(o Options) (*Host, error) {
	if o.Registry == nil {
		return nil, errors.New("mcphost: Registry is required")
	}
	if o.Policy == nil {
		o.Policy = &addrpolicy.Policy{}
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = 2 * time.Minute
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 15 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	h := &Host{o: o, sessions: map[sessionKey]*session{}, stop: make(chan struct{}), done: make(chan struct{})}
	go h.reap()
	return h, nil
}

// Close ends every session and the reaper. Idempotent.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	ss := h.sessions
	h.sessions = map[sessionKey]*session{}
	h.mu.Unlock()
	close(h.stop)
	<-h.done
	var errs []error
	for _, s := range ss {
		errs = append(errs, s.close())
	}
	return errors.Join(errs...)
}

// EndRun closes the sessions of one run.
func (h *Host) EndRun(runID string) {
	h.mu.Lock()
	var ss []*session
	for k, s := range h.sessions {
		if k.run == runID {
			ss = append(ss, s)
			delete(h.sessions, k)
		}
	}
	h.mu.Unlock()
	for _, s := range ss {
		_ = s.close()
	}
}

// Sessions is the number of open sessions.
func (h *Host) Sessions() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

func (h *Host) reap() {
	defer close(h.done)
	every := min(h.o.IdleTimeout/2, 30*time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-h.stop:
			return
		case <-t.C:
		}
		now := h.o.Clock()
		h.mu.Lock()
		var idle []*session
		for k, s := range h.sessions {
			if s.idleSince(now) > h.o.IdleTimeout {
				idle = append(idle, s)
				delete(h.sessions, k)
			}
		}
		h.mu.Unlock()
		for _, s := range idle {
			_ = s.close()
		}
	}
}

// Reviewed reports whether m is a manifest of its connector's current
// review.
func (h *Host) Reviewed(m *tool.Manifest) bool {
	if m.MCP == nil {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := h.o.Registry.Connector(ctx, m.Connector)
	if err != nil {
		return false
	}
	return reviewedIn(c, m)
}

func reviewedIn(c *Connector, m *tool.Manifest) bool {
	want := m.Hash()
	for _, r := range c.Manifests {
		if r.Hash() == want {
			return true
		}
	}
	return false
}

// ErrPerUser is returned by Quarantine for a connector with per-user
// OAuth: its server lists tools only to a user, so it is checked on each
// run's own session (as that run's user) before every call.
var ErrPerUser = errors.New("the connector's server is listed only as a user (per-user OAuth)")

// Quarantine connects to the connector's server (a listing only, outside
// any run), compares its tools with the reviewed snapshot and returns the
// quarantined tools by server name with the reason. A connector that
// cannot be reached quarantines every tool: nothing unverified is offered.
// A per-user OAuth connector returns ErrPerUser.
func (h *Host) Quarantine(ctx context.Context, connector string) (map[string]string, error) {
	c, err := h.o.Registry.Connector(ctx, connector)
	if err != nil {
		return nil, err
	}
	if c.Spec.Auth == AuthOAuth {
		return nil, fmt.Errorf("connector %s: %w", connector, ErrPerUser)
	}
	live, err := h.List(ctx, c.Tenant, "", c.Spec)
	if err != nil {
		return nil, err
	}
	return Quarantined(c.Reviewed, live), nil
}

// List connects to a server, lists its tools and disconnects: what
// connectors review and diff show. The listing is bounded (MaxTools,
// sizes) and its text is untrusted. A per-user OAuth server is listed as
// user, with their token; other servers get no credential.
func (h *Host) List(ctx context.Context, tenant, user string, spec *Spec) (*Snapshot, error) {
	ctx, cancel := context.WithTimeout(ctx, h.o.ConnectTimeout)
	defer cancel()
	credential := ""
	if spec.Auth == AuthOAuth {
		if h.o.OAuth == nil {
			return nil, fmt.Errorf("connector %s uses per-user OAuth, and this platform has no OAuth client configured", spec.Name)
		}
		cred, err := h.o.OAuth.Credential(ctx, tenant, user, spec)
		if err != nil {
			return nil, fmt.Errorf("listing connector %s acts as a user: %w", spec.Name, err)
		}
		credential = cred.Token
	}
	s, err := h.connect(ctx, tenant, "", spec, credential)
	if err != nil {
		return nil, err
	}
	defer s.close()
	return s.live, nil
}

// Call is broker.Remote: it makes the call on the run's session with the
// connector, refusing a tool of another tenant's connector, a manifest
// that is not the current review's, and a quarantined tool.
func (h *Host) Call(ctx context.Context, m *tool.Manifest, call tool.Call) (tool.Result, error) {
	if m.MCP == nil {
		return tool.Result{}, fmt.Errorf("mcphost: tool %s is not an MCP tool", m.Name)
	}
	c, err := h.o.Registry.Connector(ctx, m.Connector)
	switch {
	case errors.Is(err, ErrUnknown):
		return tool.Result{}, &broker.Refused{Control: ControlConnector, Reason: fmt.Sprintf("tool %s belongs to connector %s, which is not registered", m.Name, m.Connector)}
	case err != nil:
		return tool.Result{}, err
	case c.Tenant != call.Tenant:
		// Another tenant's server never receives this tenant's calls.
		return tool.Result{}, &broker.Refused{Control: ControlConnector, Reason: fmt.Sprintf("tenant %s has no connector %s", call.Tenant, m.Connector)}
	case !reviewedIn(c, m):
		return tool.Result{}, &broker.Refused{Control: ControlQuarantine, Reason: fmt.Sprintf("tool %s is not in the current review of connector %s (it was reviewed again or removed since this run started); the call was not made", m.Name, m.Connector)}
	}
	if c.Spec.Auth == AuthOAuth && call.Credential == "" {
		// Never a call without the user's own token (nor with anyone else's).
		return tool.Result{}, &broker.Refused{Control: broker.ControlCredential, Reason: fmt.Sprintf("tool %s acts as the user at connector %s, and no user credential was attached (its overlay must say auth.mode on_behalf_of_user); the call was not made", m.Name, m.Connector)}
	}
	s, err := h.session(ctx, c, call)
	if err != nil {
		return tool.Result{}, h.unauthorised(c, call, err)
	}
	if why, q := s.quarantined[m.MCP.Tool]; q {
		return tool.Result{}, &broker.Refused{Control: ControlQuarantine, Reason: fmt.Sprintf("tool %s is quarantined: %s; an administrator must review connector %s again (agentplane connectors diff %s, then review) before it can be called",
			m.Name, why, m.Connector, m.Connector)}
	}
	var args map[string]any
	if err := json.Unmarshal(call.Args, &args); err != nil {
		return tool.Result{}, fmt.Errorf("mcphost: arguments of %s: %w", m.Name, err)
	}
	meta := mcp.Meta{MetaIdempotencyKey: call.IdempotencyKey, MetaTraceparent: toolrun.Traceparent(call.RunID, call.IdempotencyKey)}
	res, err := s.call(ctx, &mcp.CallToolParams{Meta: meta, Name: m.MCP.Tool, Arguments: args}, call.Credential)
	if err != nil {
		if s.auth != nil && s.auth.wasRefused() {
			return tool.Result{}, h.unauthorised(c, call, errRefusedToken)
		}
		return tool.Result{}, err
	}
	return result(m, res)
}

var errRefusedToken = errors.New("the server refused the token")

// unauthorised turns a server's refusal of a user's OAuth token (HTTP 401
// or 403: revoked, expired early, or not for this server) into a refusal
// the model sees, telling the user to connect again. The call failed
// closed: nothing was done with another credential.
func (h *Host) unauthorised(c *Connector, call tool.Call, err error) error {
	if c.Spec.Auth != AuthOAuth || !(errors.Is(err, errRefusedToken) || errors.Is(err, errConnectRefused)) {
		return err
	}
	return &broker.Refused{Control: broker.ControlCredential, Reason: fmt.Sprintf("connector %s refused user %s's token (it may have been revoked or be for another server); connect your account again: agentplane connectors connect %s --tenant %s --as %s",
		c.Spec.Name, call.User, c.Spec.Name, call.Tenant, call.User)}
}

// session returns the run's session with the connector, opening it (and
// listing the server's tools) on first use.
func (h *Host) session(ctx context.Context, c *Connector, call tool.Call) (*session, error) {
	snap := ""
	if c.Reviewed != nil {
		snap = c.Reviewed.Hash()
	}
	k := sessionKey{run: call.RunID, connector: c.Spec.Name, snapshot: snap}
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, errors.New("mcphost: closed")
	}
	if s := h.sessions[k]; s != nil {
		h.mu.Unlock()
		return s, nil
	}
	h.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, h.o.ConnectTimeout)
	defer cancel()
	s, err := h.connect(cctx, c.Tenant, call.RunID, c.Spec, call.Credential)
	if err != nil {
		return nil, err
	}
	s.quarantined = Quarantined(c.Reviewed, s.live)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		_ = s.close()
		return nil, errors.New("mcphost: closed")
	}
	if prev := h.sessions[k]; prev != nil { // another call won the race
		go s.close()
		return prev, nil
	}
	h.sessions[k] = s
	return s, nil
}

// result turns a server's answer into the tool's result: text content
// kept, other content named and sized, structured content checked
// against the declared output schema.
func result(m *tool.Manifest, res *mcp.CallToolResult) (tool.Result, error) {
	type item struct {
		Type     string `json:"type"`
		Text     string `json:"text,omitempty"`
		MIMEType string `json:"mime_type,omitempty"`
		Omitted  bool   `json:"omitted,omitempty"`
	}
	out := struct {
		Content    []item          `json:"content"`
		Structured json.RawMessage `json:"structured,omitempty"`
		IsError    bool            `json:"is_error,omitempty"`
	}{Content: []item{}, IsError: res.IsError}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			out.Content = append(out.Content, item{Type: "text", Text: c.Text})
		case *mcp.ImageContent:
			out.Content = append(out.Content, item{Type: "image", MIMEType: c.MIMEType, Omitted: true})
		case *mcp.AudioContent:
			out.Content = append(out.Content, item{Type: "audio", MIMEType: c.MIMEType, Omitted: true})
		default:
			out.Content = append(out.Content, item{Type: "other", Omitted: true})
		}
	}
	if res.StructuredContent != nil {
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			return tool.Result{}, fmt.Errorf("mcphost: structured content of %s: %w", m.Name, err)
		}
		out.Structured = b
	}
	if !res.IsError {
		if err := m.ValidateResult(out.Structured); err != nil {
			return tool.ErrorResult("the server's result does not match the output schema it declared, so it was not used: %v", err), nil
		}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Output: b, IsError: res.IsError}, nil
}
