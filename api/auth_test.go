package api_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agentplane/agentplane/api"
)

// idp is an identity provider: signing keys and a JWKS endpoint.
type idp struct {
	mu   sync.Mutex
	keys map[string]*ecdsa.PrivateKey // kid -> key, published
	hits int
}

func (p *idp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hits++
	var set jose.JSONWebKeySet
	for kid, k := range p.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.PublicKey, KeyID: kid, Algorithm: "ES256", Use: "sig"})
	}
	_ = json.NewEncoder(w).Encode(set)
}

func newKey(t *testing.T) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func sign(t *testing.T, k *ecdsa.PrivateKey, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: k}, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jwt.Signed(s).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestAuthentication: API keys (hashed, revocable) and JWTs verified
// against an issuer's JWKS, with the issuer, audience, expiry, signature,
// algorithm and tenant all checked, and key rotation picked up.
func TestAuthentication(t *testing.T) {
	provider := &idp{keys: map[string]*ecdsa.PrivateKey{"k1": newKey(t)}}
	jwks := httptest.NewServer(provider)
	defer jwks.Close()
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.NoWorkers = true }, config: `
issuers:
  - issuer: https://login.example-bank.in
    jwks_url: ` + jwks.URL + `/jwks.json
    audience: agentplane
    tenant_claim: tenant
    allowed_tenants: [example-bank]
    user_claim: email
    scopes: [runs:read]
`})
	get := func(tok string) int {
		req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs", nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	whoami := func(tok string) api.Tenant {
		req, _ := http.NewRequest("GET", f.http.URL+"/v1/tenant", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tn api.Tenant
		_ = json.NewDecoder(resp.Body).Decode(&tn)
		return tn
	}
	now := time.Now()
	base := func() map[string]any {
		return map[string]any{"iss": "https://login.example-bank.in", "aud": "agentplane", "sub": "u-123", "email": priya,
			"tenant": bankTenant, "exp": now.Add(time.Hour).Unix(), "iat": now.Unix()}
	}
	k1 := provider.keys["k1"]
	good := sign(t, k1, "k1", base())
	if got := get(good); got != 200 {
		t.Fatalf("a valid token: %d", got)
	}
	if tn := whoami(good); tn.Tenant != bankTenant || tn.User != priya || strings.Join(tn.Scopes, " ") != "runs:read" || tn.Via != "jwt:https://login.example-bank.in" {
		t.Fatalf("principal from a token = %+v", tn)
	}
	withScope := base()
	withScope["scope"] = "runs:read runs:write openid"
	if tn := whoami(sign(t, k1, "k1", withScope)); strings.Join(tn.Scopes, " ") != "runs:read runs:write" {
		t.Fatalf("scopes from the token's scope claim = %v", tn.Scopes)
	}
	// The default scopes do not include writing runs.
	req, _ := http.NewRequest("POST", f.http.URL+"/v1/runs", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+good)
	resp, _ := http.DefaultClient.Do(req)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("POST /v1/runs without runs:write: %d", resp.StatusCode)
	}

	mutate := func(f func(m map[string]any)) map[string]any {
		m := base()
		f(m)
		return m
	}
	stranger := newKey(t)
	for name, tok := range map[string]string{
		"expired":            sign(t, k1, "k1", mutate(func(m map[string]any) { m["exp"] = now.Add(-time.Hour).Unix() })),
		"no expiry":          sign(t, k1, "k1", mutate(func(m map[string]any) { delete(m, "exp") })),
		"not yet valid":      sign(t, k1, "k1", mutate(func(m map[string]any) { m["nbf"] = now.Add(time.Hour).Unix() })),
		"wrong audience":     sign(t, k1, "k1", mutate(func(m map[string]any) { m["aud"] = "another-service" })),
		"unknown issuer":     sign(t, k1, "k1", mutate(func(m map[string]any) { m["iss"] = "https://evil.example" })),
		"tenant not allowed": sign(t, k1, "k1", mutate(func(m map[string]any) { m["tenant"] = otherTenant })),
		"no user":            sign(t, k1, "k1", mutate(func(m map[string]any) { delete(m, "email") })),
		"another key":        sign(t, stranger, "k1", base()),
		"unknown kid":        sign(t, stranger, "k9", base()),
		"alg none":           noneToken(t, base()),
		"garbage":            "not.a.token",
		"api key, bad":       "ap_nokey_nosecret",
		"empty":              "",
	} {
		if got := get(tok); got != http.StatusUnauthorized {
			t.Errorf("%s: %d, want 401", name, got)
		}
	}

	// Rotation: a token signed by a newly published key is accepted once
	// the JWKS is fetched again (at most every few seconds).
	k2 := newKey(t)
	provider.mu.Lock()
	provider.keys["k2"] = k2
	provider.mu.Unlock()
	f.clock.Advance(10 * time.Second)
	if got := get(sign(t, k2, "k2", base())); got != 200 {
		t.Fatalf("a token of the rotated-in key: %d", got)
	}

	// API keys: revoked keys and wrong secrets are refused.
	tok, rec, err := api.NewAPIKey(bankTenant, priya, "ci", []string{api.ScopeRunsRead}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := f.p.Store.PutAPIKey(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	if got := get(tok); got != 200 {
		t.Fatalf("a fresh API key: %d", got)
	}
	if got := get(tok[:len(tok)-1] + "x"); got != http.StatusUnauthorized {
		t.Fatalf("a wrong secret: %d", got)
	}
	stored, _ := f.p.Store.GetAPIKey(context.Background(), rec.ID)
	if strings.Contains(tok, string(stored.SecretHash[:])) || strings.Contains(string(stored.SecretHash[:]), tok) {
		t.Fatal("the store holds the key's secret")
	}
	if err := f.p.Store.RevokeAPIKey(context.Background(), rec.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if got := get(tok); got != http.StatusUnauthorized {
		t.Fatalf("a revoked key: %d", got)
	}
	if _, _, err := api.NewAPIKey(bankTenant, priya, "x", []string{"root"}, time.Now()); err == nil {
		t.Fatal("an unknown scope was accepted")
	}
}

// noneToken is an unsigned JWT ("alg": "none").
func noneToken(t *testing.T, claims map[string]any) string {
	h := `{"alg":"none","typ":"JWT"}`
	c, _ := json.Marshal(claims)
	enc := func(b []byte) string { return strings.TrimRight(b64url(b), "=") }
	return enc([]byte(h)) + "." + enc(c) + "."
}

func b64url(b []byte) string { return base64.URLEncoding.EncodeToString(b) }
