package mcphost

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"golang.org/x/oauth2"

	"github.com/agentplane/agentplane/internal/addrpolicy"
	"github.com/agentplane/agentplane/secrets"
)

// Bounds of the OAuth client.
const (
	// maxTokenResponseBytes bounds a token endpoint's answer.
	maxTokenResponseBytes = 64 << 10
	// maxTokenBytes bounds an access or refresh token.
	maxTokenBytes = 8 << 10
	// defaultRefreshSkew: a token expiring sooner than this is refreshed
	// before it is used.
	defaultRefreshSkew = 2 * time.Minute
	// defaultFlowTTL bounds how long a user may take to authorise.
	defaultFlowTTL = 10 * time.Minute
)

// OAuthOptions configure an OAuth client.
type OAuthOptions struct {
	// Store keeps each user's grant sealed (the credential broker's store).
	Store secrets.UserStore
	// Policy judges every address the client reaches (the host's policy:
	// the authorization server is fetched through the same dialer rules
	// and the connector's allowlist as the server itself).
	Policy *addrpolicy.Policy
	// RefreshSkew: tokens expiring sooner are refreshed (default 2 min).
	RefreshSkew time.Duration
	// FlowTTL bounds an authorization in progress (default 10 min).
	FlowTTL time.Duration
	Clock   func() time.Time
}

// OAuth obtains, keeps and refreshes per-user OAuth 2.1 tokens for
// connectors with auth oauth. A user connects once per connector
// (Start, then Finish with the authorization server's answer); each
// token is requested for that one server (RFC 8707 resource indicator:
// the connector's canonical URL), kept sealed in the Store and handed out
// (Credential) only for that server. Safe for concurrent use.
type OAuth struct {
	o    OAuthOptions
	mu   sync.Mutex
	busy map[[3]string]*sync.Mutex // one refresh at a time per grant
}

