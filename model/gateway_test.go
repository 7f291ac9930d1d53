package model

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestEstimateTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *Request
		want int64
	}{
		{"nil", nil, 0},
		{"empty", &Request{}, 0},
		{"system 1 byte", &Request{System: "a"}, 1},
		{"system 4 bytes", &Request{System: "abcd"}, 1},
		{"system 5 bytes", &Request{System: "abcde"}, 2},
		{
			"every part counts",
			&Request{
				System: "12345678", // 8
				Messages: []Message{
					{Role: RoleUser, Content: []Part{text("1234")}},                                           // 4
					{Role: RoleAssistant, Content: []Part{toolUse("id-not-counted", "get", `{"a":1}`)}},       // 3 + 7
					{Role: RoleUser, Content: []Part{{Type: PartToolResult, ToolUseID: "x", Text: "result"}}}, // 6
				},
				Tools: []ToolDef{{Name: "get", Description: "gets", InputSchema: json.RawMessage(`{}`)}}, // 3 + 4 + 2
			},
			(8 + 4 + 3 + 7 + 6 + 3 + 4 + 2 + 3) / 4,
		},
	} {
		if got := EstimateTokens(tc.req); got != tc.want {
			t.Errorf("%s: EstimateTokens = %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := EstimateContentTokens([]Part{text("hello"), toolUse("a", "x", `{}`)}); got != 2 {
		t.Errorf("EstimateContentTokens = %d, want 2 (8 bytes)", got)
	}
}

// fixedProvider answers every call with a copy of resp (or err) and records
// the requests it saw.
type fixedProvider struct {
	resp *Response
	err  error

	mu   sync.Mutex
	seen []Request
}

func (p *fixedProvider) Complete(ctx context.Context, req *Request) (*Response, error) {
	p.mu.Lock()
	p.seen = append(p.seen, *req)
	p.mu.Unlock()
	if p.err != nil {
		return nil, p.err
	}
	r := *p.resp
	r.Content = append([]Part(nil), p.resp.Content...)
	return &r, nil
}

// stepClock advances by step on every reading.
func stepClock(step time.Duration) func() time.Time {
	var mu sync.Mutex
	now := time.Date(2026, 10, 27, 9, 0, 0, 0, time.UTC)
	return func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		now = now.Add(step)
		return now
	}
}

