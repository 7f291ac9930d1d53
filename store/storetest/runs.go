package storetest

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

func testRuns(t *testing.T, newStore func(*testing.T) store.Store) {
	t.Run("CreateGet", func(t *testing.T) {
		s := newStore(t)
		want := &store.Run{
			ID: "run-1", Tenant: "acme", User: "alice", Agent: "support", AgentVersion: 3,
			Task: "refund order 42", Mode: modeAsync, Status: store.StatusQueued,
			CreatedAt: Base.Add(123456789 * time.Nanosecond), ParentRunID: "run-0",
			Bindings: map[string]string{"customer_id": "c_88213", "region": "in"},
		}
		in := *want
		ok(t, "CreateRun", s.CreateRun(t.Context(), &in))
		got := getRun(t, s, "run-1")
		if got.ID != want.ID || got.Tenant != want.Tenant || got.User != want.User || got.Agent != want.Agent ||
			got.AgentVersion != want.AgentVersion || got.Task != want.Task || got.Mode != want.Mode ||
			got.Status != store.StatusQueued || got.ParentRunID != want.ParentRunID || !maps.Equal(got.Bindings, want.Bindings) {
			t.Fatalf("GetRun = %+v\nwant %+v", got, want)
		}
		if !got.CreatedAt.Equal(want.CreatedAt.Truncate(time.Microsecond)) {
			t.Errorf("CreatedAt = %v, want %v", got.CreatedAt, want.CreatedAt.Truncate(time.Microsecond))
		}
		if got.LastSeq != 0 || got.Steps != 0 || got.LeaseOwner != "" || got.Result != "" {
			t.Errorf("new run has LastSeq %d, Steps %d, LeaseOwner %q, Result %q; want zero values",
				got.LastSeq, got.Steps, got.LeaseOwner, got.Result)
		}

		dup := *want
		dup.Task = "something else"
		wantErr(t, "CreateRun(duplicate id)", s.CreateRun(t.Context(), &dup), store.ErrConflict)
		if got := getRun(t, s, "run-1"); got.Task != want.Task {
			t.Errorf("duplicate CreateRun overwrote Task: %q", got.Task)
		}

		_, err := s.GetRun(t.Context(), "no-such-run")
		wantErr(t, "GetRun(missing)", err, store.ErrNotFound)
	})

	t.Run("List", func(t *testing.T) {
		s := newStore(t)
		for i, r := range []struct {
			id, tenant, agent, user string
			version                 int
		}{
			{"r1", "t1", "a", "u", 1}, {"r2", "t1", "b", "u", 1}, {"r3", "t2", "a", "u", 1}, {"r4", "t2", "b", "u", 1}, {"r5", "t1", "a", "v", 2},
		} {
			ok(t, "CreateRun", s.CreateRun(t.Context(), &store.Run{
				ID: r.id, Tenant: r.tenant, User: r.user, Agent: r.agent, AgentVersion: r.version, Task: "x",
				Mode: modeAsync, Status: store.StatusQueued, CreatedAt: Base.Add(time.Duration(i) * time.Minute),
			}))
		}
		// Finish r2 so that the status filter has something to tell apart.
		r2 := claim(t, s, "r2", "w", Base)
		ok(t, "ReleaseRun", s.ReleaseRun(t.Context(), "r2", r2.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusCompleted)}))

		for _, tc := range []struct {
			name string
			f    store.RunFilter
			want []string
		}{
			{"all", store.RunFilter{}, []string{"r1", "r2", "r3", "r4", "r5"}},
			{"tenant", store.RunFilter{Tenant: "t1"}, []string{"r1", "r2", "r5"}},
			{"agent", store.RunFilter{Agent: "b"}, []string{"r2", "r4"}},
			{"tenant+agent", store.RunFilter{Tenant: "t2", Agent: "a"}, []string{"r3"}},
			{"status completed", store.RunFilter{Status: store.StatusCompleted}, []string{"r2"}},
			{"status queued", store.RunFilter{Status: store.StatusQueued}, []string{"r1", "r3", "r4", "r5"}},
			{"tenant+status", store.RunFilter{Tenant: "t1", Status: store.StatusQueued}, []string{"r1", "r5"}},
			{"no match", store.RunFilter{Tenant: "t3"}, nil},
			{"user", store.RunFilter{User: "v"}, []string{"r5"}},
			{"version", store.RunFilter{Tenant: "t1", AgentVersion: 1}, []string{"r1", "r2"}},
			{"newest first, one", store.RunFilter{Tenant: "t1", Newest: true, Limit: 1}, []string{"r5"}},
			{"oldest first, second page", store.RunFilter{Tenant: "t1", Limit: 1, Offset: 1}, []string{"r2"}},
			{"newest first, second page", store.RunFilter{Tenant: "t1", Newest: true, Limit: 2, Offset: 1}, []string{"r1", "r2"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				rs, err := s.ListRuns(t.Context(), tc.f)
				ok(t, "ListRuns", err)
				if got := runIDs(rs); !slices.Equal(got, tc.want) {
					t.Errorf("ListRuns(%+v) = %v, want %v", tc.f, got, tc.want)
				}
			})
		}
		t.Run("limit", func(t *testing.T) {
			rs, err := s.ListRuns(t.Context(), store.RunFilter{Tenant: "t1", Limit: 2})
			ok(t, "ListRuns", err)
			got := runIDs(rs)
			if len(got) != 2 {
				t.Fatalf("ListRuns(Limit 2) = %v, want 2 runs", got)
			}
			for _, id := range got {
				if !slices.Contains([]string{"r1", "r2", "r5"}, id) {
					t.Errorf("ListRuns(Tenant t1, Limit 2) returned %s of another tenant", id)
				}
			}
		})
	})
}

