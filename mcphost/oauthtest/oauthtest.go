// Package oauthtest runs, on loopback, an OAuth 2.1 authorization server
// (RFC 8414 metadata, authorization code with PKCE S256, resource
// indicators, refresh tokens) and MCP resource servers (Go SDK servers
// behind bearer-token middleware that accepts only tokens for themselves,
// with RFC 9728 metadata named by their 401s), for the tests of per-user
// OAuth connectors. Each resource server records every token it is sent.
package oauthtest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	"github.com/agentplane/agentplane/mcphost"
)

// Clock is the test's time, shared by the authorization server, the
// resource servers and the OAuth client.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// AuthServer is an OAuth 2.1 authorization server on loopback: RFC 8414
// metadata, authorization code with PKCE S256 and resource indicators,
// refresh tokens. Its tokens are opaque; resource servers ask it who a
// token is for (introspection, in memory).
type AuthServer struct {
	URL   string
	clock *Clock
	// TTL is the life of the access tokens it issues.
	TTL time.Duration

	// mu guards everything below; Set runs a change under it.
	mu        sync.Mutex
	codes     map[string]codeGrant
	tokens    map[string]Issued // access token -> what it is for
	refreshes map[string]Issued // refresh token -> grant
	IssuedAll []string          // every access and refresh token handed out
	Refreshed int
	// misissue, when set, is the audience the server puts on every token
	// instead of the resource asked for (a confused server).
	Misissue string
	// lieIssuer makes the metadata name another issuer.
	LieIssuer bool
}

type codeGrant struct{ challenge, resource, redirect, client, user string }

// Issued is what a token is for.
type Issued struct {
	Aud, User string
	Exp       time.Time
}

func NewAuthServer(t testing.TB, clock *Clock) *AuthServer {
	a := &AuthServer{clock: clock, TTL: 10 * time.Minute, codes: map[string]codeGrant{}, tokens: map[string]Issued{}, refreshes: map[string]Issued{}}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/oauth-authorization-server", func(w http.ResponseWriter, r *http.Request) {
		a.mu.Lock()
		iss := a.URL
		if a.LieIssuer {
			iss = "http://127.0.0.1:9/someone-else"
		}
		a.mu.Unlock()
		writeJSON(w, http.StatusOK, map[string]any{"issuer": iss, "authorization_endpoint": a.URL + "/authorize", "token_endpoint": a.URL + "/token",
			"response_types_supported": []string{"code"}, "grant_types_supported": []string{"authorization_code", "refresh_token"},
			"code_challenge_methods_supported": []string{"S256"}, "authorization_response_iss_parameter_supported": true})
	})
	mux.HandleFunc("GET /authorize", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		user := r.Header.Get("X-Test-User") // the user logged in at the authorization server
		if q.Get("response_type") != "code" || q.Get("client_id") != "agentplane" || q.Get("code_challenge_method") != "S256" ||
			q.Get("code_challenge") == "" || q.Get("resource") == "" || q.Get("state") == "" || user == "" {
			http.Error(w, "bad authorization request", http.StatusBadRequest)
			return
		}
		code := randomToken("code")
		a.mu.Lock()
		a.codes[code] = codeGrant{challenge: q.Get("code_challenge"), resource: q.Get("resource"), redirect: q.Get("redirect_uri"), client: q.Get("client_id"), user: user}
		a.mu.Unlock()
		to, _ := url.Parse(q.Get("redirect_uri"))
		v := to.Query()
		v.Set("code", code)
		v.Set("state", q.Get("state"))
		v.Set("iss", a.URL)
		to.RawQuery = v.Encode()
		http.Redirect(w, r, to.String(), http.StatusFound)
	})
	mux.HandleFunc("POST /token", func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_request"})
			return
		}
		f := r.PostForm
		a.mu.Lock()
		defer a.mu.Unlock()
		var g Issued
		switch f.Get("grant_type") {
		case "authorization_code":
			c, ok := a.codes[f.Get("code")]
			delete(a.codes, f.Get("code"))
			sum := sha256.Sum256([]byte(f.Get("code_verifier")))
			if !ok || c.client != f.Get("client_id") || c.redirect != f.Get("redirect_uri") || c.resource != f.Get("resource") ||
				base64.RawURLEncoding.EncodeToString(sum[:]) != c.challenge {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
				return
			}
			g = Issued{Aud: c.resource, User: c.user}
		case "refresh_token":
			old, ok := a.refreshes[f.Get("refresh_token")]
			delete(a.refreshes, f.Get("refresh_token")) // rotated
			if !ok || old.Aud != f.Get("resource") {
				writeJSON(w, http.StatusBadRequest, map[string]string{"error": "invalid_grant"})
				return
			}
			a.Refreshed++
			g = Issued{Aud: old.Aud, User: old.User}
		default:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": "unsupported_grant_type"})
			return
		}
		at, rt := randomToken("at"), randomToken("rt")
		a.refreshes[rt] = g
		if a.Misissue != "" {
			g.Aud = a.Misissue
		}
		g.Exp = a.clock.Now().Add(a.TTL)
		a.tokens[at] = g
		a.IssuedAll = append(a.IssuedAll, at, rt)
		writeJSON(w, http.StatusOK, map[string]any{"access_token": at, "token_type": "Bearer", "expires_in": int(a.TTL / time.Second), "refresh_token": rt})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	a.URL = srv.URL
	return a
}

