package model

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// step is one scripted provider behaviour: fail with err, or answer resp
// after streaming deltas.
type step struct {
	deltas []string
	err    error
	resp   *Response
	block  bool // wait for the context to end, then fail with its error
}

// scriptProvider plays steps in order, one per call, and counts calls. It
// streams when used through CompleteStream.
type scriptProvider struct {
	mu    sync.Mutex
	steps []step
	calls int
}

func (p *scriptProvider) next() step {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if len(p.steps) == 0 {
		return step{err: &Error{Err: errors.New("script exhausted")}}
	}
	s := p.steps[0]
	p.steps = p.steps[1:]
	return s
}

func (p *scriptProvider) Complete(ctx context.Context, req *Request) (*Response, error) {
	return p.CompleteStream(ctx, req, func(Delta) {})
}

func (p *scriptProvider) CompleteStream(ctx context.Context, _ *Request, onDelta func(Delta)) (*Response, error) {
	s := p.next()
	for _, d := range s.deltas {
		onDelta(Delta{Text: d})
	}
	if s.block {
		<-ctx.Done()
		return nil, fmt.Errorf("transport: %w", ctx.Err())
	}
	if s.err != nil {
		return nil, s.err
	}
	r := *s.resp
	return &r, nil
}

func (p *scriptProvider) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls
}

// plainProvider hides CompleteStream.
type plainProvider struct{ p *scriptProvider }

func (p plainProvider) Complete(ctx context.Context, req *Request) (*Response, error) {
	return p.p.Complete(ctx, req)
}

var (
	overloaded  = &Error{Retryable: true, StatusCode: 529, Err: errors.New("overloaded_error: Overloaded")}
	serverError = &Error{Retryable: true, StatusCode: 500, Err: errors.New("api_error")}
	connReset   = &Error{Retryable: true, Err: errors.New("read: connection reset by peer")}
	badRequest  = &Error{StatusCode: 400, Err: errors.New("invalid_request_error: messages: empty")}
	haiku       = Price{Currency: "USD", InputPerMTok: 100_000, OutputPerMTok: 500_000, CacheWritePerMTok: 125_000, CacheReadPerMTok: 10_000}
)

func answer(text string, u Usage) *Response {
	return &Response{Content: []Part{{Type: PartText, Text: text}}, StopReason: StopEndTurn, Usage: u}
}

func rateLimited(after time.Duration) *Error {
	return &Error{Retryable: true, StatusCode: 429, RetryAfter: after, Err: errors.New("rate_limit_error")}
}

type policyFixture struct {
	g       *Gateway
	primary *scriptProvider
	backup  *scriptProvider
	ledger  *Ledger
	mu      sync.Mutex
	sleeps  []time.Duration
}

func (f *policyFixture) waits() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Duration(nil), f.sleeps...)
}

