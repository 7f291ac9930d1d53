package engine

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/store"
)

// ImportStore is what ImportRun writes.
type ImportStore interface {
	store.RunStore
	store.EventStore
}

// ImportRun writes an ended run's record as it was recorded elsewhere (an
// eval keeping a run, a golden log): the run row as ended from the start,
// so no worker can ever claim it, and its events byte for byte, so the
// copy's hash chain verifies. The blobs the events name must be stored
// first. It is the one way besides Start that a run comes into a store.
func ImportRun(ctx context.Context, st ImportStore, r *store.Run, evs []store.Event) error {
	if !store.Terminal(r.Status) {
		return fmt.Errorf("import run %s: it is %s; only an ended run can be imported", r.ID, r.Status)
	}
	row := &store.Run{ID: r.ID, Tenant: r.Tenant, User: r.User, Agent: r.Agent, AgentVersion: r.AgentVersion, Task: r.Task,
		Mode: r.Mode, Status: r.Status, CreatedAt: r.CreatedAt, Currency: r.Currency, ParentRunID: r.ParentRunID, Bindings: r.Bindings}
	if err := st.CreateRun(ctx, row); err != nil {
		return fmt.Errorf("import run %s: %w", r.ID, err)
	}
	// A run that was never claimed has lease epoch 0, which is what the
	// append is fenced with.
	const batch = 512
	for i := 0; i < len(evs) || i == 0; i += batch {
		part := evs[i:min(i+batch, len(evs))]
		req := store.AppendRequest{RunID: r.ID, Events: part}
		if i+batch >= len(evs) {
			req.Durable = true
			req.Update = &store.RunUpdate{Status: &r.Status, Steps: &r.Steps, InputTokens: &r.InputTokens, OutputTokens: &r.OutputTokens,
				CostMicros: &r.CostMicros, Currency: &r.Currency, CostUnknown: &r.CostUnknown, Result: &r.Result}
		}
		if err := st.Append(ctx, req); err != nil {
			return fmt.Errorf("import run %s: %w", r.ID, err)
		}
	}
	return nil
}
