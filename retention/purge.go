package retention

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// Store is what retention reads and changes: runs, their logs, every
// tenant's blobs, and the retention records (both store back ends, opened
// with a blob key, implement it).
type Store interface {
	store.RunStore
	store.EventStore
	store.Blobs
	store.RetentionStore
}

// Options configure Purge.
type Options struct {
	Store Store
	// Policies are the tenants' policies; a tenant without one is not
	// touched.
	Policies map[string]Policy
	// Now is the time the policies are applied at (default time.Now()).
	Now time.Time
	// DryRun counts what a purge would remove and changes nothing.
	DryRun bool
	// Progress, when set, is called after each run acted on, and once
	// at the end of each tenant.
	Progress func(Progress)
}

// Progress is a purge's state so far.
type Progress struct {
	Tenant string
	// Done of Of runs of the tenant to act on have been handled.
	Done, Of int
	Report
}

// Report counts what a purge (or a dry run) did.
type Report struct {
	DryRun bool `json:"dry_run,omitempty"`
	// Runs is how many runs the policies were applied to.
	Runs int `json:"runs"`
	// PayloadsExpired counts the runs whose payloads were removed.
	PayloadsExpired int `json:"payloads_expired"`
	// BlobsRemoved and Bytes count the blobs removed and their size.
	BlobsRemoved int   `json:"blobs_removed"`
	Bytes        int64 `json:"bytes"`
	// BlobsShared counts the blobs of expired runs kept because another
	// run still keeps them (or put them again during the purge).
	BlobsShared int `json:"blobs_shared"`
	// RunsDeleted counts the runs deleted past their metadata TTL.
	RunsDeleted int `json:"runs_deleted"`
}

// pageSize is how many runs one ListRuns call returns.
const pageSize = 500

// tenantRuns lists every run of tenant (user "" = every user).
func tenantRuns(ctx context.Context, st Store, tenant, user string) ([]*store.Run, error) {
	var out []*store.Run
	for {
		page, err := st.ListRuns(ctx, store.RunFilter{Tenant: tenant, User: user, Limit: pageSize, Offset: len(out)})
		if err != nil {
			return nil, fmt.Errorf("runs of tenant %s: %w", tenant, err)
		}
		out = append(out, page...)
		if len(page) < pageSize {
			return out, nil
		}
	}
}

// refs returns the blobs a run's log references, with their recorded
// sizes.
func refs(ctx context.Context, st Store, runID string) (map[[32]byte]int64, error) {
	evs, err := st.Events(ctx, runID, 0, 0)
	if err != nil {
		return nil, fmt.Errorf("log of run %s: %w", runID, err)
	}
	out := map[[32]byte]int64{}
	for i := range evs {
		cs, err := trace.BlobRefs(&evs[i])
		if err != nil {
			return nil, fmt.Errorf("run %s seq %d: %w", runID, evs[i].Seq, err)
		}
		for _, c := range cs {
			sum, err := c.Sum()
			if err != nil {
				return nil, fmt.Errorf("run %s seq %d: %w", runID, evs[i].Seq, err)
			}
			out[sum] = c.Size
		}
	}
	return out, nil
}

// keepSet returns the blobs referenced by the runs that keep their
// payloads: those keeps says so of, unless their payloads were already
// removed.
func keepSet(ctx context.Context, st Store, runs []*store.Run, keeps func(*store.Run) bool) (map[[32]byte]bool, error) {
	keep := map[[32]byte]bool{}
	for _, r := range runs {
		if !keeps(r) {
			continue
		}
		if reason, _, err := st.PayloadsRemoved(ctx, r.ID); err != nil || reason != "" {
			if err != nil {
				return nil, err
			}
			continue
		}
		rs, err := refs(ctx, st, r.ID)
		if err != nil {
			return nil, err
		}
		for sum := range rs {
			keep[sum] = true
		}
	}
	return keep, nil
}

// removal removes one run's blobs that no kept run references.
type removal struct {
	st      Store
	tenant  string
	reason  string
	at      time.Time
	started time.Time // content put after this is in use again
	keep    map[[32]byte]bool
	done    map[[32]byte]bool // removed by this pass already
	dryRun  bool
}

