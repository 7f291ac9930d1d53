package model

import (
	"context"
	"slices"
	"sync"
)

// CallRecord is the gateway's account of one Gateway.Complete: the usage and
// cost of the attempt that answered, after any retries and failover. Failed
// attempts carry no usage of their own (a provider that fails returns no
// response), so a call is counted once however many attempts it took.
type CallRecord struct {
	Attribution Attribution
	// RequestedAlias is the alias the caller asked for; Alias, Provider and
	// ModelID say which one answered (a fallback after failover).
	RequestedAlias string
	Alias          string
	Provider       string
	ModelID        string
	Usage          Usage
	Cost           Money
	CostKnown      bool
	// Attempts counts provider calls made, across all aliases tried.
	Attempts  int
	LatencyMS int64
	// Err is the call's failure, or "" when it succeeded. A call refused by
	// the budget check is not recorded: nothing was sent.
	Err string
}

// Meter receives one CallRecord per Gateway.Complete that sent at least one
// request. Record is called from the goroutine that called Complete, after
// the call finished; implementations must be safe for concurrent use and
// should not block.
type Meter interface {
	Record(ctx context.Context, rec CallRecord)
}

// Ledger is an in-memory Meter that keeps every record: the gateway's own
// accounting for tests, benchmarks and `agentplane models test`. Safe for
// concurrent use.
type Ledger struct {
	mu      sync.Mutex
	records []CallRecord
}

// Record appends rec.
func (l *Ledger) Record(_ context.Context, rec CallRecord) {
	l.mu.Lock()
	l.records = append(l.records, rec)
	l.mu.Unlock()
}

// Records returns a copy of the records so far, in order.
func (l *Ledger) Records() []CallRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.records)
}

// Totals sums the records of run runID ("" sums every record): the usage,
// the cost in each currency seen, and whether every call's cost was known.
func (l *Ledger) Totals(runID string) (Usage, map[string]Money, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var u Usage
	costs := map[string]Money{}
	known := true
	for _, r := range l.records {
		if runID != "" && r.Attribution.RunID != runID {
			continue
		}
		u.InputTokens += r.Usage.InputTokens
		u.OutputTokens += r.Usage.OutputTokens
		u.CacheCreationTokens += r.Usage.CacheCreationTokens
		u.CacheReadTokens += r.Usage.CacheReadTokens
		if !r.CostKnown {
			known = false
			continue
		}
		c := costs[r.Cost.Currency]
		c.Currency = r.Cost.Currency
		c.Micros += r.Cost.Micros
		costs[r.Cost.Currency] = c
	}
	return u, costs, known
}