type promptEvent struct {
	typ     string
	payload []byte
}

// testPromptHashes checks RunFilter.PromptHash: the runs whose model_call
// events recorded the hash, within the tenant filtered on, found from the
// index the append filled (a hash in another event type, or in a form
// that is not a sha256, names nothing).
func testPromptHashes(t *testing.T, s store.Store) {
	h1, h2 := strings.Repeat("a1", 32), strings.Repeat("b2", 32)
	call := func(h string) []byte {
		return []byte(`{"alias":"m","delta":[1],"prompt_hash":"sha256:` + h + `","prompt_bytes":10}`)
	}
	for i, r := range []struct {
		id, tenant string
		events     []promptEvent
	}{
		{"p1", "t1", []promptEvent{{store.EventModelCall, call(h1)}, {store.EventModelCall, call(h2)}}},
		{"p2", "t1", []promptEvent{{store.EventModelCall, call(h1)}, {store.EventModelCall, call(h1)}}},
		{"p3", "t2", []promptEvent{{store.EventModelCall, call(h1)}}},
		{"p4", "t1", []promptEvent{{"tool_result", call(h2)}, {store.EventModelCall, call(strings.ToUpper(h2))}}},
	} {
		ok(t, "CreateRun", s.CreateRun(t.Context(), &store.Run{ID: r.id, Tenant: r.tenant, User: "u", Agent: "a", AgentVersion: 1,
			Task: "x", Mode: modeAsync, Status: store.StatusQueued, CreatedAt: Base.Add(time.Duration(i) * time.Minute)}))
		lease := claim(t, s, r.id, "w", Base)
		c := &chain{runID: r.id}
		for _, e := range r.events {
			evs := c.next(1, e.typ)
			evs[0].Payload = e.payload
			evs[0].Hash = store.ChainHash(evs[0].PrevHash, &evs[0])
			c.appendOK(t, s, lease.LeaseEpoch, evs)
		}
	}
	for _, tc := range []struct {
		name string
		f    store.RunFilter
		want []string
	}{
		{"every tenant", store.RunFilter{PromptHash: h1}, []string{"p1", "p2", "p3"}},
		{"one tenant", store.RunFilter{Tenant: "t1", PromptHash: h1}, []string{"p1", "p2"}},
		{"as recorded", store.RunFilter{Tenant: "t1", PromptHash: "sha256:" + h1}, []string{"p1", "p2"}},
		{"not a hash", store.RunFilter{PromptHash: "sha256:" + h1[:12]}, nil},
		{"other hash", store.RunFilter{Tenant: "t1", PromptHash: h2}, []string{"p1"}},
		{"unknown hash", store.RunFilter{PromptHash: strings.Repeat("c3", 32)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs, err := s.ListRuns(t.Context(), tc.f)
			ok(t, "ListRuns", err)
			if got := runIDs(rs); !slices.Equal(got, tc.want) {
				t.Errorf("ListRuns(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}

// runIDs returns the sorted ids of rs (list order is not part of the contract).
func runIDs(rs []*store.Run) []string {
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.ID)
	}
	slices.Sort(ids)
	return ids
}

// testLeases checks LeaseStore: the leases and epochs of the embedded
// engine (claim order, takeover, renewal, fencing, release).
func testLeases(t *testing.T, newStore func(*testing.T) store.Store) {
	t.Run("ClaimOrder", func(t *testing.T) {
		s := newStore(t)
		// Not runnable: a finished run and a run waiting for a timer that
		// has not fired, both older than every queued run.
		newRun(t, s, "done", modeStream, Base.Add(-10*time.Hour))
		d := claim(t, s, "done", "setup", Base)
		ok(t, "ReleaseRun(done)", s.ReleaseRun(t.Context(), "done", d.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusCompleted)}))
		newRun(t, s, "sleeper", modeStream, Base.Add(-9*time.Hour))
		sl := claim(t, s, "sleeper", "setup", Base)
		ok(t, "ReleaseRun(sleeper)", s.ReleaseRun(t.Context(), "sleeper", sl.LeaseEpoch,
			store.RunUpdate{Status: ptr(store.StatusWaiting), WakeAt: ptr(Base.Add(24 * time.Hour))}))

		newRun(t, s, "async-old", modeAsync, Base.Add(-4*time.Hour))
		newRun(t, s, "stream-new", modeStream, Base.Add(-1*time.Hour))
		newRun(t, s, "async-new", modeAsync, Base.Add(-30*time.Minute))
		newRun(t, s, "stream-old", modeStream, Base.Add(-2*time.Hour))

		for _, want := range []string{"stream-old", "stream-new", "async-old", "async-new"} {
			r, err := s.ClaimRun(t.Context(), "worker", leaseTTL, Base)
			ok(t, "ClaimRun (want "+want+")", err)
			checkLease(t, r, want, "worker", Base)
		}
		_, err := s.ClaimRun(t.Context(), "worker", leaseTTL, Base)
		wantErr(t, "ClaimRun with every run leased, finished or asleep", err, store.ErrNotFound)
	})

	t.Run("ExpiryAndFencing", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a, err := s.ClaimRun(t.Context(), "A", leaseTTL, Base)
		ok(t, "ClaimRun(A)", err)
		checkLease(t, a, "r", "A", Base)
		if got := getRun(t, s, "r"); got.LeaseOwner != "A" || got.LeaseEpoch != a.LeaseEpoch || got.Status != store.StatusRunning {
			t.Fatalf("stored lease = %q epoch %d status %s, want A epoch %d running", got.LeaseOwner, got.LeaseEpoch, got.Status, a.LeaseEpoch)
		}

		_, err = s.ClaimRun(t.Context(), "B", leaseTTL, Base.Add(30*time.Second))
		wantErr(t, "ClaimRun while leased", err, store.ErrNotFound)
		if _, err := s.ClaimRunByID(t.Context(), "r", "B", leaseTTL, Base.Add(30*time.Second)); err == nil {
			t.Fatal("ClaimRunByID of a leased run succeeded")
		}

		// Renewal at +50s moves expiry to +110s: +90s is still within it.
		ok(t, "RenewLease", s.RenewLease(t.Context(), "r", a.LeaseEpoch, leaseTTL, Base.Add(50*time.Second)))
		_, err = s.ClaimRun(t.Context(), "B", leaseTTL, Base.Add(90*time.Second))
		wantErr(t, "ClaimRun after renewal, before the renewed expiry", err, store.ErrNotFound)

		at := Base.Add(111 * time.Second)
		b, err := s.ClaimRun(t.Context(), "B", leaseTTL, at)
		ok(t, "ClaimRun after expiry", err)
		checkLease(t, b, "r", "B", at)
		if b.LeaseEpoch <= a.LeaseEpoch {
			t.Fatalf("epoch after takeover = %d, want > %d", b.LeaseEpoch, a.LeaseEpoch)
		}

		wantErr(t, "RenewLease(stale epoch)", s.RenewLease(t.Context(), "r", a.LeaseEpoch, leaseTTL, at), store.ErrLeaseLost)
		wantErr(t, "ReleaseRun(stale epoch)", s.ReleaseRun(t.Context(), "r", a.LeaseEpoch,
			store.RunUpdate{Status: ptr(store.StatusFailed), Result: ptr("stale")}), store.ErrLeaseLost)
		if got := getRun(t, s, "r"); got.Status != store.StatusRunning || got.LeaseOwner != "B" || got.Result != "" {
			t.Fatalf("after stale release: status %s owner %q result %q, want running, B, empty", got.Status, got.LeaseOwner, got.Result)
		}

		ok(t, "RenewLease(current epoch)", s.RenewLease(t.Context(), "r", b.LeaseEpoch, leaseTTL, at.Add(10*time.Second)))
		ok(t, "ReleaseRun(current epoch)", s.ReleaseRun(t.Context(), "r", b.LeaseEpoch,
			store.RunUpdate{Status: ptr(store.StatusCompleted), Result: ptr("done")}))
		got := getRun(t, s, "r")
		if got.Status != store.StatusCompleted || got.Result != "done" || got.LeaseOwner != "" {
			t.Fatalf("after release: status %s result %q owner %q, want completed, done, no owner", got.Status, got.Result, got.LeaseOwner)
		}
		_, err = s.ClaimRun(t.Context(), "C", leaseTTL, at.Add(time.Hour))
		wantErr(t, "ClaimRun of a completed run", err, store.ErrNotFound)
	})

	t.Run("ClockStepsBack", func(t *testing.T) {
		// A claims at T and dies; the wall clock then steps back 3h. The
		// lease must not hold the run for the 3h of the step: another
		// worker takes it over one TTL after it first looks.
		s := newStore(t)
		newRun(t, s, "dead", modeAsync, Base)
		newRun(t, s, "live", modeAsync, Base)
		dead := claim(t, s, "dead", "A", Base)
		live := claim(t, s, "live", "L", Base)
		back := Base.Add(-3 * time.Hour)

		_, err := s.ClaimRun(t.Context(), "B", leaseTTL, back)
		wantErr(t, "ClaimRun just after the step, within the TTL", err, store.ErrNotFound)
		// The live claimer renews on its own (stepped) clock and keeps its run.
		ok(t, "RenewLease(live) after the step", s.RenewLease(t.Context(), "live", live.LeaseEpoch, leaseTTL, back.Add(leaseTTL/3)))
		_, err = s.ClaimRunByID(t.Context(), "dead", "B", leaseTTL, back.Add(leaseTTL-time.Second))
		wantErr(t, "ClaimRunByID before a TTL has passed since the step", err, store.ErrNotFound)

		at := back.Add(leaseTTL + time.Second)
		b, err := s.ClaimRun(t.Context(), "B", leaseTTL, at)
		ok(t, "ClaimRun one TTL after the step", err)
		checkLease(t, b, "dead", "B", at)
		if b.LeaseEpoch <= dead.LeaseEpoch {
			t.Fatalf("epoch after takeover = %d, want > %d", b.LeaseEpoch, dead.LeaseEpoch)
		}
		wantErr(t, "RenewLease(dead claimer)", s.RenewLease(t.Context(), "dead", dead.LeaseEpoch, leaseTTL, Base.Add(time.Second)), store.ErrLeaseLost)
		if got := getRun(t, s, "live"); got.LeaseOwner != "L" || got.LeaseEpoch != live.LeaseEpoch {
			t.Fatalf("live run: owner %q epoch %d, want L epoch %d (a renewing claimer keeps its lease)", got.LeaseOwner, got.LeaseEpoch, live.LeaseEpoch)
		}
		_, err = s.ClaimRun(t.Context(), "C", leaseTTL, at)
		wantErr(t, "ClaimRun of the renewed live run", err, store.ErrNotFound)
	})

	t.Run("ReleaseToQueueIsClaimable", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		// Released before expiry: claimable at once, not only after the TTL.
		ok(t, "ReleaseRun(queued)", s.ReleaseRun(t.Context(), "r", a.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusQueued)}))
		b, err := s.ClaimRun(t.Context(), "B", leaseTTL, Base.Add(time.Second))
		ok(t, "ClaimRun after release", err)
		checkLease(t, b, "r", "B", Base.Add(time.Second))
		if b.LeaseEpoch <= a.LeaseEpoch {
			t.Fatalf("epoch = %d, want > %d", b.LeaseEpoch, a.LeaseEpoch)
		}
	})

	t.Run("WakeAt", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		wake := Base.Add(10 * time.Minute)
		ok(t, "ReleaseRun(waiting)", s.ReleaseRun(t.Context(), "r", a.LeaseEpoch,
			store.RunUpdate{Status: ptr(store.StatusWaiting), WakeAt: &wake}))
		got := getRun(t, s, "r")
		if got.Status != store.StatusWaiting || !got.WakeAt.Equal(wake) || got.LeaseOwner != "" {
			t.Fatalf("after release: status %s WakeAt %v owner %q, want waiting, %v, no owner", got.Status, got.WakeAt, got.LeaseOwner, wake)
		}
		for _, now := range []time.Time{Base.Add(2 * time.Minute), wake.Add(-time.Millisecond)} {
			_, err := s.ClaimRun(t.Context(), "B", leaseTTL, now)
			wantErr(t, "ClaimRun before WakeAt at "+now.String(), err, store.ErrNotFound)
			if _, err := s.ClaimRunByID(t.Context(), "r", "B", leaseTTL, now); err == nil {
				t.Fatalf("ClaimRunByID before WakeAt at %v succeeded", now)
			}
		}
		at := wake.Add(time.Second)
		b, err := s.ClaimRun(t.Context(), "B", leaseTTL, at)
		ok(t, "ClaimRun after WakeAt", err)
		checkLease(t, b, "r", "B", at)
		if b.LeaseEpoch <= a.LeaseEpoch {
			t.Fatalf("epoch = %d, want > %d", b.LeaseEpoch, a.LeaseEpoch)
		}
	})

	t.Run("SignalWakes", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		newRun(t, s, "other", modeAsync, Base.Add(time.Second))
		o := claim(t, s, "other", "A", Base)
		a := claim(t, s, "r", "A", Base)
		ok(t, "ReleaseRun(waiting)", s.ReleaseRun(t.Context(), "r", a.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))
		ok(t, "ReleaseRun(other waiting)", s.ReleaseRun(t.Context(), "other", o.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))

		far := Base.Add(1000 * time.Hour)
		_, err := s.ClaimRun(t.Context(), "B", leaseTTL, far)
		wantErr(t, "ClaimRun of runs waiting without a timer or signal", err, store.ErrNotFound)

		ok(t, "SendSignal", s.SendSignal(t.Context(), &store.Signal{RunID: "r", Kind: "message", Payload: []byte(`{"text":"hi"}`)}))
		b, err := s.ClaimRun(t.Context(), "B", leaseTTL, Base.Add(time.Minute))
		ok(t, "ClaimRun after signal", err)
		checkLease(t, b, "r", "B", Base.Add(time.Minute))
		if b.LeaseEpoch <= a.LeaseEpoch {
			t.Fatalf("epoch = %d, want > %d", b.LeaseEpoch, a.LeaseEpoch)
		}
		// The signal was for r only.
		_, err = s.ClaimRun(t.Context(), "B", leaseTTL, Base.Add(time.Minute))
		wantErr(t, "ClaimRun of the run that got no signal", err, store.ErrNotFound)

		// Once the signal is consumed, a run waiting again stays asleep.
		sigs, err := s.PendingSignals(t.Context(), "r")
		ok(t, "PendingSignals", err)
		if len(sigs) != 1 {
			t.Fatalf("PendingSignals = %d signals, want 1", len(sigs))
		}
		c := &chain{runID: "r"}
		evs := c.next(1, "signal")
		ok(t, "Append(consume)", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: b.LeaseEpoch, Events: evs,
			Durable: true, ConsumeSignals: []int64{sigs[0].ID}}))
		ok(t, "ReleaseRun(waiting again)", s.ReleaseRun(t.Context(), "r", b.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))
		_, err = s.ClaimRun(t.Context(), "C", leaseTTL, far)
		wantErr(t, "ClaimRun after the signal was consumed", err, store.ErrNotFound)
	})

	t.Run("ClaimRunByID", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "older", modeStream, Base.Add(-time.Hour))
		newRun(t, s, "younger", modeAsync, Base)
		y := claim(t, s, "younger", "A", Base) // not the one ClaimRun would pick
		if _, err := s.ClaimRunByID(t.Context(), "younger", "B", leaseTTL, Base.Add(time.Second)); err == nil {
			t.Fatal("ClaimRunByID of a leased run succeeded")
		}
		if got := getRun(t, s, "younger"); got.LeaseOwner != "A" || got.LeaseEpoch != y.LeaseEpoch {
			t.Fatalf("failed claim changed the lease: owner %q epoch %d", got.LeaseOwner, got.LeaseEpoch)
		}
		_, err := s.ClaimRunByID(t.Context(), "missing", "B", leaseTTL, Base)
		wantErr(t, "ClaimRunByID(missing)", err, store.ErrNotFound)
		r, err := s.ClaimRun(t.Context(), "B", leaseTTL, Base)
		ok(t, "ClaimRun", err)
		checkLease(t, r, "older", "B", Base)
		at := Base.Add(2 * leaseTTL)
		y2, err := s.ClaimRunByID(t.Context(), "younger", "B", leaseTTL, at)
		ok(t, "ClaimRunByID after expiry", err)
		checkLease(t, y2, "younger", "B", at)
		if y2.LeaseEpoch <= y.LeaseEpoch {
			t.Fatalf("epoch = %d, want > %d", y2.LeaseEpoch, y.LeaseEpoch)
		}
	})
}
