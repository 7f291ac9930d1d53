package model

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"
)

// AliasConfig binds a stable name that agents use (say "default" or "fast")
// to one model of one provider, with its price.
type AliasConfig struct {
	// Name is what agent definitions refer to.
	Name string
	// Provider is a key of GatewayOptions.Providers.
	Provider string
	// ModelID is the provider's model id, sent as Request.Model.
	ModelID string
	// Price is the model's price; nil means the price is unknown, and calls
	// then report CostKnown false rather than a cost of zero.
	Price *Price
	// MaxTokens is the output limit applied to requests that set none;
	// 0 leaves the request's value (possibly 0) alone.
	MaxTokens int
}

// GatewayOptions configures NewGateway.
type GatewayOptions struct {
	// Providers are the configured providers by name.
	Providers map[string]Provider
	// Aliases are the names agents may call.
	Aliases []AliasConfig
	// Logger receives one record per call; nil discards.
	Logger *slog.Logger
	// Now is the clock used for latency; nil means time.Now.
	Now func() time.Time
}

// Attribution says on whose behalf a call is made, for cost attribution per
// tenant, user and agent, and for tracing a call back to its run and step.
type Attribution struct {
	Tenant       string
	User         string
	Agent        string
	AgentVersion int
	RunID        string
	Step         int
}

// CallResult is the outcome of one Gateway.Complete.
type CallResult struct {
	// Response is the validated answer; nil when the call failed.
	Response *Response
	// Usage is the usage the provider reported (also in Response.Usage).
	Usage Usage
	// Cost is Usage at the alias's price; meaningful only when CostKnown.
	Cost Money
	// CostKnown is false when the alias has no price: an unknown cost is
	// not a cost of zero, and budgets must treat it as such.
	CostKnown bool
	// Alias and ModelID say which model answered.
	Alias   string
	ModelID string
	// LatencyMS is the provider call's wall-clock duration.
	LatencyMS int64
}

// Gateway applies policy over providers: it resolves aliases, prices each
// call and attributes it, and validates what the model answered. This first
// slice calls the provider exactly once; retries and failover will live here
// too, never in a provider. A Gateway is immutable after NewGateway and safe
// for concurrent use.
type Gateway struct {
	providers map[string]Provider
	aliases   map[string]AliasConfig
	names     []string
	log       *slog.Logger
	now       func() time.Time
}

