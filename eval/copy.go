package eval

import (
	"context"
	"fmt"

	"github.com/agentplane/agentplane/engine"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Stores are what CopyRun reads from and writes to.
type Stores interface {
	store.RunStore
	store.EventStore
	store.BlobStore
}

// CopyRun copies an ended run's record — the run, its events byte for byte
// (so the copy's hash chain verifies) and every blob they name — from one
// store to another. The copy is written as ended from the start, so no
// worker of the target can ever claim it. Evals use it to replay a recorded
// run inside a throwaway environment, and to keep eval runs (--record).
func CopyRun(ctx context.Context, from, to Stores, runID string) error {
	r, err := from.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	if !store.Terminal(r.Status) {
		return fmt.Errorf("copy run %s: it is %s; only an ended run can be copied", runID, r.Status)
	}
	evs, err := from.Events(ctx, runID, 0, 0)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for i := range evs {
		// Only the blobs the platform recorded (not a hash a model or a
		// caller wrote into the log) belong to the run.
		refs, err := trace.BlobRefs(&evs[i])
		if err != nil {
			return fmt.Errorf("copy run %s: seq %d: %w", runID, evs[i].Seq, err)
		}
		for _, c := range refs {
			h := c.Blob
			if seen[h] {
				continue
			}
			seen[h] = true
			sum, err := c.Sum()
			if err != nil {
				return fmt.Errorf("copy run %s: %w", runID, err)
			}
			data, err := from.GetBlob(ctx, sum)
			if err != nil {
				return fmt.Errorf("copy run %s: blob %s: %w", runID, h, err)
			}
			if _, err := to.PutBlob(ctx, data); err != nil {
				return err
			}
		}
	}
	return engine.ImportRun(ctx, to, r, evs)
}
