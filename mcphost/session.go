package mcphost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentplane/agentplane/internal/addrpolicy"
)

// Bounds of one session.
const (
	// maxResponseBytes bounds one HTTP response body from a server.
	maxResponseBytes = 16 << 20
	// closeTimeout bounds closing a session (and stopping its server).
	closeTimeout = 5 * time.Second
	// maxLineBytes bounds one JSON-RPC message over stdio.
	maxLineBytes = 16 << 20
)

// errConnectRefused is wrapped when a server refused the credential a
// connection carried (HTTP 401 or 403).
var errConnectRefused = errors.New("the server refused the credential")

// session is one client session with one server, for one run (or one
// listing).
type session struct {
	cs   *mcp.ClientSession
	live *Snapshot
	// quarantined maps server tool names to the reason (set by the host).
	quarantined map[string]string
	// auth is the credential slot of an http session.
	auth *bearer
	proc Process

	callMu sync.Mutex // one call at a time: the credential slot is per call
	mu     sync.Mutex
	last   time.Time
	busy   int
	clock  func() time.Time
	once   sync.Once
	err    error
}

func (s *session) idleSince(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy > 0 {
		return 0
	}
	return now.Sub(s.last)
}

// call makes one tools/call with the call's own credential (http).
func (s *session) call(ctx context.Context, p *mcp.CallToolParams, credential string) (*mcp.CallToolResult, error) {
	s.mu.Lock()
	s.busy++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.busy--
		s.last = s.clock()
		s.mu.Unlock()
	}()
	s.callMu.Lock()
	defer s.callMu.Unlock()
	if s.auth != nil {
		s.auth.set(credential)
		defer s.auth.set("")
	}
	return s.cs.CallTool(ctx, p)
}

// close ends the session within closeTimeout and stops a stdio server.
func (s *session) close() error {
	s.once.Do(func() {
		done := make(chan error, 1)
		go func() { done <- s.cs.Close() }()
		select {
		case s.err = <-done:
		case <-time.After(closeTimeout):
			s.err = errors.New("mcphost: the session did not close in time")
		}
		if s.proc != nil {
			s.err = errors.Join(s.err, s.proc.Stop())
		}
	})
	return s.err
}

// connect opens a session with the connector's server and lists its tools.
func (h *Host) connect(ctx context.Context, tenant, runID string, spec *Spec, credential string) (*session, error) {
	s := &session{clock: h.o.Clock, last: h.o.Clock()}
	var t mcp.Transport
	switch spec.Transport {
	case TransportHTTP:
		s.auth = &bearer{}
		s.auth.set(credential)
		t = &mcp.StreamableClientTransport{Endpoint: spec.Endpoint, HTTPClient: httpClient(h.o.Policy, spec.Allow, s.auth, originOf(spec.Endpoint)),
			MaxRetries: -1, DisableStandaloneSSE: true}
	case TransportStdio:
		if h.o.Launcher == nil {
			return nil, fmt.Errorf("connector %s is a stdio server, and no tier-2 sandbox is configured to run it in; stdio servers never run on the host", spec.Name)
		}
		var env []string
		if credential != "" {
			env = append(env, "AGENTPLANE_CREDENTIAL="+credential)
		}
		proc, err := h.o.Launcher.Launch(ctx, Launch{Tenant: tenant, RunID: runID, Connector: spec.Name, Command: spec.Command,
			Image: spec.Image, Allow: spec.Allow, Env: env})
		if err != nil {
			return nil, fmt.Errorf("connector %s: start its server in a sandbox: %w", spec.Name, err)
		}
		s.proc = proc
		t = &mcp.IOTransport{Reader: proc.Stdout(), Writer: proc.Stdin(), MaxLineLength: maxLineBytes}
	default:
		return nil, fmt.Errorf("connector %s: unknown transport %q", spec.Name, spec.Transport)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "agentplane", Version: "1"},
		&mcp.ClientOptions{Capabilities: &mcp.ClientCapabilities{}, Logger: h.o.Logger})
	cs, err := client.Connect(ctx, t, &mcp.ClientSessionOptions{ProtocolVersion: h.o.ProtocolVersion})
	if err != nil {
		if s.proc != nil {
			if w, ok := s.proc.(interface{ Why() string }); ok {
				if why := w.Why(); why != "" {
					err = fmt.Errorf("%w; %s", err, why)
				}
			}
			_ = s.proc.Stop()
		}
		if s.auth != nil && s.auth.wasRefused() {
			err = fmt.Errorf("%w: %w", errConnectRefused, err)
		}
		return nil, fmt.Errorf("connector %s: connect: %w", spec.Name, err)
	}
	s.cs = cs
	live, err := listTools(ctx, cs)
	if err != nil {
		_ = s.close()
		return nil, fmt.Errorf("connector %s: list tools: %w", spec.Name, err)
	}
	s.live = live
	return s, nil
}