// newPolicyGateway has alias "main" on provider "primary" (priced like
// Sonnet, falling back to "backup") and "backup" on provider "secondary"
// (priced like Haiku); sleeps are recorded, not slept; jitter is always 0.5.
func newPolicyGateway(t *testing.T, primary, backup []step, edit func(*GatewayOptions)) *policyFixture {
	t.Helper()
	f := &policyFixture{primary: &scriptProvider{steps: primary}, backup: &scriptProvider{steps: backup}, ledger: &Ledger{}}
	rates, err := NewRates(Rate{From: "USD", To: "INR", Micros: 88_000_000})
	if err != nil {
		t.Fatal(err)
	}
	o := GatewayOptions{
		Providers: map[string]Provider{"primary": f.primary, "secondary": f.backup},
		Aliases: []AliasConfig{
			{Name: "main", Provider: "primary", ModelID: "sonnet-5", Price: &sonnet, MaxTokens: 1000, Fallback: "backup"},
			{Name: "backup", Provider: "secondary", ModelID: "haiku-5.5", Price: &haiku, MaxTokens: 1000},
			{Name: "solo", Provider: "primary", ModelID: "sonnet-5", Price: &sonnet, MaxTokens: 1000},
			{Name: "unpriced", Provider: "primary", ModelID: "mystery"},
		},
		Rates: rates,
		Meter: f.ledger,
		Sleep: func(_ context.Context, d time.Duration) error {
			f.mu.Lock()
			f.sleeps = append(f.sleeps, d)
			f.mu.Unlock()
			return nil
		},
		Rand: func() float64 { return 0.5 },
	}
	if edit != nil {
		edit(&o)
	}
	f.g, err = NewGateway(o)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestGatewayRetriesRetryableFailures(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails []error
		waits []time.Duration
	}{
		// Retry-After is honoured: never earlier, at most a tenth later.
		{"429 with Retry-After", []error{rateLimited(3 * time.Second), rateLimited(2 * time.Second)}, []time.Duration{3150 * time.Millisecond, 2100 * time.Millisecond}},
		// Backoff without Retry-After: equal jitter over 1s, then 2s.
		{"529 overloaded", []error{overloaded, overloaded}, []time.Duration{750 * time.Millisecond, 1500 * time.Millisecond}},
		{"5xx", []error{serverError}, []time.Duration{750 * time.Millisecond}},
		{"connection error", []error{connReset, connReset}, []time.Duration{750 * time.Millisecond, 1500 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var steps []step
			for _, err := range tc.fails {
				steps = append(steps, step{err: err})
			}
			steps = append(steps, step{resp: answer("done", Usage{InputTokens: 1000, OutputTokens: 100})})
			f := newPolicyGateway(t, steps, nil, nil)
			res, err := f.g.Complete(t.Context(), "main", &Request{}, Attribution{RunID: "run-1"})
			if err != nil {
				t.Fatal(err)
			}
			if res.Attempts != len(tc.fails)+1 || res.Alias != "main" {
				t.Errorf("attempts %d alias %q, want %d on main", res.Attempts, res.Alias, len(tc.fails)+1)
			}
			if got := f.waits(); fmt.Sprint(got) != fmt.Sprint(tc.waits) {
				t.Errorf("waits %v, want %v", got, tc.waits)
			}
			// Counted once: the answering attempt's usage, at its price.
			if res.Usage != (Usage{InputTokens: 1000, OutputTokens: 100}) || res.Cost != (Money{3000, "USD"}) {
				t.Errorf("usage %+v cost %v", res.Usage, res.Cost)
			}
			recs := f.ledger.Records()
			if len(recs) != 1 || recs[0].Attempts != len(tc.fails)+1 || recs[0].Usage != res.Usage || recs[0].Err != "" {
				t.Fatalf("ledger %+v, want one record of the answering attempt", recs)
			}
			if u, costs, known := f.ledger.Totals("run-1"); u.InputTokens != 1000 || costs["USD"].Micros != 3000 || !known {
				t.Errorf("ledger totals %+v %v %v", u, costs, known)
			}
		})
	}
}

func TestGatewayBackoffGrowsAndCaps(t *testing.T) {
	var steps []step
	for range 6 {
		steps = append(steps, step{err: overloaded})
	}
	f := newPolicyGateway(t, steps, nil, func(o *GatewayOptions) {
		o.Retry = RetryPolicy{MaxAttempts: 7, BaseDelay: time.Second, MaxDelay: 5 * time.Second}
		o.Rand = func() float64 { return 0 } // the lower end of each jitter window
	})
	f.backup.steps = nil
	_, err := f.g.Complete(t.Context(), "solo", &Request{}, Attribution{})
	if err == nil {
		t.Fatal("succeeded with an exhausted script")
	}
	// Windows [d/2, d) for d = 1s, 2s, 4s, then capped at 5s.
	want := []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 2500 * time.Millisecond, 2500 * time.Millisecond, 2500 * time.Millisecond}
	if got := f.waits(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("waits %v, want %v", got, want)
	}
}

