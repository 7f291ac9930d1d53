// Package secrets is the credential broker. It holds each tenant's secret
// for each connector (a tool server's signing key, an API key, the refresh
// side of a delegation) in a Store, and mints from it, at execution time, a
// short-lived credential scoped to one tool call: one tenant, one user, one
// connector (its audience), one tool, the scopes the call was authorised
// for, the agent version acting, and the call's idempotency key. The
// broker hands the credential to the executor in tool.Call.Credential; it
// never enters the model's context, the event log, the blobs or telemetry,
// and the redactor removes it, and the secret behind it, from anything the
// tool returns.
//
// The embedded default Store is FileStore: one file per secret under a
// directory, each sealed with AES-256-GCM under a 32-byte key taken from the
// environment (AGENTPLANE_SECRETS_KEY) or a key file. An external vault is
// another implementation of Store.
package secrets

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// ErrNotFound is returned (wrapped) for a secret that is not stored.
var ErrNotFound = errors.New("secret not found")

// Store keeps secrets per tenant and connector. Implementations are safe
// for concurrent use; values returned are copies the caller may keep.
type Store interface {
	// Get returns the secret or an error wrapping ErrNotFound.
	Get(ctx context.Context, tenant, connector string) ([]byte, error)
	// Put creates or replaces a secret.
	Put(ctx context.Context, tenant, connector string, value []byte) error
	// Delete removes a secret or returns an error wrapping ErrNotFound.
	Delete(ctx context.Context, tenant, connector string) error
	// List names the connectors that hold a secret for tenant, sorted.
	List(ctx context.Context, tenant string) ([]string, error)
}

var reName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$`)

// CheckName validates a tenant or connector name.
func CheckName(what, s string) error {
	if !reName.MatchString(s) {
		return fmt.Errorf("%s %q: want letters, digits and . _ @ + -, at most 128", what, s)
	}
	return nil
}

// MinSecretBytes is the shortest secret Put accepts: shorter ones are too
// weak to sign with, and too short for the redactor to find reliably.
const MinSecretBytes = 16

// Request describes the one call a credential is for.
type Request struct {
	Tenant string
	User   string
	// Connector is the audience: the tool server the credential is for.
	Connector string
	Tool      string
	// Scopes are what the call was authorised for (the user's scopes
	// intersected with the tool's).
	Scopes []string
	// Agent names the agent version acting, e.g. card-dispute-assistant@7.
	Agent          string
	RunID          string
	IdempotencyKey string
	// TTL is how long the credential lives (capped by the broker).
	TTL time.Duration
}

// Credential is what the executor receives.
type Credential struct {
	Token     string
	ExpiresAt time.Time
	// Redact lists values that must not appear in anything stored or
	// shown: the token, and the secret it was minted from.
	Redact []string
}

// Claims are the contents of a credential.
type Claims struct {
	Issuer    string `json:"iss"`
	Subject   string `json:"sub"` // the user
	Tenant    string `json:"ten"`
	Audience  string `json:"aud"` // the connector
	Tool      string `json:"tool"`
	Scope     string `json:"scope"` // space separated
	Actor     string `json:"act"`   // the agent version acting for the user
	RunID     string `json:"run"`
	ID        string `json:"jti"` // the call's idempotency key
	IssuedAt  int64  `json:"iat"`
	ExpiresAt int64  `json:"exp"`
}

const (
	tokenPrefix = "apc1."
	issuer      = "agentplane"
	// MaxTTL bounds a credential's life.
	MaxTTL = 15 * time.Minute
)

// Broker mints call credentials from a Store.
type Broker struct {
	Store Store
	// Clock is time.Now when nil.
	Clock func() time.Time
}

// Issue mints a credential for one call. The connector's secret must be
// stored for the tenant; otherwise the error wraps ErrNotFound and the
// call must not run.
func (b *Broker) Issue(ctx context.Context, r Request) (*Credential, error) {
	if b == nil || b.Store == nil {
		return nil, errors.New("secrets: no credential store is configured")
	}
	if err := errors.Join(CheckName("tenant", r.Tenant), CheckName("connector", r.Connector)); err != nil {
		return nil, err
	}
	secret, err := b.Store.Get(ctx, r.Tenant, r.Connector)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	if b.Clock != nil {
		now = b.Clock()
	}
	ttl := r.TTL
	if ttl <= 0 || ttl > MaxTTL {
		ttl = MaxTTL
	}
	c := Claims{Issuer: issuer, Subject: r.User, Tenant: r.Tenant, Audience: r.Connector, Tool: r.Tool,
		Scope: strings.Join(r.Scopes, " "), Actor: r.Agent, RunID: r.RunID, ID: r.IdempotencyKey,
		IssuedAt: now.Unix(), ExpiresAt: now.Add(ttl).Unix()}
	tok, err := sign(secret, c)
	if err != nil {
		return nil, err
	}
	return &Credential{Token: tok, ExpiresAt: time.Unix(c.ExpiresAt, 0), Redact: []string{tok, string(secret)}}, nil
}

func sign(secret []byte, c Claims) (string, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	payload := tokenPrefix + base64.RawURLEncoding.EncodeToString(body)
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil)), nil
}

// Verify checks a credential as a tool server does: signed with secret,
// for audience and tool, not expired at now. It returns the claims.
func Verify(secret []byte, token, audience, tool string, now time.Time) (*Claims, error) {
	if !strings.HasPrefix(token, tokenPrefix) {
		return nil, errors.New("not an agentplane call credential")
	}
	dot := strings.LastIndexByte(token, '.')
	if dot <= len(tokenPrefix) {
		return nil, errors.New("malformed credential")
	}
	payload, sig := token[:dot], token[dot+1:]
	got, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return nil, errors.New("malformed credential signature")
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(payload))
	if !hmac.Equal(got, mac.Sum(nil)) {
		return nil, errors.New("credential signature does not verify")
	}
	body, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(payload, tokenPrefix))
	if err != nil {
		return nil, errors.New("malformed credential claims")
	}
	var c Claims
	if err := json.Unmarshal(body, &c); err != nil {
		return nil, errors.New("malformed credential claims")
	}
	switch {
	case c.Issuer != issuer:
		return nil, fmt.Errorf("credential issued by %q", c.Issuer)
	case c.Audience != audience:
		return nil, fmt.Errorf("credential is for %q, not %q", c.Audience, audience)
	case c.Tool != tool:
		return nil, fmt.Errorf("credential is for tool %q, not %q", c.Tool, tool)
	case now.Unix() >= c.ExpiresAt:
		return nil, errors.New("credential has expired")
	}
	return &c, nil
}

// HasScope reports whether the claims grant scope.
func (c *Claims) HasScope(scope string) bool {
	for _, s := range strings.Fields(c.Scope) {
		if s == scope {
			return true
		}
	}
	return false
}
