package model

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
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
	// Fallback names another alias to fail over to when this alias's
	// provider stays unavailable: a retryable failure that persists through
	// every attempt, or a Retry-After longer than the policy will wait.
	// Non-retryable failures (a bad request, a rejected key) never fail
	// over. The fallback's own fallback is tried next; a cycle is refused
	// by NewGateway. Empty means none.
	Fallback string
}

// RetryPolicy says how the gateway retries one alias's provider.
type RetryPolicy struct {
	// MaxAttempts is the most calls to one alias for one Complete, the first
	// included (default 3; 1 means no retries).
	MaxAttempts int
	// BaseDelay is the backoff before the second attempt; it doubles with
	// each further attempt up to MaxDelay (defaults 1s and 30s). The wait is
	// drawn uniformly from the upper half of that value ("equal jitter"), so
	// that callers failing together do not retry together.
	BaseDelay, MaxDelay time.Duration
	// MaxRetryAfter is the longest provider-requested wait (Retry-After) the
	// gateway honours (default 60s). A provider asking for more is treated
	// as unavailable: no retry, fail over if a fallback is configured.
	MaxRetryAfter time.Duration
}

// DefaultAttemptTimeout bounds one provider call when
// GatewayOptions.AttemptTimeout is 0.
const DefaultAttemptTimeout = 120 * time.Second

// ErrAttemptTimeout is wrapped (inside a retryable *Error) when one provider
// call outlives GatewayOptions.AttemptTimeout while the caller's context is
// still live.
var ErrAttemptTimeout = errors.New("model call attempt timed out")

// GatewayOptions configures NewGateway.
type GatewayOptions struct {
	// Providers are the configured providers by name.
	Providers map[string]Provider
	// Aliases are the names agents may call.
	Aliases []AliasConfig
	// Retry is the retry policy; zero fields take their defaults.
	Retry RetryPolicy
	// AttemptTimeout bounds each provider call (0: DefaultAttemptTimeout;
	// negative: no bound beyond the caller's context).
	AttemptTimeout time.Duration
	// Rates converts a call's estimated cost into the currency of the run's
	// cost budget for the pre-call check; nil converts a currency only to
	// itself (and a budget in another currency then fails closed).
	Rates *Rates
	// Meter receives one record per call that sent a request; nil: none.
	Meter Meter
	// Logger receives one record per call and per failed attempt; nil discards.
	Logger *slog.Logger
	// Now is the clock used for latency and deadlines; nil means time.Now.
	Now func() time.Time
	// Sleep waits d or until ctx is done, returning ctx.Err() in that case;
	// nil means a timer. Tests inject it (or run under testing/synctest).
	Sleep func(ctx context.Context, d time.Duration) error
	// Rand returns a uniformly distributed number in [0, 1) for jitter; nil
	// means math/rand/v2.
	Rand func() float64
}

// Attribution says on whose behalf a call is made, for cost attribution per
// tenant, user and agent, and for tracing a call back to its run and step.
// Budget carries the run's bounds and use for the pre-call check.
type Attribution struct {
	Tenant       string
	User         string
	Agent        string
	AgentVersion int
	RunID        string
	Step         int
	// Budget is checked before the call; the zero Budget bounds nothing.
	Budget Budget
}

// CallResult is the outcome of one Gateway.Complete.
type CallResult struct {
	// Response is the validated answer; nil when the call failed.
	Response *Response
	// Usage is the usage the provider reported for the attempt that
	// answered (also in Response.Usage); failed attempts add nothing.
	Usage Usage
	// Cost is Usage at the answering alias's price; meaningful only when
	// CostKnown.
	Cost Money
	// CostKnown is false when the alias has no price: an unknown cost is
	// not a cost of zero, and budgets must treat it as such.
	CostKnown bool
	// Alias and ModelID say which model answered: the requested alias, or a
	// fallback after failover.
	Alias   string
	ModelID string
	// Attempts counts the provider calls made, across aliases.
	Attempts int
	// LatencyMS is the answering provider call's wall-clock duration.
	LatencyMS int64
}

// Gateway applies policy over providers: it resolves aliases, refuses calls
// that would cross the run's budget, bounds each attempt with a timeout,
// retries retryable failures with jittered backoff (honouring Retry-After),
// fails over to an alias's fallback, prices and attributes each call, and
// validates what the model answered. Providers make exactly one call each
// time they are asked. A Gateway is immutable after NewGateway and safe for
// concurrent use.
type Gateway struct {
	providers map[string]Provider
	aliases   map[string]AliasConfig
	chains    map[string][]string
	names     []string
	retry     RetryPolicy
	timeout   time.Duration
	rates     *Rates
	meter     Meter
	log       *slog.Logger
	now       func() time.Time
	sleep     func(context.Context, time.Duration) error
	rand      func() float64
}