func (a *AuthServer) Introspect(tok string) (Issued, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	g, ok := a.tokens[tok]
	return g, ok
}

func (a *AuthServer) Set(fn func(*AuthServer)) {
	a.mu.Lock()
	fn(a)
	a.mu.Unlock()
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func randomToken(prefix string) string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}

// ResourceServer is a Go SDK MCP server on loopback behind bearer-token
// middleware that accepts only tokens whose audience is this server. It
// records every Authorization header it is sent, on any path.
type ResourceServer struct {
	URL      string // the MCP endpoint
	Resource string // its resource identifier (= URL)
	as       *AuthServer

	mu    sync.Mutex
	seen  []string // bearer tokens presented, in order
	calls int      // tool calls that ran
	prm   int      // fetches of the protected-resource metadata
}

func NewResourceServer(t testing.TB, as *AuthServer, name string) *ResourceServer {
	rs := &ResourceServer{as: as}
	s := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "whoami", Description: "Says who the token is for."}, func(ctx context.Context, req *mcp.CallToolRequest, in struct{}) (*mcp.CallToolResult, any, error) {
		rs.mu.Lock()
		rs.calls++
		rs.mu.Unlock()
		who := ""
		if ti := auth.TokenInfoFromContext(ctx); ti != nil {
			who = ti.UserID
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name + " says you are " + who}}}, nil, nil
	})
	verify := func(ctx context.Context, tok string, _ *http.Request) (*auth.TokenInfo, error) {
		g, ok := as.Introspect(tok)
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: unknown token", auth.ErrInvalidToken)
		case g.Aud != rs.Resource:
			return nil, fmt.Errorf("%w: token is for %s, not this server", auth.ErrInvalidToken, g.Aud)
		case !as.clock.Now().Before(g.Exp):
			return nil, fmt.Errorf("%w: expired", auth.ErrInvalidToken)
		}
		// The middleware checks expiry against the wall clock; the fake
		// clock's verdict is above.
		return &auth.TokenInfo{UserID: g.User, Expiration: time.Now().Add(time.Hour)}, nil
	}
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{Stateless: true})
	mux := http.NewServeMux()
	var base string
	// The metadata sits at a path only the 401's challenge names.
	mux.Handle("/meta/"+name, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.mu.Lock()
		rs.prm++
		rs.mu.Unlock()
		auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{Resource: rs.Resource, AuthorizationServers: []string{as.URL},
			ScopesSupported: []string{name + ".read"}}).ServeHTTP(w, r)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if h := r.Header.Get("Authorization"); h != "" {
			rs.mu.Lock()
			rs.seen = append(rs.seen, strings.TrimPrefix(h, "Bearer "))
			rs.mu.Unlock()
		}
		if r.URL.Path == "/mcp" {
			auth.RequireBearerToken(verify, &auth.RequireBearerTokenOptions{ResourceMetadataURL: base + "/meta/" + name})(mcpHandler).ServeHTTP(w, r)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	base = srv.URL
	rs.URL, rs.Resource = srv.URL+"/mcp", srv.URL+"/mcp"
	return rs
}

func (rs *ResourceServer) Tokens() []string {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return append([]string(nil), rs.seen...)
}

func (rs *ResourceServer) Counts() (calls, prm int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.calls, rs.prm
}

// Refreshes is the number of refresh grants honoured.
func (a *AuthServer) Refreshes() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.Refreshed
}

// Tokens is every access and refresh token the server handed out.
func (a *AuthServer) Tokens() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.IssuedAll...)
}

// Authorize plays the user's browser: it opens authURL logged in at the
// authorization server as user, follows nothing, and returns what the
// redirect carries back.
func Authorize(t testing.TB, authURL, user string) mcphost.Callback {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, authURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Test-User", user)
	browser := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := browser.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || err != nil {
		t.Fatalf("authorization server answered %d %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	q := loc.Query()
	return mcphost.Callback{State: q.Get("state"), Code: q.Get("code"), Iss: q.Get("iss"), Error: q.Get("error")}
}

// NewClock returns a clock standing at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }
