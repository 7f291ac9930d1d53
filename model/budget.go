package model

import (
	"errors"
	"fmt"
)

// Budget is a run's input-token and cost bounds together with what the run
// has already used, as the loop computes them from recorded usage. The
// gateway checks it before every call (see Gateway.Complete): a call whose
// estimated prompt would cross a bound is refused before any request is sent.
//
// The zero Budget bounds nothing, so callers that do not budget are unaffected.
type Budget struct {
	// MaxInputTokens bounds the run's input tokens (cached or not);
	// 0 means no bound.
	MaxInputTokens int64 `json:"max_input_tokens,omitempty"`
	// UsedInputTokens is what the run's recorded calls used.
	UsedInputTokens int64 `json:"used_input_tokens,omitempty"`
	// MaxCost bounds the run's cost; the zero Money means no bound.
	MaxCost Money `json:"max_cost,omitzero"`
	// UsedCost is what the run's recorded calls cost, in MaxCost's currency.
	UsedCost Money `json:"used_cost,omitzero"`
	// CostUnknown says an earlier call of the run could not be priced. An
	// unknown cost is not zero: with a cost bound set, the check fails closed.
	CostUnknown bool `json:"cost_unknown,omitempty"`
}

// Bounds of a BudgetError.
const (
	BoundInputTokens = "input_tokens"
	BoundCost        = "cost"
)

// ErrBudgetExceeded is matched (errors.Is) by every *BudgetError.
var ErrBudgetExceeded = errors.New("model call refused: it would cross the run's budget")

// BudgetError is the gateway's refusal of a call, before sending it, because
// the call's estimate would cross one of the run's bounds, or because its
// cost cannot be estimated while a cost bound is set. It is never retryable
// and never fails over: every provider would be refused the same way. The
// loop recognises it with errors.Is(err, ErrBudgetExceeded) or errors.As.
type BudgetError struct {
	// Bound is BoundInputTokens or BoundCost.
	Bound string
	// Limit and Used are the bound and the run's use so far: tokens, or
	// micro-units of Currency.
	Limit, Used int64
	// Estimate is what this call was estimated to add, in the same unit;
	// -1 when it could not be estimated (see Reason).
	Estimate int64
	// Currency is the cost bound's currency ("" for tokens).
	Currency string
	// Alias is the alias the call was refused for.
	Alias string
	// Reason explains a refusal that is not plain arithmetic, such as an
	// alias without a price; empty otherwise.
	Reason string
}

func (e *BudgetError) Error() string {
	unit := func(v int64) string {
		if e.Bound == BoundCost {
			return Money{Micros: v, Currency: e.Currency}.String()
		}
		return fmt.Sprintf("%d tokens", v)
	}
	if e.Reason != "" {
		return fmt.Sprintf("model call to alias %q refused: %s budget (limit %s): %s", e.Alias, e.Bound, unit(e.Limit), e.Reason)
	}
	return fmt.Sprintf("model call to alias %q refused: %s budget would be crossed: used %s + estimated %s > limit %s",
		e.Alias, e.Bound, unit(e.Used), unit(e.Estimate), unit(e.Limit))
}

// Is makes errors.Is(err, ErrBudgetExceeded) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudgetExceeded }

// checkBudget refuses req on alias cfg when its estimate would cross b.
// estTokens is EstimateTokens(req); the cost estimate is the worst case of
// the call: every estimated input token at the dearer of the input and
// cache-write rates (a cache miss that writes the whole prompt) plus
// req.MaxTokens of output. Cache reads only make a call cheaper, so a call
// allowed here cannot cost more than estimated unless the token estimate
// itself is short.
func checkBudget(cfg AliasConfig, req *Request, estTokens int64, b Budget, rates *Rates) error {
	if b.MaxInputTokens > 0 && b.UsedInputTokens+estTokens > b.MaxInputTokens {
		return &BudgetError{Bound: BoundInputTokens, Limit: b.MaxInputTokens, Used: b.UsedInputTokens, Estimate: estTokens, Alias: cfg.Name}
	}
	if b.MaxCost.IsZero() {
		return nil
	}
	refuse := func(reason string) error {
		return &BudgetError{Bound: BoundCost, Limit: b.MaxCost.Micros, Used: b.UsedCost.Micros, Estimate: -1,
			Currency: b.MaxCost.Currency, Alias: cfg.Name, Reason: reason}
	}
	if b.CostUnknown {
		return refuse("the run's cost is unknown (an earlier call could not be priced), so the cost bound fails closed")
	}
	if cfg.Price == nil {
		return refuse(fmt.Sprintf("alias %q has no price, so the call's cost cannot be bounded", cfg.Name))
	}
	worst := *cfg.Price
	worst.InputPerMTok = max(worst.InputPerMTok, worst.CacheWritePerMTok)
	est, err := rates.Convert(worst.Cost(Usage{InputTokens: estTokens, OutputTokens: int64(max(req.MaxTokens, 0))}), b.MaxCost.Currency)
	if err != nil {
		return refuse(err.Error())
	}
	used := b.UsedCost
	if used.IsZero() {
		used.Currency = b.MaxCost.Currency
	}
	total, err := used.Add(est)
	if err != nil {
		return refuse(err.Error())
	}
	if c, err := total.Cmp(b.MaxCost); err != nil {
		return refuse(err.Error())
	} else if c > 0 {
		return &BudgetError{Bound: BoundCost, Limit: b.MaxCost.Micros, Used: used.Micros, Estimate: est.Micros,
			Currency: b.MaxCost.Currency, Alias: cfg.Name}
	}
	return nil
}