func TestGatewayNonRetryableReturnsAtOnce(t *testing.T) {
	for _, err := range []error{badRequest, &Error{StatusCode: 401, Err: errors.New("authentication_error")}, errors.New("unclassified")} {
		f := newPolicyGateway(t, []step{{err: err}, {resp: answer("late", Usage{InputTokens: 1})}}, []step{{resp: answer("backup", Usage{InputTokens: 1})}}, nil)
		_, got := f.g.Complete(t.Context(), "main", &Request{}, Attribution{})
		if !errors.Is(got, err) || IsRetryable(got) {
			t.Errorf("error %v: got %v, want it unretryable and wrapped", err, got)
		}
		if f.primary.count() != 1 || f.backup.count() != 0 || len(f.waits()) != 0 {
			t.Errorf("error %v: %d primary calls, %d backup calls, waits %v; want one call and no failover", err, f.primary.count(), f.backup.count(), f.waits())
		}
		if recs := f.ledger.Records(); len(recs) != 1 || recs[0].Err == "" || recs[0].Attempts != 1 {
			t.Errorf("ledger %+v", recs)
		}
	}
}

func TestGatewayFailsOverAfterRetries(t *testing.T) {
	f := newPolicyGateway(t,
		[]step{{err: overloaded}, {err: serverError}, {err: overloaded}},
		[]step{{resp: answer("from backup", Usage{InputTokens: 1_000_000, OutputTokens: 1000})}}, nil)
	res, err := f.g.Complete(t.Context(), "main", &Request{}, Attribution{RunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Alias != "backup" || res.ModelID != "haiku-5.5" || res.Attempts != 4 {
		t.Errorf("answered by %q/%q after %d attempts, want backup/haiku-5.5 after 4", res.Alias, res.ModelID, res.Attempts)
	}
	// Priced at the fallback's rates, counted once.
	if res.Cost != (Money{100_500, "USD"}) {
		t.Errorf("cost %v, want 0.100500 USD", res.Cost)
	}
	recs := f.ledger.Records()
	if len(recs) != 1 || recs[0].RequestedAlias != "main" || recs[0].Alias != "backup" || recs[0].Provider != "secondary" || recs[0].Cost != res.Cost {
		t.Errorf("ledger %+v", recs)
	}
}

func TestGatewayFailsOverWhenRetryAfterTooLong(t *testing.T) {
	f := newPolicyGateway(t, []step{{err: rateLimited(10 * time.Minute)}}, []step{{resp: answer("ok", Usage{InputTokens: 5})}}, nil)
	res, err := f.g.Complete(t.Context(), "main", &Request{}, Attribution{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Alias != "backup" || len(f.waits()) != 0 || f.primary.count() != 1 {
		t.Errorf("alias %q waits %v primary calls %d; want immediate failover", res.Alias, f.waits(), f.primary.count())
	}
}

func TestGatewayAllAliasesFail(t *testing.T) {
	f := newPolicyGateway(t,
		[]step{{err: overloaded}, {err: overloaded}, {err: overloaded}},
		[]step{{err: serverError}, {err: serverError}, {err: connReset}}, nil)
	_, err := f.g.Complete(t.Context(), "main", &Request{}, Attribution{})
	if !errors.Is(err, connReset) || !IsRetryable(err) {
		t.Fatalf("error %v: want the last failure, still retryable for the caller", err)
	}
	if !strings.Contains(err.Error(), `alias "backup"`) || !strings.Contains(err.Error(), "3 attempts failed") {
		t.Errorf("error %q should say which alias failed last and how often", err)
	}
	if recs := f.ledger.Records(); len(recs) != 1 || recs[0].Attempts != 6 || recs[0].Usage != (Usage{}) {
		t.Errorf("ledger %+v, want one failed record of 6 attempts and no usage", recs)
	}
}

func TestGatewayAttemptTimeoutIsRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPolicyGateway(t, []step{{block: true}, {resp: answer("second time", Usage{InputTokens: 3})}}, nil, func(o *GatewayOptions) {
			o.AttemptTimeout = 10 * time.Second
			o.Sleep = nil // the real timer, on the bubble's fake clock
		})
		res, err := f.g.Complete(t.Context(), "solo", &Request{}, Attribution{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Attempts != 2 || res.Response.Text() != "second time" {
			t.Errorf("attempts %d text %q", res.Attempts, res.Response.Text())
		}
	})
}

func TestGatewayAttemptTimeoutExhausted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPolicyGateway(t, []step{{block: true}, {block: true}, {block: true}}, nil, func(o *GatewayOptions) {
			o.AttemptTimeout = time.Second
			o.Sleep = nil
		})
		_, err := f.g.Complete(t.Context(), "solo", &Request{}, Attribution{})
		if !errors.Is(err, ErrAttemptTimeout) || !IsRetryable(err) || errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error %v: want a retryable ErrAttemptTimeout, not the caller's deadline", err)
		}
	})
}

func TestGatewayStopsRetryingAtCallersDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPolicyGateway(t, []step{{err: rateLimited(30 * time.Second)}, {resp: answer("too late", Usage{})}}, nil, func(o *GatewayOptions) {
			o.Sleep = nil
		})
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, err := f.g.Complete(ctx, "solo", &Request{}, Attribution{})
		if err == nil || !strings.Contains(err.Error(), "deadline") || f.primary.count() != 1 {
			t.Fatalf("error %v after %d calls; want to give up at once, naming the deadline", err, f.primary.count())
		}
	})
}

func TestGatewayCanceledWhileWaiting(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newPolicyGateway(t, []step{{err: overloaded}, {resp: answer("never", Usage{})}}, nil, func(o *GatewayOptions) {
			o.Sleep = nil
		})
		ctx, cancel := context.WithCancel(t.Context())
		go func() {
			time.Sleep(100 * time.Millisecond) // inside the first backoff (>= 500ms)
			cancel()
		}()
		_, err := f.g.Complete(ctx, "solo", &Request{}, Attribution{})
		if !errors.Is(err, context.Canceled) || IsRetryable(err) || f.primary.count() != 1 {
			t.Fatalf("error %v after %d calls; want context.Canceled during the wait", err, f.primary.count())
		}
	})
}