// NewGateway checks the configuration and builds a Gateway. Every alias must
// have a unique non-empty name, name a registered provider, give a model id,
// have a valid price if any, and a non-negative MaxTokens.
func NewGateway(o GatewayOptions) (*Gateway, error) {
	g := &Gateway{
		providers: make(map[string]Provider, len(o.Providers)),
		aliases:   make(map[string]AliasConfig, len(o.Aliases)),
		log:       o.Logger,
		now:       o.Now,
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	for name, p := range o.Providers {
		if p == nil {
			return nil, fmt.Errorf("model gateway: provider %q is nil", name)
		}
		g.providers[name] = p
	}
	for i, a := range o.Aliases {
		switch {
		case a.Name == "":
			return nil, fmt.Errorf("model gateway: aliases[%d]: empty name", i)
		case a.Provider == "":
			return nil, fmt.Errorf("model gateway: alias %q: no provider", a.Name)
		case a.ModelID == "":
			return nil, fmt.Errorf("model gateway: alias %q: no model id", a.Name)
		case a.MaxTokens < 0:
			return nil, fmt.Errorf("model gateway: alias %q: max tokens %d is negative", a.Name, a.MaxTokens)
		}
		if _, dup := g.aliases[a.Name]; dup {
			return nil, fmt.Errorf("model gateway: alias %q defined twice", a.Name)
		}
		if _, ok := g.providers[a.Provider]; !ok {
			return nil, fmt.Errorf("model gateway: alias %q: provider %q is not registered (registered: %s)",
				a.Name, a.Provider, listOrNone(sortedKeys(g.providers)))
		}
		if a.Price != nil {
			if err := a.Price.Validate(); err != nil {
				return nil, fmt.Errorf("model gateway: alias %q: %w", a.Name, err)
			}
			p := *a.Price // keep our own copy: the caller's may change
			a.Price = &p
		}
		g.aliases[a.Name] = a
		g.names = append(g.names, a.Name)
	}
	sort.Strings(g.names)
	return g, nil
}

// Alias returns the configuration of the named alias.
func (g *Gateway) Alias(name string) (AliasConfig, bool) {
	a, ok := g.aliases[name]
	if ok && a.Price != nil {
		p := *a.Price
		a.Price = &p
	}
	return a, ok
}

// Aliases returns the configured alias names, sorted.
func (g *Gateway) Aliases() []string {
	return append([]string(nil), g.names...)
}

// Complete makes one model call through the named alias on behalf of a. It
// sends a copy of req with Model set to the alias's model id (and MaxTokens
// to the alias's limit when req sets none); req itself is not modified.
//
// The answer is checked with ValidateResponse. When the provider fails,
// the error wraps the provider's, keeping its classification (see
// IsRetryable). When the provider answered but the answer is invalid, the
// error wraps ErrInvalidResponse and Complete also returns a CallResult with
// a nil Response and the usage and cost of the call, because the tokens were
// spent. Every call is logged with its attribution, usage and cost.
func (g *Gateway) Complete(ctx context.Context, alias string, req *Request, a Attribution) (*CallResult, error) {
	cfg, ok := g.aliases[alias]
	if !ok {
		return nil, fmt.Errorf("model gateway: %w %q (configured: %s)", ErrUnknownAlias, alias, listOrNone(g.names))
	}
	if req == nil {
		return nil, fmt.Errorf("model gateway: alias %q: nil request", alias)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model gateway: alias %q: %w", alias, err)
	}
	sent := *req
	sent.Model = cfg.ModelID
	if sent.MaxTokens == 0 {
		sent.MaxTokens = cfg.MaxTokens
	}

	start := g.now()
	resp, err := g.providers[cfg.Provider].Complete(ctx, &sent)
	latency := g.now().Sub(start).Milliseconds()

	res := &CallResult{Alias: alias, ModelID: cfg.ModelID, LatencyMS: latency}
	if err == nil && resp == nil {
		err = &Error{Err: errors.New("provider returned neither a response nor an error")}
	}
	if err != nil {
		err = fmt.Errorf("model gateway: alias %q (provider %q, model %q): %w", alias, cfg.Provider, cfg.ModelID, err)
		g.logCall(ctx, cfg, a, res, err)
		return nil, err
	}

	res.Usage = resp.Usage
	if cfg.Price != nil {
		res.Cost, res.CostKnown = cfg.Price.Cost(resp.Usage), true
	}
	if verr := ValidateResponse(resp); verr != nil {
		if res.Usage.InputTokens < 0 || res.Usage.OutputTokens < 0 ||
			res.Usage.CacheCreationTokens < 0 || res.Usage.CacheReadTokens < 0 {
			// Usage itself was malformed: do not report it as spend.
			res.Usage, res.Cost, res.CostKnown = Usage{}, Money{}, false
		}
		err = fmt.Errorf("model gateway: alias %q (provider %q, model %q): %w", alias, cfg.Provider, cfg.ModelID, verr)
		g.logCall(ctx, cfg, a, res, err)
		return res, err
	}
	res.Response = resp
	g.logCall(ctx, cfg, a, res, nil)
	return res, nil
}

func (g *Gateway) logCall(ctx context.Context, cfg AliasConfig, a Attribution, res *CallResult, err error) {
	cost := "unknown"
	if res.CostKnown {
		cost = res.Cost.String()
	}
	attrs := []slog.Attr{
		slog.String("tenant", a.Tenant),
		slog.String("user", a.User),
		slog.String("agent", a.Agent),
		slog.Int("agent_version", a.AgentVersion),
		slog.String("run_id", a.RunID),
		slog.Int("step", a.Step),
		slog.String("alias", cfg.Name),
		slog.String("provider", cfg.Provider),
		slog.String("model", cfg.ModelID),
		slog.Int64("input_tokens", res.Usage.InputTokens),
		slog.Int64("output_tokens", res.Usage.OutputTokens),
		slog.Int64("cache_creation_tokens", res.Usage.CacheCreationTokens),
		slog.Int64("cache_read_tokens", res.Usage.CacheReadTokens),
		slog.String("cost", cost),
		slog.Int64("latency_ms", res.LatencyMS),
	}
	if err != nil {
		attrs = append(attrs, slog.String("error", err.Error()), slog.Bool("retryable", IsRetryable(err)))
		g.log.LogAttrs(ctx, slog.LevelWarn, "model call failed", attrs...)
		return
	}
	g.log.LogAttrs(ctx, slog.LevelInfo, "model call", attrs...)
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