func newTestGateway(t *testing.T, p Provider, logs *bytes.Buffer) *Gateway {
	t.Helper()
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewJSONHandler(logs, nil))
	}
	g, err := NewGateway(GatewayOptions{
		Providers: map[string]Provider{"fake": p},
		Aliases: []AliasConfig{
			{Name: "default", Provider: "fake", ModelID: "sonnet-5", Price: &sonnet, MaxTokens: 4096},
			{Name: "unpriced", Provider: "fake", ModelID: "mystery-1"},
		},
		Logger: logger,
		Now:    stepClock(1840 * time.Millisecond),
		Sleep:  func(context.Context, time.Duration) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestNewGatewayRefuses(t *testing.T) {
	p := ProviderFunc(func(context.Context, *Request) (*Response, error) { return nil, nil })
	providers := map[string]Provider{"anthropic": p}
	for _, tc := range []struct {
		name      string
		providers map[string]Provider
		aliases   []AliasConfig
		wantErr   string
	}{
		{"unregistered provider", providers, []AliasConfig{{Name: "a", Provider: "openai", ModelID: "m"}}, `provider "openai" is not registered (registered: anthropic)`},
		{"no providers", nil, []AliasConfig{{Name: "a", Provider: "openai", ModelID: "m"}}, "registered: none"},
		{"duplicate alias", providers, []AliasConfig{{Name: "a", Provider: "anthropic", ModelID: "m"}, {Name: "a", Provider: "anthropic", ModelID: "n"}}, `alias "a" defined twice`},
		{"empty name", providers, []AliasConfig{{Provider: "anthropic", ModelID: "m"}}, "empty name"},
		{"no provider", providers, []AliasConfig{{Name: "a", ModelID: "m"}}, "no provider"},
		{"no model id", providers, []AliasConfig{{Name: "a", Provider: "anthropic"}}, "no model id"},
		{"negative max tokens", providers, []AliasConfig{{Name: "a", Provider: "anthropic", ModelID: "m", MaxTokens: -1}}, "negative"},
		{"bad price", providers, []AliasConfig{{Name: "a", Provider: "anthropic", ModelID: "m", Price: &Price{Currency: "usd"}}}, "upper-case"},
		{"nil provider", map[string]Provider{"x": nil}, nil, "nil"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewGateway(GatewayOptions{Providers: tc.providers, Aliases: tc.aliases})
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("NewGateway error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestGatewayCompleteCostAndAttribution(t *testing.T) {
	p := &fixedProvider{resp: &Response{
		Content:    []Part{text("let me look"), toolUse("toolu_1", "get_ticket", `{"ticket_id":"T-40127"}`)},
		StopReason: "something vendor-specific",
		Usage:      Usage{InputTokens: 600_000, OutputTokens: 7_500},
	}}
	var logs bytes.Buffer
	g := newTestGateway(t, p, &logs)

	req := &Request{Model: "ignored", Messages: []Message{{Role: RoleUser, Content: []Part{text("hi")}}}}
	att := Attribution{Tenant: "bank", User: "u-7", Agent: "card-dispute", AgentVersion: 3, RunID: "run-1", Step: 4}
	res, err := g.Complete(t.Context(), "default", req, att)
	if err != nil {
		t.Fatal(err)
	}

	if res.Cost != (Money{1_275_000, "USD"}) || !res.CostKnown {
		t.Errorf("cost = %v known=%v, want 1.275000 USD known", res.Cost, res.CostKnown)
	}
	if res.Alias != "default" || res.ModelID != "sonnet-5" || res.LatencyMS != 1840 {
		t.Errorf("result = %+v", res)
	}
	if res.Usage != res.Response.Usage || res.Usage.InputTokens != 600_000 {
		t.Errorf("usage = %+v", res.Usage)
	}
	if res.Response.StopReason != StopToolUse {
		t.Errorf("stop reason %q was not normalised to tool_use", res.Response.StopReason)
	}
	// The provider saw the model id and the alias's max tokens; the caller's
	// request is untouched.
	if got := p.seen[0]; got.Model != "sonnet-5" || got.MaxTokens != 4096 {
		t.Errorf("provider saw model %q max tokens %d", got.Model, got.MaxTokens)
	}
	if req.Model != "ignored" || req.MaxTokens != 0 {
		t.Errorf("caller's request modified: %+v", req)
	}

	var rec map[string]any
	if err := json.Unmarshal(logs.Bytes(), &rec); err != nil {
		t.Fatalf("log is not one JSON record: %v\n%s", err, logs.String())
	}
	for k, want := range map[string]any{
		"msg": "model call", "tenant": "bank", "user": "u-7", "agent": "card-dispute",
		"agent_version": 3.0, "run_id": "run-1", "step": 4.0, "alias": "default",
		"provider": "fake", "model": "sonnet-5", "input_tokens": 600000.0,
		"output_tokens": 7500.0, "cost": "1.275000 USD", "latency_ms": 1840.0,
	} {
		if rec[k] != want {
			t.Errorf("log %s = %v, want %v", k, rec[k], want)
		}
	}
}

func TestGatewayMaxTokensFromRequestWins(t *testing.T) {
	p := &fixedProvider{resp: &Response{Content: []Part{text("ok")}}}
	g := newTestGateway(t, p, nil)
	if _, err := g.Complete(t.Context(), "default", &Request{MaxTokens: 100}, Attribution{}); err != nil {
		t.Fatal(err)
	}
	if p.seen[0].MaxTokens != 100 {
		t.Errorf("max tokens = %d, want the request's 100", p.seen[0].MaxTokens)
	}
}

func TestGatewayUnknownPrice(t *testing.T) {
	p := &fixedProvider{resp: &Response{Content: []Part{text("ok")}, Usage: Usage{InputTokens: 10, OutputTokens: 2}}}
	var logs bytes.Buffer
	g := newTestGateway(t, p, &logs)
	res, err := g.Complete(t.Context(), "unpriced", &Request{}, Attribution{})
	if err != nil {
		t.Fatal(err)
	}
	if res.CostKnown || !res.Cost.IsZero() {
		t.Errorf("unpriced alias: cost %v known=%v, want unknown", res.Cost, res.CostKnown)
	}
	if res.Usage.InputTokens != 10 {
		t.Errorf("usage still reported: %+v", res.Usage)
	}
	if !strings.Contains(logs.String(), `"cost":"unknown"`) {
		t.Errorf("log does not say the cost is unknown: %s", logs.String())
	}
	// A priced alias with zero usage is a known zero, which is different.
	p.resp.Usage = Usage{}
	res, err = g.Complete(t.Context(), "default", &Request{}, Attribution{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.CostKnown || res.Cost != (Money{0, "USD"}) {
		t.Errorf("priced alias with no usage: cost %v known=%v, want a known 0 USD", res.Cost, res.CostKnown)
	}
}

func TestGatewayUnknownAlias(t *testing.T) {
	g := newTestGateway(t, &fixedProvider{}, nil)
	_, err := g.Complete(t.Context(), "turbo", &Request{}, Attribution{})
	if !errors.Is(err, ErrUnknownAlias) {
		t.Fatalf("error = %v, want ErrUnknownAlias", err)
	}
	if !strings.Contains(err.Error(), `"turbo"`) || !strings.Contains(err.Error(), "default, unpriced") {
		t.Errorf("error %q should name the alias and the configured ones", err)
	}
}

func TestGatewayProviderErrors(t *testing.T) {
	rateLimited := &Error{Retryable: true, StatusCode: 429, RetryAfter: 2 * time.Second, Err: errors.New("rate limited")}
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
	}{
		{"retryable", rateLimited, true},
		{"not retryable", &Error{StatusCode: 400, Err: errors.New("bad request")}, false},
		{"plain error", errors.New("boom"), false},
		{"canceled", fmt.Errorf("transport: %w", context.Canceled), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			g := newTestGateway(t, &fixedProvider{err: tc.err}, &logs)
			res, err := g.Complete(t.Context(), "default", &Request{}, Attribution{RunID: "run-9"})
			if err == nil || res != nil {
				t.Fatalf("Complete = %v, %v; want only an error", res, err)
			}
			if !errors.Is(err, tc.err) {
				t.Errorf("error %q does not wrap the provider's", err)
			}
			if IsRetryable(err) != tc.retryable {
				t.Errorf("IsRetryable(%q) = %v, want %v", err, !tc.retryable, tc.retryable)
			}
			if !strings.Contains(err.Error(), `alias "default"`) || !strings.Contains(err.Error(), "sonnet-5") {
				t.Errorf("error %q should name the alias and model", err)
			}
			if !strings.Contains(logs.String(), `"msg":"model call failed"`) || !strings.Contains(logs.String(), `"run_id":"run-9"`) {
				t.Errorf("failure not logged with attribution: %s", logs.String())
			}
		})
	}
	var e *Error
	g := newTestGateway(t, &fixedProvider{err: rateLimited}, nil)
	_, err := g.Complete(t.Context(), "default", &Request{}, Attribution{})
	if !errors.As(err, &e) || e.RetryAfter != 2*time.Second || e.StatusCode != 429 {
		t.Errorf("classification lost through the gateway: %v", err)
	}
}

func TestGatewayNilResponse(t *testing.T) {
	g := newTestGateway(t, ProviderFunc(func(context.Context, *Request) (*Response, error) { return nil, nil }), nil)
	if _, err := g.Complete(t.Context(), "default", &Request{}, Attribution{}); err == nil || !strings.Contains(err.Error(), "neither") {
		t.Errorf("error = %v, want a provider-contract error", err)
	}
}

func TestGatewayInvalidResponseStillCosts(t *testing.T) {
	p := &fixedProvider{resp: &Response{
		Content: []Part{toolUse("a", "delete everything", `{}`)},
		Usage:   Usage{InputTokens: 1_000_000},
	}}
	g := newTestGateway(t, p, nil)
	res, err := g.Complete(t.Context(), "default", &Request{}, Attribution{})
	if !errors.Is(err, ErrInvalidResponse) {
		t.Fatalf("error = %v, want ErrInvalidResponse", err)
	}
	if res == nil || res.Response != nil || res.Cost != (Money{2_000_000, "USD"}) || !res.CostKnown {
		t.Errorf("result = %+v; want no response but the spend of the call", res)
	}
}

func TestGatewayCanceledBeforeCall(t *testing.T) {
	p := &fixedProvider{resp: &Response{Content: []Part{text("ok")}}}
	g := newTestGateway(t, p, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := g.Complete(ctx, "default", &Request{}, Attribution{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error = %v, want context.Canceled", err)
	}
	if len(p.seen) != 0 {
		t.Error("provider called with a canceled context")
	}
}

func TestGatewayAlias(t *testing.T) {
	g := newTestGateway(t, &fixedProvider{}, nil)
	a, ok := g.Alias("default")
	if !ok || a.ModelID != "sonnet-5" || a.Price == nil || *a.Price != sonnet {
		t.Fatalf("Alias(default) = %+v, %v", a, ok)
	}
	a.Price.InputPerMTok = 0 // must not reach the gateway
	if b, _ := g.Alias("default"); b.Price.InputPerMTok != sonnet.InputPerMTok {
		t.Error("Alias returned the gateway's own price")
	}
	if _, ok := g.Alias("nope"); ok {
		t.Error("Alias(nope) found")
	}
	if got := g.Aliases(); strings.Join(got, ",") != "default,unpriced" {
		t.Errorf("Aliases = %v", got)
	}
}

func TestIsRetryable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("x"), false},
		{&Error{Retryable: true}, true},
		{fmt.Errorf("wrapped: %w", &Error{Retryable: true}), true},
		{&Error{Retryable: false}, false},
		{&Error{Retryable: true, Err: context.DeadlineExceeded}, false},
		{context.Canceled, false},
	} {
		if got := IsRetryable(tc.err); got != tc.want {
			t.Errorf("IsRetryable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
	if got := (&Error{StatusCode: 503, Err: errors.New("overloaded")}).Error(); got != "overloaded (status 503)" {
		t.Errorf("Error() = %q", got)
	}
}

func TestGatewayConcurrent(t *testing.T) {
	p := &fixedProvider{resp: &Response{Content: []Part{text("ok")}, Usage: Usage{InputTokens: 1000}}}
	g := newTestGateway(t, p, nil)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			res, err := g.Complete(t.Context(), "default", &Request{}, Attribution{Step: i})
			if err != nil || res.Cost.Micros != 2_000 {
				t.Errorf("call %d: %+v, %v", i, res, err)
			}
		})
	}
	wg.Wait()
}