func TestGatewayBudgetRefusesBeforeSending(t *testing.T) {
	// 4,000 bytes of prompt: an estimate of 1,000 tokens.
	req := &Request{Messages: []Message{{Role: RoleUser, Content: []Part{{Type: PartText, Text: strings.Repeat("x", 4000)}}}}, MaxTokens: 1000}
	inr := func(rupees float64) Money { return Money{Micros: int64(rupees * 1e6), Currency: "INR"} }
	// Worst case of the call on "main": 1,000 input tokens at the cache-write
	// rate ($2.50/M) + 1,000 output at $10/M = $0.0125 = 1.10 INR.
	for _, tc := range []struct {
		name   string
		alias  string
		budget Budget
		bound  string
		reason string // substring; "" for arithmetic refusals
	}{
		{"tokens would cross", "main", Budget{MaxInputTokens: 10_000, UsedInputTokens: 9_001}, BoundInputTokens, ""},
		{"cost would cross", "main", Budget{MaxCost: inr(150), UsedCost: inr(148.91)}, BoundCost, ""},
		{"unknown price", "unpriced", Budget{MaxCost: inr(150)}, BoundCost, "no price"},
		{"run's cost unknown", "main", Budget{MaxCost: inr(150), CostUnknown: true}, BoundCost, "unknown"},
		{"no exchange rate", "main", Budget{MaxCost: Money{Micros: 1e9, Currency: "EUR"}}, BoundCost, "no exchange rate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPolicyGateway(t, []step{{resp: answer("should not be sent", Usage{})}}, nil, nil)
			_, err := f.g.Complete(t.Context(), tc.alias, req, Attribution{Budget: tc.budget})
			var be *BudgetError
			if !errors.Is(err, ErrBudgetExceeded) || !errors.As(err, &be) {
				t.Fatalf("error %v, want a BudgetError", err)
			}
			if be.Bound != tc.bound || IsRetryable(err) {
				t.Errorf("bound %q retryable %v; want %q, not retryable", be.Bound, IsRetryable(err), tc.bound)
			}
			if tc.reason != "" && !strings.Contains(be.Reason, tc.reason) {
				t.Errorf("reason %q, want it to mention %q", be.Reason, tc.reason)
			}
			if f.primary.count() != 0 || len(f.ledger.Records()) != 0 {
				t.Errorf("%d requests sent and %d recorded; a refused call sends and records nothing", f.primary.count(), len(f.ledger.Records()))
			}
		})
	}
	for _, tc := range []struct {
		name   string
		alias  string
		budget Budget
	}{
		{"no budget", "main", Budget{}},
		{"tokens just fit", "main", Budget{MaxInputTokens: 10_000, UsedInputTokens: 9_000}},
		{"cost just fits", "main", Budget{MaxCost: inr(150), UsedCost: inr(148.9)}},
		{"unknown price without a cost bound", "unpriced", Budget{MaxInputTokens: 1e6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newPolicyGateway(t, []step{{resp: answer("ok", Usage{InputTokens: 1000})}}, nil, nil)
			if _, err := f.g.Complete(t.Context(), tc.alias, req, Attribution{Budget: tc.budget}); err != nil {
				t.Fatalf("refused: %v", err)
			}
		})
	}
}

func TestGatewayFallbackRefusedByBudget(t *testing.T) {
	f := newPolicyGateway(t, []step{{err: overloaded}}, []step{{resp: answer("x", Usage{})}}, func(o *GatewayOptions) {
		o.Retry.MaxAttempts = 1
		o.Aliases[1].Price = nil // the backup cannot be priced
	})
	_, err := f.g.Complete(t.Context(), "main", &Request{}, Attribution{Budget: Budget{MaxCost: Money{Micros: 1e9, Currency: "USD"}}})
	if !errors.Is(err, overloaded) || !strings.Contains(err.Error(), `fallback "backup" not tried`) {
		t.Fatalf("error %v: want the primary's failure and why the fallback was not tried", err)
	}
	if f.backup.count() != 0 {
		t.Error("unpriced fallback was called under a cost budget")
	}
}

