package retention

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// EraseRequest names what to erase: one run (RunID) or every run of one
// user of the tenant (User), exactly one of them.
type EraseRequest struct {
	Tenant      string
	RunID       string
	User        string
	RequestedBy string
	Reason      string
}

// EraseReport is what an erasure did.
type EraseReport struct {
	// Erasures are the records stored, one per run erased.
	Erasures []*store.Erasure `json:"erasures"`
	// BlobsRemoved counts the payloads whose keys were destroyed;
	// BlobsShared those kept because a run not erased holds the same
	// content (a system prompt, a tool definition).
	BlobsRemoved int   `json:"blobs_removed"`
	Bytes        int64 `json:"bytes"`
	BlobsShared  int   `json:"blobs_shared"`
}

// ErrBadRequest is wrapped by Erase's refusal of a request that names
// neither or both of a run and a user.
var ErrBadRequest = errors.New("erase: name a run or a user")

// Erase erases a run, or every run of a user, of req.Tenant at now: the
// data keys of the payloads no other run keeps are destroyed and their
// objects deleted, every event's payload is replaced (the chain's hashes
// stay), the run's task, result and pending signals go, and an erasure
// record is stored per run. Runs that have not ended are refused, all of
// them before anything is erased (cancel them first). A run of another
// tenant is not found, as one that does not exist.
func Erase(ctx context.Context, st Store, req EraseRequest, now time.Time) (*EraseReport, error) {
	if (req.RunID == "") == (req.User == "") {
		return nil, fmt.Errorf("%w (exactly one of --run and --user)", ErrBadRequest)
	}
	started := time.Now()
	all, err := tenantRuns(ctx, st, req.Tenant, "")
	if err != nil {
		return nil, err
	}
	var targets []*store.Run
	for _, r := range all {
		if r.ID == req.RunID || (req.User != "" && r.User == req.User) {
			targets = append(targets, r)
		}
	}
	if req.RunID != "" && len(targets) == 0 {
		return nil, fmt.Errorf("run %s: %w", req.RunID, store.ErrNotFound)
	}
	var open []string
	target := map[string]bool{}
	for _, r := range targets {
		target[r.ID] = true
		if !store.Terminal(r.Status) {
			open = append(open, r.ID+" ("+r.Status+")")
		}
	}
	if len(open) > 0 {
		return nil, fmt.Errorf("erase: %d runs have not ended: %s; cancel them, then erase: %w", len(open), strings.Join(open, ", "), store.ErrConflict)
	}
	keep, err := keepSet(ctx, st, all, func(r *store.Run) bool { return !target[r.ID] })
	if err != nil {
		return nil, err
	}
	m := &removal{st: st, tenant: req.Tenant, reason: store.RemovedErased, at: now, started: started, keep: keep}
	rep := &EraseReport{}
	var counts Report
	for _, r := range targets {
		n, err := m.run(ctx, r.ID, &counts)
		if err != nil {
			return rep, err
		}
		if err := st.MarkPayloadsRemoved(ctx, r.ID, store.RemovedErased, now); err != nil {
			return rep, err
		}
		var b [8]byte
		rand.Read(b[:])
		e := &store.Erasure{ID: "er_" + hex.EncodeToString(b[:]), Tenant: req.Tenant, RunID: r.ID, User: req.User,
			RequestedBy: req.RequestedBy, Reason: req.Reason, At: now.UTC().Truncate(time.Microsecond), Blobs: n}
		payload := trace.ErasedPayload(e.ID)
		if err := st.EraseRun(ctx, e, func(*store.Event) []byte { return payload }); err != nil {
			return rep, fmt.Errorf("erase run %s: %w", r.ID, err)
		}
		rep.Erasures = append(rep.Erasures, e)
	}
	rep.BlobsRemoved, rep.Bytes, rep.BlobsShared = counts.BlobsRemoved, counts.Bytes, counts.BlobsShared
	return rep, nil
}