func listTools(ctx context.Context, cs *mcp.ClientSession) (*Snapshot, error) {
	var defs []ToolDef
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		if len(defs) >= MaxTools {
			return nil, fmt.Errorf("the server lists more than %d tools", MaxTools)
		}
		in, err := json.Marshal(t.InputSchema)
		if err != nil {
			return nil, fmt.Errorf("tool %q: inputSchema: %w", redactName(t.Name), err)
		}
		var out json.RawMessage
		if t.OutputSchema != nil {
			if out, err = json.Marshal(t.OutputSchema); err != nil {
				return nil, fmt.Errorf("tool %q: outputSchema: %w", redactName(t.Name), err)
			}
		}
		defs = append(defs, ToolDef{Name: t.Name, Title: t.Title, Description: t.Description, InputSchema: in, OutputSchema: out})
	}
	return NewSnapshot(defs)
}

// bearer is the credential slot of an http session: set for one call,
// cleared after it, sent only to the connector's own origin (the client
// follows no redirect and dials nothing outside the allowlist).
type bearer struct {
	mu    sync.Mutex
	token string
	// refused is set when the server answered 401 or 403 to a request
	// that carried the token.
	refused bool
}

func (b *bearer) set(t string) {
	b.mu.Lock()
	b.token, b.refused = t, false
	b.mu.Unlock()
}

func (b *bearer) get() string {
	if b == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.token
}

func (b *bearer) wasRefused() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.refused
}

func (b *bearer) noteRefused() {
	b.mu.Lock()
	b.refused = true
	b.mu.Unlock()
}

// originOf is scheme://host:port of a URL, lower case ("" if it has none).
func originOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return ""
	}
	return strings.ToLower(u.Scheme + "://" + u.Host)
}

// httpClient reaches only allowlisted host:port pairs, at addresses the
// policy allows (checked at connect time, after resolution), follows no
// redirect, uses no proxy from the environment and bounds every response.
//
// A credential in auth is attached only to requests for origin, the
// connector endpoint's: never to another server, whatever asks.
func httpClient(policy *addrpolicy.Policy, allow []string, auth *bearer, origin string) *http.Client {
	allowed := map[string]bool{}
	for _, a := range allow {
		allowed[a] = true
	}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: policy.Control}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if !allowed[strings.ToLower(addr)] {
				return nil, fmt.Errorf("%s is not in the connector's allowlist", addr)
			}
			return d.DialContext(ctx, network, addr)
		},
		TLSHandshakeTimeout:    10 * time.Second,
		ResponseHeaderTimeout:  60 * time.Second,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConnsPerHost:    4,
		IdleConnTimeout:        90 * time.Second,
	}
	return &http.Client{
		Transport: &boundedRT{base: tr, auth: auth, origin: origin},
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return errors.New("the connector's server answered with a redirect, which is not followed")
		},
	}
}

type boundedRT struct {
	base   http.RoundTripper
	auth   *bearer
	origin string
}

func (rt *boundedRT) RoundTrip(r *http.Request) (*http.Response, error) {
	tok := rt.auth.get()
	if tok != "" && rt.origin != "" && originOf(r.URL.String()) == rt.origin {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+tok)
	} else if r.Header.Get("Authorization") != "" {
		r = r.Clone(r.Context())
		r.Header.Del("Authorization") // nothing else may carry one
		tok = ""
	}
	resp, err := rt.base.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	if tok != "" && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
		rt.auth.noteRefused()
	}
	resp.Body = &limitedBody{rc: resp.Body, n: maxResponseBytes}
	return resp, nil
}

type limitedBody struct {
	rc io.ReadCloser
	n  int64
}

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("the server's response is larger than %d bytes", maxResponseBytes)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.rc.Read(p)
	l.n -= int64(n)
	return n, err
}

func (l *limitedBody) Close() error { return l.rc.Close() }