// NewGateway checks the configuration and builds a Gateway. Every alias must
// have a unique non-empty name, name a registered provider, give a model id,
// have a valid price if any, a non-negative MaxTokens, and a fallback (if
// any) that is another configured alias, without cycles.
func NewGateway(o GatewayOptions) (*Gateway, error) {
	g := &Gateway{
		providers: make(map[string]Provider, len(o.Providers)),
		aliases:   make(map[string]AliasConfig, len(o.Aliases)),
		chains:    make(map[string][]string, len(o.Aliases)),
		retry:     o.Retry,
		timeout:   o.AttemptTimeout,
		rates:     o.Rates,
		meter:     o.Meter,
		log:       o.Logger,
		now:       o.Now,
		sleep:     o.Sleep,
		rand:      o.Rand,
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.sleep == nil {
		g.sleep = sleepContext
	}
	if g.rand == nil {
		g.rand = rand.Float64
	}
	if g.timeout == 0 {
		g.timeout = DefaultAttemptTimeout
	}
	r := &g.retry
	switch {
	case r.MaxAttempts < 0, r.BaseDelay < 0, r.MaxDelay < 0, r.MaxRetryAfter < 0:
		return nil, fmt.Errorf("model gateway: retry policy %+v has a negative field", *r)
	}
	if r.MaxAttempts == 0 {
		r.MaxAttempts = 3
	}
	if r.BaseDelay == 0 {
		r.BaseDelay = time.Second
	}
	if r.MaxDelay == 0 {
		r.MaxDelay = 30 * time.Second
	}
	if r.MaxRetryAfter == 0 {
		r.MaxRetryAfter = 60 * time.Second
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
	for _, name := range g.names {
		chain := []string{name}
		for next := g.aliases[name].Fallback; next != ""; next = g.aliases[next].Fallback {
			if _, ok := g.aliases[next]; !ok {
				return nil, fmt.Errorf("model gateway: alias %q: fallback %q is not a configured alias", chain[len(chain)-1], next)
			}
			if slices.Contains(chain, next) {
				return nil, fmt.Errorf("model gateway: alias %q: fallbacks form a cycle: %s -> %s", name, strings.Join(chain, " -> "), next)
			}
			chain = append(chain, next)
		}
		g.chains[name] = chain
	}
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
// Before anything is sent, the prompt's tokens are estimated (EstimateTokens)
// and the call is refused with a *BudgetError (errors.Is ErrBudgetExceeded)
// if it would cross a.Budget. Each attempt is bounded by the attempt
// timeout. A retryable failure (see IsRetryable) is retried after a jittered
// backoff, or after the provider's Retry-After, up to the policy's attempts;
// when the alias stays unavailable the call fails over to its fallback
// alias, if any. A non-retryable failure returns at once. Only the attempt
// that answered is priced and counted, so retries never double-count.
//
// The answer is checked with ValidateResponse. When the provider fails,
// the error wraps the provider's, keeping its classification. When the
// provider answered but the answer is invalid, the error wraps
// ErrInvalidResponse and Complete also returns a CallResult with a nil
// Response and the usage and cost of the call, because the tokens were
// spent. Every call is logged with its attribution, usage and cost, and
// reported to the Meter.
func (g *Gateway) Complete(ctx context.Context, alias string, req *Request, a Attribution) (*CallResult, error) {
	return g.complete(ctx, alias, req, a, nil)
}

// CompleteStream is Complete that also delivers the model's text as it is
// generated: onDelta is called on the calling goroutine with each piece, in
// order (the whole text at once for a provider that does not stream). When
// an attempt that already delivered text fails, onDelta receives a Delta
// with Reset set before the next attempt, and also when the call finally
// fails, so a viewer can discard text that will not be part of the answer.
func (g *Gateway) CompleteStream(ctx context.Context, alias string, req *Request, a Attribution, onDelta func(Delta)) (*CallResult, error) {
	if onDelta == nil {
		onDelta = func(Delta) {}
	}
	return g.complete(ctx, alias, req, a, onDelta)
}

func (g *Gateway) complete(ctx context.Context, alias string, req *Request, a Attribution, onDelta func(Delta)) (*CallResult, error) {
	if _, ok := g.aliases[alias]; !ok {
		return nil, fmt.Errorf("model gateway: %w %q (configured: %s)", ErrUnknownAlias, alias, listOrNone(g.names))
	}
	if req == nil {
		return nil, fmt.Errorf("model gateway: alias %q: nil request", alias)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("model gateway: alias %q: %w", alias, err)
	}
	est := EstimateTokens(req)
	c := &call{g: g, requested: alias, attr: a, onDelta: onDelta}
	var lastErr error
	last := g.aliases[alias]
	for i, name := range g.chains[alias] {
		cfg := g.aliases[name]
		sent := *req
		sent.Model = cfg.ModelID
		if sent.MaxTokens == 0 {
			sent.MaxTokens = cfg.MaxTokens
		}
		if err := checkBudget(cfg, &sent, est, a.Budget, g.rates); err != nil {
			if i == 0 {
				g.log.LogAttrs(ctx, slog.LevelWarn, "model call refused by budget", append(attribution(a), slog.String("alias", name), slog.String("error", err.Error()))...)
				return nil, fmt.Errorf("model gateway: %w", err)
			}
			// The primary's failure is the news; the fallback's refusal is why
			// it did not help.
			lastErr = fmt.Errorf("%w (fallback %q not tried: %v)", lastErr, name, err)
			break
		}
		res, failover, err := c.tryAlias(ctx, cfg, &sent)
		if err == nil || !failover {
			return res, err
		}
		lastErr, last = err, cfg
		if next := i + 1; next < len(g.chains[alias]) {
			g.log.LogAttrs(ctx, slog.LevelWarn, "model alias unavailable; failing over",
				append(attribution(a), slog.String("alias", name), slog.String("fallback", g.chains[alias][next]), slog.String("error", err.Error()))...)
		}
	}
	c.reset()
	g.finish(ctx, c, last, nil, lastErr)
	return nil, lastErr
}

// call is the state of one Complete across attempts and aliases.
type call struct {
	g         *Gateway
	requested string
	attr      Attribution
	onDelta   func(Delta)
	attempts  int
	streamed  bool // text was delivered since the last reset
}

func (c *call) reset() {
	if c.streamed {
		c.onDelta(Delta{Reset: true})
		c.streamed = false
	}
}

// tryAlias makes up to MaxAttempts attempts on one alias. It returns the
// final result, or an error and whether failing over may help.
func (c *call) tryAlias(ctx context.Context, cfg AliasConfig, sent *Request) (*CallResult, bool, error) {
	g := c.g
	wrap := func(err error) error {
		return fmt.Errorf("model gateway: alias %q (provider %q, model %q): %w", cfg.Name, cfg.Provider, cfg.ModelID, err)
	}
	for n := 1; ; n++ {
		c.reset()
		c.attempts++
		start := g.now()
		resp, err := c.attempt(ctx, cfg, sent)
		latency := g.now().Sub(start).Milliseconds()
		if err == nil && resp == nil {
			err = &Error{Err: errors.New("provider returned neither a response nor an error")}
		}
		if err == nil {
			return c.answered(ctx, cfg, resp, latency)
		}
		retryable := IsRetryable(err) && ctx.Err() == nil
		if !retryable {
			err = wrap(err)
			c.reset()
			g.finish(ctx, c, cfg, &CallResult{Alias: cfg.Name, ModelID: cfg.ModelID, LatencyMS: latency}, err)
			return nil, false, err
		}
		if n >= g.retry.MaxAttempts {
			return nil, true, wrap(fmt.Errorf("%d attempts failed, the last: %w", n, err))
		}
		wait, ok := g.backoff(n, err)
		if !ok {
			return nil, true, wrap(fmt.Errorf("provider asked to wait longer than %s: %w", g.retry.MaxRetryAfter, err))
		}
		if dl, has := ctx.Deadline(); has && g.now().Add(wait).After(dl) {
			err = wrap(fmt.Errorf("no time left to retry within the caller's deadline: %w", err))
			c.reset()
			g.finish(ctx, c, cfg, &CallResult{Alias: cfg.Name, ModelID: cfg.ModelID, LatencyMS: latency}, err)
			return nil, false, err
		}
		g.log.LogAttrs(ctx, slog.LevelWarn, "model call attempt failed; retrying",
			append(attribution(c.attr), slog.String("alias", cfg.Name), slog.String("provider", cfg.Provider),
				slog.Int("attempt", n), slog.Duration("wait", wait), slog.String("error", err.Error()))...)
		if serr := g.sleep(ctx, wait); serr != nil {
			err = wrap(fmt.Errorf("gave up waiting to retry (%w) after: %w", serr, err))
			c.reset()
			g.finish(ctx, c, cfg, &CallResult{Alias: cfg.Name, ModelID: cfg.ModelID, LatencyMS: latency}, err)
			return nil, false, err
		}
	}
}

// attempt makes one provider call bounded by the attempt timeout.
func (c *call) attempt(ctx context.Context, cfg AliasConfig, sent *Request) (*Response, error) {
	g := c.g
	actx := ctx
	if g.timeout > 0 {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(ctx, g.timeout)
		defer cancel()
	}
	p := g.providers[cfg.Provider]
	var resp *Response
	var err error
	if sp, ok := p.(StreamingProvider); ok && c.onDelta != nil {
		resp, err = sp.CompleteStream(actx, sent, func(d Delta) {
			if d.Reset || d.Text == "" {
				return
			}
			c.streamed = true
			c.onDelta(d)
		})
	} else {
		resp, err = p.Complete(actx, sent)
	}
	if err != nil && ctx.Err() == nil && errors.Is(actx.Err(), context.DeadlineExceeded) {
		// Our bound, not the caller's: the provider is slow, try again. The
		// provider's error is replaced, not wrapped, because it wraps
		// context.DeadlineExceeded, which IsRetryable treats as final.
		err = &Error{Retryable: true, Err: fmt.Errorf("%w: no answer within %s", ErrAttemptTimeout, g.timeout)}
	}
	return resp, err
}

// answered prices, validates and records a provider's answer.
func (c *call) answered(ctx context.Context, cfg AliasConfig, resp *Response, latency int64) (*CallResult, bool, error) {
	g := c.g
	res := &CallResult{Alias: cfg.Name, ModelID: cfg.ModelID, Attempts: c.attempts, LatencyMS: latency}
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
		err := fmt.Errorf("model gateway: alias %q (provider %q, model %q): %w", cfg.Name, cfg.Provider, cfg.ModelID, verr)
		c.reset()
		g.finish(ctx, c, cfg, res, err)
		return res, false, err
	}
	res.Response = resp
	if c.onDelta != nil && !c.streamed {
		if _, streams := g.providers[cfg.Provider].(StreamingProvider); !streams {
			if t := resp.Text(); t != "" {
				c.onDelta(Delta{Text: t})
			}
		}
	}
	g.finish(ctx, c, cfg, res, nil)
	return res, false, nil
}

// finish logs the call and reports it to the meter. res may be nil when no
// attempt answered.
func (g *Gateway) finish(ctx context.Context, c *call, cfg AliasConfig, res *CallResult, err error) {
	if res == nil {
		res = &CallResult{Alias: cfg.Name, ModelID: cfg.ModelID}
	}
	res.Attempts = c.attempts
	g.logCall(ctx, cfg, c.attr, res, err)
	if g.meter == nil || c.attempts == 0 {
		return
	}
	rec := CallRecord{
		Attribution: c.attr, RequestedAlias: c.requested, Alias: cfg.Name, Provider: cfg.Provider, ModelID: cfg.ModelID,
		Usage: res.Usage, Cost: res.Cost, CostKnown: res.CostKnown, Attempts: c.attempts, LatencyMS: res.LatencyMS,
	}
	if err != nil {
		rec.Err = err.Error()
	}
	g.meter.Record(ctx, rec)
}

// backoff is the wait before attempt n+1 after err, or false when the
// provider asked for a longer wait than the policy allows.
func (g *Gateway) backoff(n int, err error) (time.Duration, bool) {
	var e *Error
	if errors.As(err, &e) && e.RetryAfter > 0 {
		if e.RetryAfter > g.retry.MaxRetryAfter {
			return 0, false
		}
		// Never earlier than asked; up to a tenth later, so that callers
		// told the same instant do not all return at once.
		return e.RetryAfter + time.Duration(g.rand()*float64(e.RetryAfter)/10), true
	}
	d := g.retry.MaxDelay
	if n-1 < 32 {
		if b := g.retry.BaseDelay << (n - 1); b > 0 && b < d {
			d = b
		}
	}
	return d/2 + time.Duration(g.rand()*float64(d/2)), true
}

func sleepContext(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func attribution(a Attribution) []slog.Attr {
	return []slog.Attr{
		slog.String("tenant", a.Tenant),
		slog.String("user", a.User),
		slog.String("agent", a.Agent),
		slog.Int("agent_version", a.AgentVersion),
		slog.String("run_id", a.RunID),
		slog.Int("step", a.Step),
	}
}

func (g *Gateway) logCall(ctx context.Context, cfg AliasConfig, a Attribution, res *CallResult, err error) {
	cost := "unknown"
	if res.CostKnown {
		cost = res.Cost.String()
	}
	attrs := append(attribution(a),
		slog.String("alias", cfg.Name),
		slog.String("provider", cfg.Provider),
		slog.String("model", cfg.ModelID),
		slog.Int64("input_tokens", res.Usage.InputTokens),
		slog.Int64("output_tokens", res.Usage.OutputTokens),
		slog.Int64("cache_creation_tokens", res.Usage.CacheCreationTokens),
		slog.Int64("cache_read_tokens", res.Usage.CacheReadTokens),
		slog.String("cost", cost),
		slog.Int64("latency_ms", res.LatencyMS),
		slog.Int("attempts", res.Attempts),
	)
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
