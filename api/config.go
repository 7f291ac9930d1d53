package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentplane/agentplane/engine/temporal"
	"github.com/agentplane/agentplane/retention"
)

// Config is the operator's configuration of the API: tenants' quotas and
// shares of background work, and the identity providers whose JWTs are
// accepted. API keys and webhooks live in the store; group membership comes
// from the platform's directory.
//
//	tenants:
//	  example-bank:
//	    max_concurrent_runs: 200     # queued + running + waiting; 0 = no cap
//	    daily_cost: 5000 INR         # cost of runs created today (UTC)
//	    monthly_cost: 100000 INR
//	    weight: 2                    # share of background workers (default 1)
//	    retention:                   # package retention; omitted: everything kept
//	      payload_ttl: 30d
//	      failed_payload_ttl: 180d
//	      sample_rate: 0.05
//	      metadata_ttl: 13mo
//	issuers:
//	  - issuer: https://login.example-bank.in
//	    jwks_url: https://login.example-bank.in/.well-known/jwks.json
//	    audience: agentplane
//	    tenant: example-bank         # or tenant_claim: tenant
//	    user_claim: email            # default sub
//	store: postgres://agentplane@db.internal/agentplane  # default: the embedded SQLite store
type Config struct {
	Tenants map[string]TenantConfig `yaml:"tenants" json:"tenants"`
	Issuers []IssuerConfig          `yaml:"issuers" json:"issuers"`
	// CORSOrigins are other origins (scheme://host[:port]) whose pages may
	// call the API with credentials; none, the default, turns CORS off.
	CORSOrigins []string `yaml:"cors_origins" json:"cors_origins"`
	// Store is the run store every process of the deployment shares: a
	// postgres:// URL (keep its password in PGPASSWORD or ~/.pgpass, not
	// here), or empty for the embedded SQLite store in the data directory.
	// The --store flag overrides it.
	Store string `yaml:"store" json:"store"`
	// Engine is the engine that executes the runs, the same for every
	// process of the deployment: temporal://HOST:PORT?namespace=N&task_queue=Q
	// for a Temporal server, or empty for the embedded engine on the run
	// store. The --engine flag overrides it.
	Engine string `yaml:"engine" json:"engine"`
}

// TenantConfig holds one tenant's limits.
type TenantConfig struct {
	MaxConcurrentRuns int     `yaml:"max_concurrent_runs" json:"max_concurrent_runs"`
	DailyCost         string  `yaml:"daily_cost" json:"daily_cost"`
	MonthlyCost       string  `yaml:"monthly_cost" json:"monthly_cost"`
	Weight            float64 `yaml:"weight" json:"weight"`
	// Retention is how long the tenant's runs and their payloads are
	// kept (package retention; the zero value keeps everything).
	Retention retention.Config `yaml:"retention" json:"retention"`

	daily, monthly cap
	retention      retention.Policy
}

// cap is a cost limit in micro-units of a currency; zero means none.
type cap struct {
	Micros   int64
	Currency string
}

// IssuerConfig trusts one JWT issuer.
type IssuerConfig struct {
	Issuer   string `yaml:"issuer" json:"issuer"`
	JWKSURL  string `yaml:"jwks_url" json:"jwks_url"`
	Audience string `yaml:"audience" json:"audience"`
	// Tenant binds every token of this issuer to one tenant; otherwise
	// TenantClaim names the claim that carries it (then AllowedTenants, if
	// set, limits which tenants the issuer may speak for).
	Tenant         string   `yaml:"tenant" json:"tenant"`
	TenantClaim    string   `yaml:"tenant_claim" json:"tenant_claim"`
	AllowedTenants []string `yaml:"allowed_tenants" json:"allowed_tenants"`
	// UserClaim names the user (default "sub").
	UserClaim string `yaml:"user_claim" json:"user_claim"`
	// Scopes are granted when the token has no "scope" claim; with one,
	// the token's scopes are used.
	Scopes []string `yaml:"scopes" json:"scopes"`
}

var reCost = regexp.MustCompile(`^([0-9]+)(?:\.([0-9]{1,6}))?\s*([A-Z]{3})$`)

func parseCap(s string) (cap, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return cap{}, nil
	}
	m := reCost.FindStringSubmatch(s)
	if m == nil {
		return cap{}, fmt.Errorf("cost %q: want an amount and a currency, e.g. 5000 INR", s)
	}
	whole, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || whole > 1_000_000_000_000 {
		return cap{}, fmt.Errorf("cost %q is too large", s)
	}
	frac := m[2] + strings.Repeat("0", 6-len(m[2]))
	f, _ := strconv.ParseInt(frac, 10, 64)
	return cap{Micros: whole*1_000_000 + f, Currency: m[3]}, nil
}

// LoadConfig reads a YAML config file.
func LoadConfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseConfig(path, data)
}

// ParseConfig parses and validates a config (strictly: unknown fields are
// errors).
func ParseConfig(name string, data []byte) (*Config, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c Config
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if err := c.validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &c, nil
}

func (c *Config) validate() error {
	var errs []error
	if c.Engine != "" {
		if _, err := temporal.ParseURL(c.Engine); err != nil {
			errs = append(errs, fmt.Errorf("engine: %w (or leave it out for the embedded engine)", err))
		}
	}
	for name, t := range c.Tenants {
		if name == "" {
			errs = append(errs, errors.New("tenants: empty tenant name"))
		}
		var err error
		if t.daily, err = parseCap(t.DailyCost); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: daily_cost: %w", name, err))
		}
		if t.monthly, err = parseCap(t.MonthlyCost); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: monthly_cost: %w", name, err))
		}
		if t.retention, err = t.Retention.Policy(); err != nil {
			errs = append(errs, fmt.Errorf("tenant %s: retention: %w", name, err))
		}
		if t.MaxConcurrentRuns < 0 {
			errs = append(errs, fmt.Errorf("tenant %s: max_concurrent_runs must not be negative", name))
		}
		if t.Weight < 0 {
			errs = append(errs, fmt.Errorf("tenant %s: weight must be positive", name))
		}
		if t.Weight == 0 {
			t.Weight = 1
		}
		c.Tenants[name] = t
	}
	for i, is := range c.Issuers {
		where := fmt.Sprintf("issuers[%d]", i)
		if is.Issuer == "" || is.JWKSURL == "" || is.Audience == "" {
			errs = append(errs, fmt.Errorf("%s: issuer, jwks_url and audience are required", where))
		}
		if (is.Tenant == "") == (is.TenantClaim == "") {
			errs = append(errs, fmt.Errorf("%s: set exactly one of tenant and tenant_claim", where))
		}
		if is.UserClaim == "" {
			c.Issuers[i].UserClaim = "sub"
		}
		for _, s := range is.Scopes {
			if !knownScope(s) {
				errs = append(errs, fmt.Errorf("%s: unknown scope %q", where, s))
			}
		}
	}
	if err := validateOrigins(c.CORSOrigins); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// RetentionPolicies returns the retention policy of every tenant that
// configures one (what retention.Purge applies).
func (c *Config) RetentionPolicies() map[string]retention.Policy {
	out := map[string]retention.Policy{}
	for name, t := range c.Tenants {
		if t.retention != (retention.Policy{}) {
			out[name] = t.retention
		}
	}
	return out
}

// tenant returns a tenant's limits (the zero config: no caps, weight 1).
func (c *Config) tenant(name string) TenantConfig {
	if t, ok := c.Tenants[name]; ok {
		return t
	}
	return TenantConfig{Weight: 1}
}