// NewOAuth returns an OAuth client over a sealed store.
func NewOAuth(o OAuthOptions) (*OAuth, error) {
	if o.Store == nil {
		return nil, errors.New("mcphost: OAuth needs a store for users' tokens (the credential broker's)")
	}
	if o.Policy == nil {
		o.Policy = &addrpolicy.Policy{}
	}
	if o.RefreshSkew <= 0 {
		o.RefreshSkew = defaultRefreshSkew
	}
	if o.FlowTTL <= 0 {
		o.FlowTTL = defaultFlowTTL
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &OAuth{o: o, busy: map[[3]string]*sync.Mutex{}}, nil
}

// grant is a user's OAuth grant for one connector, as stored (sealed).
type grant struct {
	AccessToken  string    `json:"access_token,omitempty"`
	RefreshToken string    `json:"refresh_token,omitempty"`
	Expiry       time.Time `json:"expiry,omitzero"`
	Scope        string    `json:"scope,omitempty"`
	// Resource is the audience the token was requested for: the
	// connector's canonical URL when the user connected.
	Resource      string `json:"resource,omitempty"`
	Issuer        string `json:"issuer,omitempty"`
	TokenEndpoint string `json:"token_endpoint,omitempty"`
	ClientID      string `json:"client_id,omitempty"`
	// Pending is an authorization started and not yet finished.
	Pending *pending `json:"pending,omitempty"`
}

type pending struct {
	State         string    `json:"state"`
	Verifier      string    `json:"verifier"`
	RedirectURI   string    `json:"redirect_uri"`
	Resource      string    `json:"resource"`
	Issuer        string    `json:"issuer"`
	IssRequired   bool      `json:"iss_required,omitempty"`
	TokenEndpoint string    `json:"token_endpoint"`
	ClientID      string    `json:"client_id"`
	ExpiresAt     time.Time `json:"expires_at"`
}

// CanonicalResource is the resource indicator of a connector's tokens
// (RFC 8707; the MCP server's canonical URI): the endpoint with scheme and
// host in lower case, no default port, no query or fragment, and no
// trailing slash.
func CanonicalResource(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
		return "", fmt.Errorf("%q is not an http or https URL without credentials", endpoint)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return "", fmt.Errorf("%q: an oauth connector's endpoint has no query or fragment (it is the tokens' audience)", endpoint)
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.ToLower(u.Hostname())
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if p := u.Port(); p != "" && !(scheme == "https" && p == "443") && !(scheme == "http" && p == "80") {
		host += ":" + p
	}
	return scheme + "://" + host + strings.TrimSuffix(u.EscapedPath(), "/"), nil
}

// server is what discovery found for a connector.
type server struct {
	resource string
	meta     *oauthex.AuthServerMeta
	scopes   []string
}

// discover asks the connector's server for a token-less initialize, reads
// the protected-resource metadata its 401 names (RFC 9728; the well-known
// URLs when the challenge names none), checks the metadata is for this
// server, and fetches the chosen authorization server's metadata (RFC
// 8414), whose issuer must be the one the resource named. Every fetch
// goes through the connector's allowlist and the address policy.
func (a *OAuth) discover(ctx context.Context, spec *Spec) (*server, error) {
	resource, err := CanonicalResource(spec.Endpoint)
	if err != nil {
		return nil, err
	}
	client := httpClient(a.o.Policy, spec.Allow, nil, "")
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agentplane","version":"1"}}}`
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, spec.Endpoint, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("connector %s: ask the server how to authorise: %w", spec.Name, err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		return nil, fmt.Errorf("connector %s: the server answered a request without a token with HTTP %d, not 401: it does not ask for OAuth (use auth none or service)", spec.Name, resp.StatusCode)
	}
	var metaURLs []string
	if cs, err := oauthex.ParseWWWAuthenticate(resp.Header.Values("WWW-Authenticate")); err == nil {
		for _, c := range cs {
			if c.Scheme == "bearer" && c.Params["resource_metadata"] != "" {
				metaURLs = append(metaURLs, c.Params["resource_metadata"])
			}
		}
	}
	if len(metaURLs) == 0 { // RFC 9728 §3.1: path-inserted, then the root
		u, _ := url.Parse(resource)
		if p := strings.Trim(u.EscapedPath(), "/"); p != "" {
			metaURLs = append(metaURLs, u.Scheme+"://"+u.Host+"/.well-known/oauth-protected-resource/"+p)
		}
		metaURLs = append(metaURLs, u.Scheme+"://"+u.Host+"/.well-known/oauth-protected-resource")
	}
	var prm *oauthex.ProtectedResourceMetadata
	var errs []error
	for _, mu := range metaURLs[:min(len(metaURLs), 2)] {
		if prm, err = oauthex.GetProtectedResourceMetadata(ctx, mu, resource, client); err == nil {
			break
		}
		errs = append(errs, err)
	}
	if prm == nil {
		return nil, fmt.Errorf("connector %s: protected-resource metadata: %w", spec.Name, errors.Join(errs...))
	}
	issuer := ""
	for _, as := range prm.AuthorizationServers {
		if spec.OAuth.Issuer == "" || issuersEqual(as, spec.OAuth.Issuer) {
			issuer = as
			break
		}
	}
	switch {
	case issuer == "" && spec.OAuth.Issuer != "":
		return nil, fmt.Errorf("connector %s: the server names authorization servers %q, not the connector's issuer %s: refused", spec.Name, prm.AuthorizationServers, spec.OAuth.Issuer)
	case issuer == "":
		return nil, fmt.Errorf("connector %s: the server's metadata names no authorization server", spec.Name)
	}
	meta, err := auth.GetAuthServerMetadata(ctx, issuer, client)
	if err != nil {
		return nil, fmt.Errorf("connector %s: authorization server %s: %w", spec.Name, issuer, err)
	}
	if meta == nil {
		return nil, fmt.Errorf("connector %s: authorization server %s publishes no metadata", spec.Name, issuer)
	}
	if !slices.Contains(meta.CodeChallengeMethodsSupported, "S256") {
		return nil, fmt.Errorf("connector %s: authorization server %s does not support PKCE with S256", spec.Name, issuer)
	}
	for _, e := range []string{meta.AuthorizationEndpoint, meta.TokenEndpoint} {
		if u, err := url.Parse(e); err != nil || (u.Scheme != "https" && !(u.Scheme == "http" && a.o.Policy.Loopback)) || u.Host == "" {
			return nil, fmt.Errorf("connector %s: authorization server %s: endpoint %q is not an https URL", spec.Name, issuer, e)
		}
	}
	scopes := spec.OAuth.Scopes
	if len(scopes) == 0 {
		scopes = prm.ScopesSupported
	}
	return &server{resource: resource, meta: meta, scopes: scopes}, nil
}

func issuersEqual(a, b string) bool { return strings.TrimSuffix(a, "/") == strings.TrimSuffix(b, "/") }

// Start begins connecting a user's account: it discovers the connector's
// authorization server and returns the URL the user opens to authorise
// agentplane (authorization code with PKCE S256, a state bound to this
// user and connector, the resource indicator of this server). The
// authorization server sends the user's browser to redirectURI, whose
// code and state Finish takes.
func (a *OAuth) Start(ctx context.Context, tenant, user string, spec *Spec, redirectURI string) (string, error) {
	if spec.Auth != AuthOAuth || spec.OAuth == nil {
		return "", refusedf("connector %s does not use per-user OAuth (auth %s): there is no account to connect", spec.Name, spec.Auth)
	}
	if err := checkRedirect(redirectURI); err != nil {
		return "", err
	}
	srv, err := a.discover(ctx, spec)
	if err != nil {
		return "", err
	}
	state := make([]byte, 32)
	if _, err := rand.Read(state); err != nil {
		return "", err
	}
	p := &pending{State: base64.RawURLEncoding.EncodeToString(state), Verifier: oauth2.GenerateVerifier(), RedirectURI: redirectURI,
		Resource: srv.resource, Issuer: srv.meta.Issuer, IssRequired: srv.meta.AuthorizationResponseIssParameterSupported,
		TokenEndpoint: srv.meta.TokenEndpoint, ClientID: spec.OAuth.ClientID, ExpiresAt: a.o.Clock().Add(a.o.FlowTTL)}
	g, err := a.load(ctx, tenant, user, spec.Name)
	if err != nil && !errors.Is(err, secrets.ErrNotFound) {
		return "", err
	}
	if g == nil {
		g = &grant{}
	}
	g.Pending = p
	if err := a.save(ctx, tenant, user, spec.Name, g); err != nil {
		return "", err
	}
	u, err := url.Parse(srv.meta.AuthorizationEndpoint)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("response_type", "code")
	q.Set("client_id", spec.OAuth.ClientID)
	q.Set("redirect_uri", redirectURI)
	q.Set("state", p.State)
	q.Set("code_challenge", oauth2.S256ChallengeFromVerifier(p.Verifier))
	q.Set("code_challenge_method", "S256")
	q.Set("resource", srv.resource)
	if len(srv.scopes) > 0 {
		q.Set("scope", strings.Join(srv.scopes, " "))
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func checkRedirect(redirectURI string) error {
	u, err := url.Parse(redirectURI)
	if err == nil && u.Host != "" && u.Fragment == "" && u.User == nil &&
		(u.Scheme == "https" || (u.Scheme == "http" && isLoopbackHost(u.Hostname()))) {
		return nil
	}
	return refusedf("redirect URI %q: want an https URL, or http on a loopback address, without fragment", redirectURI)
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || h == "127.0.0.1" || h == "::1" || strings.HasPrefix(h, "127.")
}

// ErrFlowRefused is wrapped by Start and Finish when a connection cannot
// go on as asked (no flow in progress, another user's state, a late
// answer, a mix-up, a connector without OAuth): the user starts again.
// Other errors are the servers' or the platform's.
var ErrFlowRefused = errors.New("account connection refused")

type flowErr struct{ msg string }

func (e *flowErr) Error() string        { return e.msg }
func (e *flowErr) Is(target error) bool { return target == ErrFlowRefused }

func refusedf(format string, a ...any) error { return &flowErr{msg: fmt.Sprintf(format, a...)} }

// Callback is what the authorization server sent to the redirect URI.
type Callback struct {
	State, Code string
	// Iss is the issuer the answer names (RFC 9207), when it names one.
	Iss string
	// Error is the authorization server's error code, when it refused.
	Error string
}

// Finish completes the connection Start began for the same user and
// connector: the state must be the one issued to them (once, before it
// expires), the answer's issuer the authorization server's, and the code
// is exchanged with the PKCE verifier for a token for this server alone,
// which is stored sealed.
func (a *OAuth) Finish(ctx context.Context, tenant, user string, spec *Spec, cb Callback) error {
	if spec.Auth != AuthOAuth || spec.OAuth == nil {
		return refusedf("connector %s does not use per-user OAuth (auth %s): there is no account to connect", spec.Name, spec.Auth)
	}
	g, err := a.load(ctx, tenant, user, spec.Name)
	if errors.Is(err, secrets.ErrNotFound) || (err == nil && g.Pending == nil) {
		return refusedf("connector %s: no authorization in progress for user %s; start again (agentplane connectors connect %s)", spec.Name, user, spec.Name)
	}
	if err != nil {
		return err
	}
	p := g.Pending
	g.Pending = nil // one use, whatever happens next
	if err := a.save(ctx, tenant, user, spec.Name, g); err != nil {
		return err
	}
	switch {
	case subtle.ConstantTimeCompare([]byte(cb.State), []byte(p.State)) != 1:
		return refusedf("connector %s: the authorization answer's state is not the one issued to user %s; start again", spec.Name, user)
	case !a.o.Clock().Before(p.ExpiresAt):
		return refusedf("connector %s: the authorization took longer than %s; start again", spec.Name, a.o.FlowTTL)
	case cb.Error != "":
		return refusedf("connector %s: the authorization server refused: %.200q", spec.Name, cb.Error)
	case cb.Iss != "" && !issuersEqual(cb.Iss, p.Issuer), cb.Iss == "" && p.IssRequired:
		return refusedf("connector %s: the authorization answer names issuer %q, not %s: refused (mix-up)", spec.Name, cb.Iss, p.Issuer)
	case cb.Code == "" || len(cb.Code) > 4096:
		return refusedf("connector %s: the authorization answer has no code", spec.Name)
	}
	if resource, err := CanonicalResource(spec.Endpoint); err != nil || resource != p.Resource || spec.OAuth.ClientID != p.ClientID {
		return refusedf("connector %s changed while user %s was authorising; start again", spec.Name, user)
	}
	tok, err := a.tokenRequest(ctx, spec, p.TokenEndpoint, url.Values{"grant_type": {"authorization_code"}, "code": {cb.Code},
		"redirect_uri": {p.RedirectURI}, "client_id": {p.ClientID}, "code_verifier": {p.Verifier}, "resource": {p.Resource}})
	if err != nil {
		return err
	}
	g = &grant{Resource: p.Resource, Issuer: p.Issuer, TokenEndpoint: p.TokenEndpoint, ClientID: p.ClientID}
	tok.apply(g, a.o.Clock())
	return a.save(ctx, tenant, user, spec.Name, g)
}

// Disconnect forgets a user's grant for a connector.
func (a *OAuth) Disconnect(ctx context.Context, tenant, user, connector string) error {
	return a.o.Store.DeleteUser(ctx, tenant, user, connector)
}

// Credential returns the user's access token for the connector's server,
// refreshing it first when it expires within the skew. The grant must be
// for this server (its resource is the connector's canonical URL now, its
// issuer the connector's): a token is never handed out for another.
// Without a usable grant the error wraps secrets.ErrNotConnected and says
// how to connect.
func (a *OAuth) Credential(ctx context.Context, tenant, user string, spec *Spec) (*secrets.Credential, error) {
	if spec.Auth != AuthOAuth || spec.OAuth == nil {
		return nil, fmt.Errorf("connector %s does not use per-user OAuth", spec.Name)
	}
	if user == "" {
		return nil, fmt.Errorf("connector %s acts as a user, and no user is named: %w", spec.Name, secrets.ErrNotConnected)
	}
	l := a.lock(tenant, user, spec.Name)
	l.Lock()
	defer l.Unlock()
	g, err := a.load(ctx, tenant, user, spec.Name)
	if errors.Is(err, secrets.ErrNotFound) || (err == nil && g.AccessToken == "") {
		return nil, notConnected(tenant, user, spec, "has not connected their account")
	}
	if err != nil {
		return nil, err
	}
	resource, err := CanonicalResource(spec.Endpoint)
	switch {
	case err != nil:
		return nil, err
	case g.Resource != resource:
		return nil, notConnected(tenant, user, spec, "connected an account for another server ("+g.Resource+")")
	case g.ClientID != spec.OAuth.ClientID, spec.OAuth.Issuer != "" && !issuersEqual(g.Issuer, spec.OAuth.Issuer):
		return nil, notConnected(tenant, user, spec, "connected through another client or authorization server than the connector's now")
	}
	now := a.o.Clock()
	if !g.Expiry.IsZero() && !now.Add(a.o.RefreshSkew).Before(g.Expiry) {
		if g.RefreshToken == "" {
			return nil, notConnected(tenant, user, spec, "has a token that expires and cannot be refreshed")
		}
		tok, err := a.tokenRequest(ctx, spec, g.TokenEndpoint, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {g.RefreshToken},
			"client_id": {g.ClientID}, "resource": {g.Resource}})
		var oe *oauthError
		if errors.As(err, &oe) && oe.Code == "invalid_grant" {
			_ = a.o.Store.DeleteUser(ctx, tenant, user, spec.Name)
			return nil, notConnected(tenant, user, spec, "has a grant the authorization server no longer honours")
		}
		if err != nil {
			return nil, err
		}
		tok.apply(g, now)
		if err := a.save(ctx, tenant, user, spec.Name, g); err != nil {
			return nil, err
		}
	}
	redact := []string{g.AccessToken}
	if g.RefreshToken != "" {
		redact = append(redact, g.RefreshToken)
	}
	return &secrets.Credential{Token: g.AccessToken, ExpiresAt: g.Expiry, Redact: redact}, nil
}

func notConnected(tenant, user string, spec *Spec, why string) error {
	return fmt.Errorf("connect your account: connector %s acts as you at %s, and user %s %s; run `agentplane connectors connect %s --tenant %s --as %s` (or POST /v1/connectors/%s/oauth:start) and open the link it gives, then try again: %w",
		spec.Name, spec.Endpoint, user, why, spec.Name, tenant, user, spec.Name, secrets.ErrNotConnected)
}

func (a *OAuth) lock(tenant, user, connector string) *sync.Mutex {
	a.mu.Lock()
	defer a.mu.Unlock()
	k := [3]string{tenant, user, connector}
	l := a.busy[k]
	if l == nil {
		l = &sync.Mutex{}
		a.busy[k] = l
	}
	return l
}

func (a *OAuth) load(ctx context.Context, tenant, user, connector string) (*grant, error) {
	b, err := a.o.Store.GetUser(ctx, tenant, user, connector)
	if err != nil {
		return nil, err
	}
	var g grant
	if err := json.Unmarshal(b, &g); err != nil {
		return nil, fmt.Errorf("stored OAuth grant of user %s for connector %s is damaged: %w", user, connector, err)
	}
	return &g, nil
}

func (a *OAuth) save(ctx context.Context, tenant, user, connector string, g *grant) error {
	b, err := json.Marshal(g)
	if err != nil {
		return err
	}
	return a.o.Store.PutUser(ctx, tenant, user, connector, b)
}

// tokenResponse is a token endpoint's answer (RFC 6749 §5.1).
type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
}

func (t *tokenResponse) apply(g *grant, now time.Time) {
	g.AccessToken, g.Scope = t.AccessToken, t.Scope
	g.Expiry = time.Time{}
	if t.ExpiresIn > 0 {
		g.Expiry = now.Add(time.Duration(t.ExpiresIn) * time.Second)
	}
	if t.RefreshToken != "" { // a refresh that rotates nothing keeps the old one
		g.RefreshToken = t.RefreshToken
	}
}

// oauthError is a token endpoint's error answer (RFC 6749 §5.2).
type oauthError struct {
	Code, Description string
}

func (e *oauthError) Error() string {
	return fmt.Sprintf("the authorization server refused: %.64q %.200q", e.Code, e.Description)
}

// tokenRequest posts a grant to the token endpoint through the
// connector's allowlist and checks the answer: a bearer token, bounded.
func (a *OAuth) tokenRequest(ctx context.Context, spec *Spec, endpoint string, form url.Values) (*tokenResponse, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	resp, err := httpClient(a.o.Policy, spec.Allow, nil, "").Do(req)
	if err != nil {
		return nil, fmt.Errorf("connector %s: token endpoint: %w", spec.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponseBytes+1))
	if err != nil {
		return nil, fmt.Errorf("connector %s: token endpoint: %w", spec.Name, err)
	}
	if len(body) > maxTokenResponseBytes {
		return nil, fmt.Errorf("connector %s: the token endpoint's answer is larger than %d bytes", spec.Name, maxTokenResponseBytes)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return nil, fmt.Errorf("connector %s: the token endpoint answered HTTP %d with %q, not JSON", spec.Name, resp.StatusCode, mt)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		_ = json.Unmarshal(body, &e)
		return nil, &oauthError{Code: e.Error, Description: e.Description}
	}
	var t tokenResponse
	if err := json.NewDecoder(bytes.NewReader(body)).Decode(&t); err != nil {
		return nil, fmt.Errorf("connector %s: the token endpoint's answer: %w", spec.Name, err)
	}
	switch {
	case t.AccessToken == "" || len(t.AccessToken) > maxTokenBytes || len(t.RefreshToken) > maxTokenBytes || !printable(t.AccessToken) || !printable(t.RefreshToken):
		return nil, fmt.Errorf("connector %s: the token endpoint returned no usable access token", spec.Name)
	case !strings.EqualFold(t.TokenType, "bearer"):
		return nil, fmt.Errorf("connector %s: the token endpoint returned a %.32q token, not a bearer token", spec.Name, t.TokenType)
	case t.ExpiresIn < 0:
		return nil, fmt.Errorf("connector %s: the token endpoint returned a negative lifetime", spec.Name)
	}
	return &t, nil
}

// printable reports whether s may go into an Authorization header.
func printable(s string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r >= 0x7f })
}