func (m *removal) run(ctx context.Context, runID string, rep *Report) (removed int, err error) {
	rs, err := refs(ctx, m.st, runID)
	if err != nil {
		return 0, err
	}
	sums := make([][32]byte, 0, len(rs))
	for sum := range rs {
		sums = append(sums, sum)
	}
	sort.Slice(sums, func(i, j int) bool { return string(sums[i][:]) < string(sums[j][:]) })
	if m.done == nil {
		m.done = map[[32]byte]bool{}
	}
	for _, sum := range sums {
		if m.done[sum] {
			continue
		}
		if m.keep[sum] {
			rep.BlobsShared++
			continue
		}
		if !m.dryRun {
			err := m.st.RemoveBlob(ctx, m.tenant, sum, rs[sum], m.reason, m.at, m.started)
			if errors.Is(err, store.ErrConflict) {
				rep.BlobsShared++
				continue
			}
			if err != nil {
				return removed, fmt.Errorf("run %s: remove blob %x: %w", runID, sum[:6], err)
			}
		}
		m.done[sum] = true
		removed++
		rep.BlobsRemoved++
		rep.Bytes += rs[sum]
	}
	return removed, nil
}

// Every starts a purge now and then every interval until ctx ends, and
// hands each pass's report (or error) to done. It returns at once; the
// passes run in a goroutine that ends with ctx.
func Every(ctx context.Context, interval time.Duration, o Options, done func(*Report, error)) {
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			pass := o
			pass.Now = time.Time{} // each pass at its own time
			rep, err := Purge(ctx, pass)
			if ctx.Err() != nil {
				return
			}
			done(rep, err)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Purge applies every tenant's policy: the payloads of ended runs past
// their payload TTL are removed (blobs another run keeps stay), and runs
// past their metadata TTL are deleted with their logs. It stops at the
// first error, reporting what was done until then; a purge run again
// carries on where it stopped.
func Purge(ctx context.Context, o Options) (*Report, error) {
	if o.Now.IsZero() {
		o.Now = time.Now()
	}
	tenants := make([]string, 0, len(o.Policies))
	for t := range o.Policies {
		tenants = append(tenants, t)
	}
	sort.Strings(tenants)
	total := &Report{DryRun: o.DryRun}
	for _, t := range tenants {
		if err := purgeTenant(ctx, o, t, o.Policies[t], total); err != nil {
			return total, fmt.Errorf("purge of tenant %s: %w", t, err)
		}
	}
	return total, nil
}

func purgeTenant(ctx context.Context, o Options, tenant string, p Policy, total *Report) error {
	started := time.Now()
	runs, err := tenantRuns(ctx, o.Store, tenant, "")
	if err != nil {
		return err
	}
	total.Runs += len(runs)
	decisions := map[string]Decision{}
	var act []*store.Run
	for _, r := range runs {
		d := p.Decide(r, o.Now)
		decisions[r.ID] = d
		if !d.ExpirePayloads {
			continue
		}
		reason, _, err := o.Store.PayloadsRemoved(ctx, r.ID)
		if err != nil {
			return err
		}
		if reason == "" || d.Delete {
			act = append(act, r)
		}
	}
	keep, err := keepSet(ctx, o.Store, runs, func(r *store.Run) bool { return !decisions[r.ID].ExpirePayloads })
	if err != nil {
		return err
	}
	m := &removal{st: o.Store, tenant: tenant, reason: store.RemovedExpired, at: o.Now, started: started, keep: keep, dryRun: o.DryRun}
	progress := func(done int) {
		if o.Progress != nil {
			o.Progress(Progress{Tenant: tenant, Done: done, Of: len(act), Report: *total})
		}
	}
	for i, r := range act {
		reason, _, err := o.Store.PayloadsRemoved(ctx, r.ID)
		if err != nil {
			return err
		}
		if reason == "" {
			if _, err := m.run(ctx, r.ID, total); err != nil {
				return err
			}
			if !o.DryRun {
				if err := o.Store.MarkPayloadsRemoved(ctx, r.ID, store.RemovedExpired, o.Now); err != nil {
					return err
				}
			}
			total.PayloadsExpired++
		}
		if decisions[r.ID].Delete {
			if !o.DryRun {
				// Another process's purge may have deleted it first.
				if err := o.Store.DeleteRun(ctx, r.ID); err != nil && !errors.Is(err, store.ErrNotFound) {
					return err
				}
			}
			total.RunsDeleted++
		}
		progress(i + 1)
	}
	progress(len(act))
	return nil
}
