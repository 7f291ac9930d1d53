package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agentplane/agentplane/store"
)

// Scopes a principal may hold. Every route needs one.
const (
	ScopeRunsRead    = "runs:read"
	ScopeRunsWrite   = "runs:write"
	ScopeApprovals   = "approvals:decide"
	ScopeAgentsRead  = "agents:read"
	ScopeAgentsWrite = "agents:write"
	ScopeWebhooks    = "webhooks:manage"
	// ScopeAdmin administers the tenant: its settings, and starting runs
	// by version number when the tenant requires aliases.
	ScopeAdmin = "tenant:admin"
)

// AllScopes lists every scope.
var AllScopes = []string{ScopeRunsRead, ScopeRunsWrite, ScopeApprovals, ScopeAgentsRead, ScopeAgentsWrite, ScopeWebhooks, ScopeAdmin}

// DefaultScopes are what a key created without scopes holds: every scope
// but tenant:admin, which is only ever granted by name.
var DefaultScopes = []string{ScopeRunsRead, ScopeRunsWrite, ScopeApprovals, ScopeAgentsRead, ScopeAgentsWrite, ScopeWebhooks}

func knownScope(s string) bool { return slices.Contains(AllScopes, s) }

// Principal is who makes a request: a user of a tenant, with the scopes the
// credential grants. Every read and write is scoped to Tenant.
type Principal struct {
	Tenant string
	User   string
	Scopes []string
	// Via names the credential: "api_key:ID" or "jwt:ISSUER", and
	// "session:" before either for a browser session opened with it.
	Via string

	// session is set when the session cookie authenticated the request
	// (CSRF applies); expires is a JWT's expiry (a session opened with it
	// ends by then).
	session *session
	expires *time.Time
}

// Has reports whether the principal holds scope.
func (p *Principal) Has(scope string) bool { return slices.Contains(p.Scopes, scope) }

// apiKeyPrefix starts every API key: "ap_" + key id + "_" + secret.
const apiKeyPrefix = "ap_"

var b32 = base32.StdEncoding.WithPadding(base32.NoPadding)

func randomToken(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return strings.ToLower(b32.EncodeToString(b))
}

// NewAPIKey makes a key for user of tenant. It returns the token, which is
// shown once, and the record to store, which holds only the secret's hash.
// No scopes means DefaultScopes.
func NewAPIKey(tenant, user, name string, scopes []string, now time.Time) (string, *store.APIKey, error) {
	if tenant == "" || user == "" {
		return "", nil, errors.New("api key: tenant and user are required")
	}
	if len(scopes) == 0 {
		scopes = DefaultScopes
	}
	for _, s := range scopes {
		if !knownScope(s) {
			return "", nil, fmt.Errorf("api key: unknown scope %q (known: %s)", s, strings.Join(AllScopes, ", "))
		}
	}
	id, secret := randomToken(10), randomToken(32)
	rec := &store.APIKey{ID: id, Tenant: tenant, User: user, Name: name, SecretHash: sha256.Sum256([]byte(secret)),
		Scopes: slices.Clone(scopes), CreatedAt: now.UTC()}
	return apiKeyPrefix + id + "_" + secret, rec, nil
}

// ErrUnauthenticated: the credential is missing or not valid. It is
// answered with 401 and never says why in detail.
var ErrUnauthenticated = errors.New("missing or invalid credentials")

// authenticator turns a bearer token into a Principal.
type authenticator struct {
	keys    store.APIStore
	issuers map[string]*issuer
	clock   func() time.Time
}

func newAuthenticator(keys store.APIStore, cfg []IssuerConfig, client *http.Client, clock func() time.Time) *authenticator {
	a := &authenticator{keys: keys, issuers: map[string]*issuer{}, clock: clock}
	for _, c := range cfg {
		a.issuers[c.Issuer] = &issuer{cfg: c, client: client, clock: clock}
	}
	return a
}

func (a *authenticator) authenticate(r *http.Request) (*Principal, error) {
	h := r.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok {
		return nil, ErrUnauthenticated
	}
	return a.token(r.Context(), tok)
}

// token authenticates a bearer credential: an API key or a JWT.
func (a *authenticator) token(ctx context.Context, tok string) (*Principal, error) {
	switch {
	case tok == "":
		return nil, ErrUnauthenticated
	case strings.HasPrefix(tok, apiKeyPrefix):
		return a.apiKey(ctx, tok)
	case strings.Count(tok, ".") == 2:
		return a.jwt(ctx, tok)
	}
	return nil, ErrUnauthenticated
}

