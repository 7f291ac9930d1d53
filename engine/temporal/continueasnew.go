package temporal

import (
	"fmt"

	"go.temporal.io/sdk/workflow"
)

// Temporal's history warning: past either bound the server warns, and a
// workflow that keeps going is eventually terminated (at 51,200 events or
// 50 MB).
const (
	HistoryWarnEvents = 10240
	HistoryWarnBytes  = 10 << 20
)

// ContinueAsNewPolicy says when a workflow starts a fresh run (same
// workflow id, new run id, empty history) carrying only a compact state.
type ContinueAsNewPolicy struct {
	// MaxEvents and MaxBytes: continue as new once the current run's
	// history reaches either (defaults: 4,000 events and 4 MiB, well below
	// Temporal's warning, leaving room for the step in flight).
	MaxEvents int
	MaxBytes  int
}

// DefaultContinueAsNewPolicy is the policy the engine runs with.
func DefaultContinueAsNewPolicy() ContinueAsNewPolicy {
	return ContinueAsNewPolicy{MaxEvents: 4000, MaxBytes: 4 << 20}
}

// Validate refuses a policy that would let a run reach the warning.
func (p ContinueAsNewPolicy) Validate() error {
	if p.MaxEvents <= 0 || p.MaxEvents > HistoryWarnEvents/2 {
		return fmt.Errorf("continue-as-new policy: max events %d is outside 1..%d (half of Temporal's warning)", p.MaxEvents, HistoryWarnEvents/2)
	}
	if p.MaxBytes <= 0 || p.MaxBytes > HistoryWarnBytes/2 {
		return fmt.Errorf("continue-as-new policy: max bytes %d is outside 1..%d (half of Temporal's warning)", p.MaxBytes, HistoryWarnBytes/2)
	}
	return nil
}

// Due reports whether the workflow of ctx should continue as new now, at a
// step boundary: its history has reached the policy's events or bytes, or
// the server suggests it.
func (p ContinueAsNewPolicy) Due(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetCurrentHistoryLength() >= p.MaxEvents ||
		info.GetCurrentHistorySize() >= p.MaxBytes ||
		info.GetContinueAsNewSuggested()
}