func TestNewGatewayRefusesBadFallbacks(t *testing.T) {
	p := ProviderFunc(func(context.Context, *Request) (*Response, error) { return nil, nil })
	for _, tc := range []struct {
		aliases []AliasConfig
		want    string
	}{
		{[]AliasConfig{{Name: "a", Provider: "p", ModelID: "m", Fallback: "nope"}}, `fallback "nope" is not a configured alias`},
		{[]AliasConfig{{Name: "a", Provider: "p", ModelID: "m", Fallback: "b"}, {Name: "b", Provider: "p", ModelID: "m", Fallback: "a"}}, "cycle: a -> b -> a"},
		{[]AliasConfig{{Name: "a", Provider: "p", ModelID: "m", Fallback: "a"}}, "cycle"},
	} {
		_, err := NewGateway(GatewayOptions{Providers: map[string]Provider{"p": p}, Aliases: tc.aliases})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	_, err := NewGateway(GatewayOptions{Providers: map[string]Provider{"p": p}, Retry: RetryPolicy{MaxAttempts: -1}})
	if err == nil {
		t.Error("negative MaxAttempts accepted")
	}
}

func TestGatewayStreamsDeltasAndResetsOnRetry(t *testing.T) {
	final := answer("Hello world", Usage{InputTokens: 10, OutputTokens: 2})
	f := newPolicyGateway(t, []step{
		{deltas: []string{"Hel"}, err: connReset}, // dropped mid-stream
		{deltas: []string{"Hello", " world"}, resp: final},
	}, nil, nil)
	var got []Delta
	res, err := f.g.CompleteStream(t.Context(), "main", &Request{}, Attribution{}, func(d Delta) { got = append(got, d) })
	if err != nil {
		t.Fatal(err)
	}
	want := []Delta{{Text: "Hel"}, {Reset: true}, {Text: "Hello"}, {Text: " world"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("deltas %+v, want %+v", got, want)
	}
	if res.Usage != final.Usage || res.Attempts != 2 {
		t.Errorf("usage %+v attempts %d", res.Usage, res.Attempts)
	}
	if recs := f.ledger.Records(); len(recs) != 1 || recs[0].Usage != final.Usage {
		t.Errorf("ledger %+v: the dropped attempt must not be counted", recs)
	}
}

func TestGatewayStreamResetOnFinalFailure(t *testing.T) {
	f := newPolicyGateway(t, []step{{deltas: []string{"partial"}, err: badRequest}}, nil, nil)
	var got []Delta
	_, err := f.g.CompleteStream(t.Context(), "main", &Request{}, Attribution{}, func(d Delta) { got = append(got, d) })
	if err == nil {
		t.Fatal("succeeded")
	}
	if fmt.Sprint(got) != fmt.Sprint([]Delta{{Text: "partial"}, {Reset: true}}) {
		t.Errorf("deltas %+v, want the partial text then a reset", got)
	}
}

func TestGatewayStreamFromNonStreamingProvider(t *testing.T) {
	sp := &scriptProvider{steps: []step{{resp: answer("all at once", Usage{InputTokens: 1})}}}
	g, err := NewGateway(GatewayOptions{
		Providers: map[string]Provider{"plain": plainProvider{sp}},
		Aliases:   []AliasConfig{{Name: "a", Provider: "plain", ModelID: "m"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var got []Delta
	if _, err := g.CompleteStream(t.Context(), "a", &Request{}, Attribution{}, func(d Delta) { got = append(got, d) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Text != "all at once" {
		t.Errorf("deltas %+v, want the whole text once", got)
	}
}

func TestRetryAfterHeader(t *testing.T) {
	now := time.Date(2026, 10, 27, 9, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		h    map[string]string
		want time.Duration
	}{
		{nil, 0},
		{map[string]string{"Retry-After": "7"}, 7 * time.Second},
		{map[string]string{"Retry-After": "1.5"}, 1500 * time.Millisecond},
		{map[string]string{"Retry-After": "0"}, 0},
		{map[string]string{"Retry-After": "-3"}, 0},
		{map[string]string{"Retry-After": "soon"}, 0},
		{map[string]string{"Retry-After": "Tue, 27 Oct 2026 09:00:30 GMT"}, 30 * time.Second},
		{map[string]string{"Retry-After": "Tue, 27 Oct 2026 08:00:00 GMT"}, 0},
		{map[string]string{"Retry-After": "99999999999"}, 24 * time.Hour},
		{map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, 250 * time.Millisecond},
	} {
		h := make(map[string][]string)
		for k, v := range tc.h {
			h[k] = []string{v}
		}
		if got := RetryAfter(h, now); got != tc.want {
			t.Errorf("RetryAfter(%v) = %v, want %v", tc.h, got, tc.want)
		}
	}
	for status, want := range map[int]bool{400: false, 401: false, 403: false, 404: false, 408: true, 409: true, 413: false, 422: false, 429: true, 500: true, 502: true, 503: true, 504: true, 529: true} {
		if RetryableStatus(status) != want {
			t.Errorf("RetryableStatus(%d) = %v", status, !want)
		}
	}
}