// Authenticate turns a bearer credential (an API key, or a JWT of an
// issuer the config trusts) into its principal, as the API authenticates
// an Authorization header: ErrUnauthenticated when it is not valid (a
// store that cannot be asked is store.ErrUnavailable). The stdio MCP
// server authenticates its caller's key with it once, at start.
func (s *Server) Authenticate(ctx context.Context, token string) (*Principal, error) {
	return s.auth.token(ctx, token)
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p; PrincipalFrom reads it back. The
// API hands the handler mounted at /mcp its authenticated caller this way.
func WithPrincipal(ctx context.Context, p *Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// PrincipalFrom returns the principal WithPrincipal put in ctx, or nil.
func PrincipalFrom(ctx context.Context) *Principal {
	p, _ := ctx.Value(principalKey{}).(*Principal)
	return p
}

func (a *authenticator) apiKey(ctx context.Context, tok string) (*Principal, error) {
	rest := strings.TrimPrefix(tok, apiKeyPrefix)
	id, secret, ok := strings.Cut(rest, "_")
	if !ok || id == "" || secret == "" {
		return nil, ErrUnauthenticated
	}
	k, err := a.keys.GetAPIKey(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, ErrUnauthenticated
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(secret))
	if subtle.ConstantTimeCompare(sum[:], k.SecretHash[:]) != 1 || !k.RevokedAt.IsZero() {
		return nil, ErrUnauthenticated
	}
	return &Principal{Tenant: k.Tenant, User: k.User, Scopes: k.Scopes, Via: "api_key:" + k.ID}, nil
}

// jwtAlgorithms are the signature algorithms accepted; "none" and HMAC
// (which would make a public key a shared secret) are not among them.
var jwtAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA}

func (a *authenticator) jwt(ctx context.Context, raw string) (*Principal, error) {
	tok, err := jwt.ParseSigned(raw, jwtAlgorithms)
	if err != nil || len(tok.Headers) != 1 {
		return nil, ErrUnauthenticated
	}
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, ErrUnauthenticated
	}
	is := a.issuers[unverified.Issuer]
	if is == nil {
		return nil, ErrUnauthenticated
	}
	keys, err := is.keysFor(ctx, tok.Headers[0].KeyID)
	if err != nil {
		return nil, err
	}
	var std jwt.Claims
	var extra map[string]any
	verified := false
	for _, k := range keys {
		if tok.Claims(k.Key, &std, &extra) == nil {
			verified = true
			break
		}
	}
	if !verified {
		return nil, ErrUnauthenticated
	}
	if std.Expiry == nil {
		return nil, ErrUnauthenticated
	}
	exp := jwt.Expected{Issuer: is.cfg.Issuer, AnyAudience: jwt.Audience{is.cfg.Audience}, Time: a.clock()}
	if err := std.ValidateWithLeeway(exp, 30*time.Second); err != nil {
		return nil, ErrUnauthenticated
	}
	claim := func(name string) string {
		if name == "sub" {
			return std.Subject
		}
		s, _ := extra[name].(string)
		return s
	}
	p := &Principal{User: claim(is.cfg.UserClaim), Via: "jwt:" + is.cfg.Issuer}
	p.Tenant = is.cfg.Tenant
	if p.Tenant == "" {
		p.Tenant = claim(is.cfg.TenantClaim)
		if len(is.cfg.AllowedTenants) > 0 && !slices.Contains(is.cfg.AllowedTenants, p.Tenant) {
			return nil, ErrUnauthenticated
		}
	}
	if p.Tenant == "" || p.User == "" {
		return nil, ErrUnauthenticated
	}
	expiry := std.Expiry.Time()
	p.expires = &expiry
	if s, ok := extra["scope"].(string); ok {
		for _, f := range strings.Fields(s) {
			if knownScope(f) {
				p.Scopes = append(p.Scopes, f)
			}
		}
	} else {
		p.Scopes = slices.Clone(is.cfg.Scopes)
	}
	return p, nil
}

// issuer caches one issuer's JWKS. Keys are refreshed when they are older
// than jwksTTL, and at once (at most every jwksMinRefresh) when a token
// names a key id the cache lacks, so rotation needs no restart.
type issuer struct {
	cfg    IssuerConfig
	client *http.Client
	clock  func() time.Time

	mu      sync.Mutex
	keys    []jose.JSONWebKey
	fetched time.Time
	tried   time.Time
}

const (
	jwksTTL        = 10 * time.Minute
	jwksMinRefresh = 5 * time.Second
)

func (is *issuer) keysFor(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	is.mu.Lock()
	defer is.mu.Unlock()
	now := is.clock()
	match := func() []jose.JSONWebKey {
		var out []jose.JSONWebKey
		for _, k := range is.keys {
			if kid == "" || k.KeyID == kid {
				out = append(out, k)
			}
		}
		return out
	}
	found := match()
	stale := now.Sub(is.fetched) > jwksTTL
	if (len(found) == 0 || stale) && now.Sub(is.tried) >= jwksMinRefresh {
		is.tried = now
		keys, err := is.fetch(ctx)
		if err == nil {
			is.keys, is.fetched = keys, now
			found = match()
		} else if len(is.keys) == 0 {
			return nil, fmt.Errorf("jwks of %s: %w", is.cfg.Issuer, err)
		}
	}
	if len(found) == 0 {
		return nil, ErrUnauthenticated
	}
	return found, nil
}

func (is *issuer) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	u, err := url.Parse(is.cfg.JWKSURL)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "https" && !isLoopbackHost(u.Hostname()) {
		return nil, fmt.Errorf("jwks_url %s: https is required (plain http only on loopback)", is.cfg.JWKSURL)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, is.cfg.JWKSURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := is.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", is.cfg.JWKSURL, resp.Status)
	}
	var set jose.JSONWebKeySet
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&set); err != nil {
		return nil, fmt.Errorf("GET %s: %w", is.cfg.JWKSURL, err)
	}
	var keys []jose.JSONWebKey
	for _, k := range set.Keys {
		if k.IsPublic() && k.Valid() && (k.Use == "" || k.Use == "sig") {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
