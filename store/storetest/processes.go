package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// ExerciseProcesses runs the cases that only many processes sharing one
// database exercise. open returns two handles on one fresh database, as two
// agentplane processes would open it (two sqlite.Open of one directory, two
// pools on one PostgreSQL database); the suite closes neither. Every case
// races calls from both handles and checks that the database, not a
// process's memory, decided the outcome: one claimer wins a run, a renewal
// and a takeover do not both succeed, a stale epoch writes nothing, one
// idempotency key names one run for every caller, the first decision on an
// approval wins, a signal sent through one handle is consumed through
// the other exactly once, of tenants racing to register one connector
// name one gets it and the others change nothing, each due webhook
// delivery is claimed by one dispatcher, admissions racing against a
// tenant's limit admit exactly the limit, and rate-limit windows are
// shared by both handles.
func ExerciseProcesses(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	t.Run("ConcurrentClaims", func(t *testing.T) { testConcurrentClaims(t, open) })
	t.Run("TakeoverRacesRenewal", func(t *testing.T) { testTakeoverRacesRenewal(t, open) })
	t.Run("StaleEpochAppend", func(t *testing.T) { testStaleEpochAppend(t, open) })
	t.Run("ConcurrentIdempotency", func(t *testing.T) { testConcurrentIdempotency(t, open) })
	t.Run("ConcurrentDecisions", func(t *testing.T) { testConcurrentDecisions(t, open) })
	t.Run("SignalsAcrossProcesses", func(t *testing.T) { testSignalsAcross(t, open) })
	t.Run("ConnectorNameRace", func(t *testing.T) { testConnectorNameRace(t, open) })
	t.Run("DeliveryClaims", func(t *testing.T) { testDeliveryClaims(t, open) })
	t.Run("ConcurrentAdmissions", func(t *testing.T) { testConcurrentAdmissions(t, open) })
	t.Run("SharedRateWindows", func(t *testing.T) { testSharedRateWindows(t, open) })
}

// racers is how many concurrent callers each case starts, alternating
// between the two handles.
const racers = 8

// race calls f(i, handle) from racers goroutines released together and
// returns their errors by index.
func race(a, b APIStore, f func(i int, s APIStore) error) []error {
	errs := make([]error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = f(i, s)
		}()
	}
	close(start)
	wg.Wait()
	return errs
}

// winners returns the indexes whose error is nil and fails the test on any
// error that is not one of the allowed losing ones.
func winners(t *testing.T, what string, errs []error, losing ...error) []int {
	t.Helper()
	var won []int
	for i, err := range errs {
		if err == nil {
			won = append(won, i)
			continue
		}
		allowed := false
		for _, l := range losing {
			allowed = allowed || errors.Is(err, l)
		}
		if !allowed {
			t.Fatalf("%s: caller %d: unexpected error %v (losers must get one of %v)", what, i, err, losing)
		}
	}
	return won
}

func testConcurrentClaims(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	const runs = 6
	for n := range runs {
		id := fmt.Sprintf("r%d", n)
		newRun(t, a, id, modeAsync, Base.Add(time.Duration(n)*time.Second))
		claimed := make([]*store.Run, racers)
		errs := race(a, b, func(i int, s APIStore) error {
			var err error
			owner := fmt.Sprintf("w%d", i)
			if n%2 == 0 { // by id on even runs, next-runnable on odd ones
				claimed[i], err = s.ClaimRunByID(t.Context(), id, owner, leaseTTL, Base)
			} else {
				claimed[i], err = s.ClaimRun(t.Context(), owner, leaseTTL, Base)
			}
			return err
		})
		won := winners(t, "claim "+id, errs, store.ErrNotFound)
		if len(won) != 1 {
			t.Fatalf("claim %s by %d callers on two handles: %d won, want exactly 1", id, racers, len(won))
		}
		w := won[0]
		checkLease(t, claimed[w], id, fmt.Sprintf("w%d", w), Base)
		for _, s := range []APIStore{a, b} {
			if got := getRun(t, s, id); got.LeaseOwner != claimed[w].LeaseOwner || got.LeaseEpoch != claimed[w].LeaseEpoch {
				t.Fatalf("stored lease of %s = %q epoch %d, want the winner's %q epoch %d",
					id, got.LeaseOwner, got.LeaseEpoch, claimed[w].LeaseOwner, claimed[w].LeaseEpoch)
			}
		}
	}
}

func testTakeoverRacesRenewal(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	const rounds = 10
	late := Base.Add(leaseTTL + time.Second) // A's lease has expired
	for n := range rounds {
		id := fmt.Sprintf("r%d", n)
		newRun(t, a, id, modeAsync, Base)
		held := claim(t, a, id, "A", Base)
		var renewErr, claimErr error
		var taken *store.Run
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			renewErr = a.RenewLease(t.Context(), id, held.LeaseEpoch, leaseTTL, late)
		}()
		go func() {
			defer wg.Done()
			<-start
			taken, claimErr = b.ClaimRunByID(t.Context(), id, "B", leaseTTL, late)
		}()
		close(start)
		wg.Wait()
		if renewErr != nil && !errors.Is(renewErr, store.ErrLeaseLost) {
			t.Fatalf("%s: RenewLease: %v", id, renewErr)
		}
		if claimErr != nil && !errors.Is(claimErr, store.ErrNotFound) {
			t.Fatalf("%s: ClaimRunByID: %v", id, claimErr)
		}
		if (renewErr == nil) == (claimErr == nil) {
			t.Fatalf("%s: renewal err %v and takeover err %v: exactly one must win", id, renewErr, claimErr)
		}
		c := &chain{runID: id}
		if claimErr == nil {
			// B took over: A's epoch is fenced out, B's writes.
			wantErr(t, id+": append under A's stale epoch", a.Append(t.Context(),
				store.AppendRequest{RunID: id, Epoch: held.LeaseEpoch, Events: c.next(1, "stale"), Durable: true}), store.ErrLeaseLost)
			c.appendOK(t, b, taken.LeaseEpoch, c.next(1, "taken"))
		} else {
			// A renewed: it keeps writing and B holds nothing.
			c.appendOK(t, a, held.LeaseEpoch, c.next(1, "renewed"))
			if got := getRun(t, b, id); got.LeaseOwner != "A" || got.LeaseEpoch != held.LeaseEpoch {
				t.Fatalf("%s after a renewal: owner %q epoch %d, want A epoch %d", id, got.LeaseOwner, got.LeaseEpoch, held.LeaseEpoch)
			}
		}
		checkEvents(t, id+": log", readEvents(t, b, id, 0, 0), c.log)
	}
}

func testStaleEpochAppend(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	newRun(t, a, "r", modeAsync, Base)
	old := claim(t, a, "r", "A", Base)
	c := &chain{runID: "r"}
	c.appendOK(t, a, old.LeaseEpoch, c.next(2, "by-a"))
	late := Base.Add(leaseTTL + time.Second)
	cur := claim(t, b, "r", "B", late)
	if cur.LeaseEpoch <= old.LeaseEpoch {
		t.Fatalf("epoch after takeover = %d, want > %d", cur.LeaseEpoch, old.LeaseEpoch)
	}
	// Both workers append the same next seq at once: only B's may land.
	evA, evB := c.next(1, "stale-a"), c.next(1, "by-b")
	var errA, errB error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		errA = a.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: old.LeaseEpoch, Events: evA, Durable: true})
	}()
	go func() {
		defer wg.Done()
		errB = b.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: cur.LeaseEpoch, Events: evB, Durable: true})
	}()
	wg.Wait()
	wantErr(t, "append under the stale epoch", errA, store.ErrLeaseLost)
	ok(t, "append under the current epoch", errB)
	c.accept(evB)
	wantErr(t, "RenewLease under the stale epoch", a.RenewLease(t.Context(), "r", old.LeaseEpoch, leaseTTL, late), store.ErrLeaseLost)
	wantErr(t, "ReleaseRun under the stale epoch", a.ReleaseRun(t.Context(), "r", old.LeaseEpoch,
		store.RunUpdate{Status: ptr(store.StatusFailed)}), store.ErrLeaseLost)
	for _, s := range []APIStore{a, b} {
		evs := readEvents(t, s, "r", 0, 0)
		checkEvents(t, "log after the race", evs, c.log)
		if err := verifyChain(evs); err != nil {
			t.Fatalf("chain: %v", err)
		}
	}
}

func testConcurrentIdempotency(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	hash := sha256.Sum256([]byte("the one request"))
	got := make([]*store.Idempotency, racers)
	created := make([]bool, racers)
	errs := race(a, b, func(i int, s APIStore) error {
		// As the API does: reserve the key for a fresh run id, then create
		// the run the record in force names (a reservation whose run is
		// missing is created by whoever reads it).
		rec, c, err := s.ReserveIdempotencyKey(t.Context(), &store.Idempotency{Tenant: "acme", Key: "k",
			RequestHash: hash, RunID: fmt.Sprintf("run_%d", i), CreatedAt: Base})
		if err != nil {
			return err
		}
		got[i], created[i] = rec, c
		return s.CreateRun(t.Context(), &store.Run{ID: rec.RunID, Tenant: "acme", User: "u", Agent: "ag", AgentVersion: 1,
			Task: "t", Mode: modeAsync, CreatedAt: Base})
	})
	won := winners(t, "reserve and create", errs, store.ErrConflict)
	if len(won) != 1 {
		t.Fatalf("%d callers created the run, want exactly 1", len(won))
	}
	nCreated := 0
	for i := range racers {
		if got[i] == nil {
			t.Fatalf("caller %d got no reservation (err %v)", i, errs[i])
		}
		if got[i].RunID != got[0].RunID || got[i].RequestHash != hash {
			t.Fatalf("caller %d was given run %s, caller 0 run %s: one key must name one run", i, got[i].RunID, got[0].RunID)
		}
		if created[i] {
			nCreated++
		}
	}
	if nCreated != 1 {
		t.Fatalf("%d reservations report created, want exactly 1", nCreated)
	}
	for _, s := range []APIStore{a, b} {
		runs, err := s.ListRuns(t.Context(), store.RunFilter{Tenant: "acme"})
		ok(t, "ListRuns", err)
		if len(runs) != 1 || runs[0].ID != got[0].RunID {
			t.Fatalf("runs of acme = %v, want only %s", runIDs(runs), got[0].RunID)
		}
	}
}

func testConcurrentDecisions(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	newRun(t, a, "r", modeAsync, Base)
	l := claim(t, a, "r", "A", Base)
	ok(t, "ReleaseRun(waiting)", a.ReleaseRun(t.Context(), "r", l.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))
	sent := make([]*store.Signal, racers)
	errs := race(a, b, func(i int, s APIStore) error {
		decision := "approve"
		if i%2 == 1 {
			decision = "reject"
		}
		sent[i] = &store.Signal{RunID: "r", Kind: "approval", Key: "approval:ap1",
			Payload: fmt.Appendf(nil, `{"decision":%q,"by":%d}`, decision, i), CreatedAt: Base}
		return s.SendSignal(t.Context(), sent[i])
	})
	won := winners(t, "decide ap1", errs, store.ErrConflict)
	if len(won) != 1 {
		t.Fatalf("%d decisions on one approval were accepted, want exactly 1", len(won))
	}
	w := sent[won[0]]
	for _, s := range []APIStore{a, b} {
		pending, err := s.PendingSignals(t.Context(), "r")
		ok(t, "PendingSignals", err)
		if len(pending) != 1 || pending[0].ID != w.ID || string(pending[0].Payload) != string(w.Payload) || pending[0].Key != w.Key {
			t.Fatalf("pending signals = %d (first %+v), want only the winning decision %s", len(pending), first(pending), w.Payload)
		}
	}
	// Once consumed, the approval stays decided: a late decision changes nothing.
	r := claim(t, b, "r", "B", Base.Add(time.Second))
	c := &chain{runID: "r"}
	evs := c.next(1, "signal")
	ok(t, "Append consuming the decision", b.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch,
		Events: evs, Durable: true, ConsumeSignals: []int64{w.ID}}))
	wantErr(t, "a decision after the first was consumed", a.SendSignal(t.Context(),
		&store.Signal{RunID: "r", Kind: "approval", Key: "approval:ap1", Payload: []byte(`{"decision":"approve"}`)}), store.ErrConflict)
	checkPending(t, b, "r", nil)
	// Keys are per run and per approval; signals without a key never collide.
	ok(t, "another approval's decision", a.SendSignal(t.Context(), &store.Signal{RunID: "r", Kind: "approval", Key: "approval:ap2", Payload: []byte(`{}`)}))
	newRun(t, a, "r2", modeAsync, Base)
	ok(t, "the same key on another run", b.SendSignal(t.Context(), &store.Signal{RunID: "r2", Kind: "approval", Key: "approval:ap1", Payload: []byte(`{}`)}))
	for range 2 {
		ok(t, "a signal without a key", a.SendSignal(t.Context(), &store.Signal{RunID: "r", Kind: "message", Payload: []byte(`{}`)}))
	}
	if p, err := b.PendingSignals(t.Context(), "r"); err != nil || len(p) != 3 {
		t.Fatalf("pending signals of r = %d, %v; want ap2 and two messages", len(p), err)
	}
}

func first(s []*store.Signal) *store.Signal {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}

func testSignalsAcross(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	newRun(t, a, "r", modeAsync, Base)
	l := claim(t, a, "r", "A", Base)
	ok(t, "ReleaseRun(waiting)", a.ReleaseRun(t.Context(), "r", l.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusWaiting)}))
	at := Base.Add(time.Second)
	_, err := b.ClaimRun(t.Context(), "B", leaseTTL, at)
	wantErr(t, "ClaimRun of a run waiting without a signal", err, store.ErrNotFound)

	sg := &store.Signal{RunID: "r", Kind: "message", Payload: []byte(`{"text":"hi"}`), CreatedAt: at}
	ok(t, "SendSignal through a", a.SendSignal(t.Context(), sg))
	// The signal makes the run claimable by every process, and one wins it.
	claimed := make([]*store.Run, racers)
	errs := race(a, b, func(i int, s APIStore) error {
		var err error
		claimed[i], err = s.ClaimRun(t.Context(), fmt.Sprintf("w%d", i), leaseTTL, at)
		return err
	})
	won := winners(t, "claim the signalled run", errs, store.ErrNotFound)
	if len(won) != 1 {
		t.Fatalf("%d claimed the signalled run, want exactly 1", len(won))
	}
	owner := b
	if won[0]%2 == 0 {
		owner = a
	}
	other := a
	if owner == a {
		other = b
	}
	r := claimed[won[0]]
	pending, err := owner.PendingSignals(t.Context(), "r")
	ok(t, "PendingSignals", err)
	if len(pending) != 1 || pending[0].ID != sg.ID || string(pending[0].Payload) != string(sg.Payload) {
		t.Fatalf("pending = %d signals, want the one sent through the other handle", len(pending))
	}
	c := &chain{runID: "r"}
	evs := c.next(1, "signal")
	ok(t, "Append consuming the signal", owner.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch,
		Events: evs, Durable: true, ConsumeSignals: []int64{sg.ID}}))
	c.accept(evs)
	checkPending(t, other, "r", nil)
	// Consumed once: recording it again, through either handle, is refused.
	wantErr(t, "consuming the signal twice", other.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch,
		Events: c.next(1, "signal"), Durable: true, ConsumeSignals: []int64{sg.ID}}), store.ErrConflict)
	if evs := readEvents(t, other, "r", 0, 0); len(evs) != 1 {
		t.Fatalf("log has %d events, want the one that consumed the signal", len(evs))
	}
}

// testConnectorNameRace: tenants racing through both handles to register
// one connector name (deployment-wide, as tool names are) get one owner:
// the others are ErrConflict and leave the winner's connector as it put it.
func testConnectorNameRace(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	for _, s := range []APIStore{a, b} {
		if _, ok := s.(store.ConnectorStore); !ok {
			t.Skip("the store does not implement store.ConnectorStore")
		}
	}
	spec := func(i int) []byte { return fmt.Appendf(nil, `{"transport":"http","by":%d}`, i) }
	errs := race(a, b, func(i int, s APIStore) error {
		return s.(store.ConnectorStore).PutConnector(t.Context(), &store.Connector{Tenant: fmt.Sprintf("tenant-%d", i), Name: "core-banking",
			Spec: spec(i), Overlays: []byte{}, CreatedAt: Base, UpdatedAt: Base})
	})
	won := winners(t, "PutConnector(core-banking)", errs, store.ErrConflict)
	if len(won) != 1 {
		t.Fatalf("%d tenants registering one connector name on two handles: %d won, want exactly 1", racers, len(won))
	}
	w := won[0]
	all, err := a.(store.ConnectorStore).ListConnectors(t.Context(), "")
	ok(t, "ListConnectors", err)
	if len(all) != 1 || all[0].Tenant != fmt.Sprintf("tenant-%d", w) || string(all[0].Spec) != string(spec(w)) {
		t.Fatalf("connectors after the race = %+v, want only tenant-%d's, as it put it", all, w)
	}
}

// testDeliveryClaims races dispatchers on both handles for due webhook
// deliveries: each is claimed by exactly one of them, so one process
// POSTs it.
func testDeliveryClaims(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	const deliveries = 20
	for n := range deliveries {
		id := fmt.Sprintf("r%d", n)
		newRun(t, a, id, modeAsync, Base)
		endRun(t, a, id, store.StatusCompleted, Base)
		ok(t, "MarkNotified", a.MarkNotified(t.Context(), id, &store.Delivery{ID: "msg_" + id, Tenant: "tenant-1", RunID: id,
			EventType: "run.completed", URL: "https://x.example/h", Payload: []byte(`{}`), Status: store.DeliveryPending,
			NextAttemptAt: Base, CreatedAt: Base, UpdatedAt: Base}))
	}
	claimed := make([][]string, racers)
	errs := race(a, b, func(i int, s APIStore) error {
		for {
			ds, err := s.ClaimDeliveries(t.Context(), Base.Add(time.Second), time.Minute, 2)
			if err != nil || len(ds) == 0 {
				return err
			}
			for _, d := range ds {
				claimed[i] = append(claimed[i], d.ID)
			}
		}
	})
	winners(t, "ClaimDeliveries", errs)
	by := map[string]int{}
	for i, ids := range claimed {
		for _, id := range ids {
			if j, dup := by[id]; dup {
				t.Fatalf("delivery %s claimed by caller %d and caller %d", id, j, i)
			}
			by[id] = i
		}
	}
	if len(by) != deliveries {
		t.Fatalf("%d of %d due deliveries were claimed", len(by), deliveries)
	}
}

var errQuotaFull = errors.New("quota full")

// testConcurrentAdmissions races admissions of new runs of one tenant
// from both handles against a limit of K open runs: exactly K are
// admitted, admitted runs count until created (and then as runs), and an
// admission whose run was never created stops counting after the hold.
func testConcurrentAdmissions(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	const k = 3
	newRun(t, a, "existing", modeAsync, Base) // one open run already
	limit := func(open int, _ []map[string]int64) error {
		if open >= k {
			return errQuotaFull
		}
		return nil
	}
	errs := race(a, b, func(i int, s APIStore) error {
		return s.AdmitRun(t.Context(), "tenant-1", fmt.Sprintf("new%d", i), nil, Base, limit)
	})
	won := winners(t, "AdmitRun", errs, errQuotaFull)
	if len(won) != k-1 {
		t.Fatalf("%d of %d racing admissions were admitted with 1 of %d open, want %d", len(won), racers, k, k-1)
	}
	// Another tenant is not held up by this one.
	ok(t, "AdmitRun(other tenant)", b.AdmitRun(t.Context(), "tenant-2", "other", nil, Base, limit))
	// Creating an admitted run does not count it twice; forgetting one
	// frees its place.
	newRun(t, a, fmt.Sprintf("new%d", won[0]), modeAsync, Base)
	wantErr(t, "AdmitRun(full)", b.AdmitRun(t.Context(), "tenant-1", "late", nil, Base, limit), errQuotaFull)
	ok(t, "ForgetAdmission", a.ForgetAdmission(t.Context(), fmt.Sprintf("new%d", won[1])))
	ok(t, "AdmitRun(after forget)", b.AdmitRun(t.Context(), "tenant-1", "late", nil, Base, limit))
	// "late" was never created: after the hold it no longer counts.
	later := Base.Add(store.AdmissionHold + time.Second)
	ok(t, "AdmitRun(after the hold)", a.AdmitRun(t.Context(), "tenant-1", "later", nil, later, limit))
	// The usage decide sees: open runs and costs since each time.
	var seen int
	var costs []map[string]int64
	wantErr(t, "AdmitRun(refused by decide)", b.AdmitRun(t.Context(), "tenant-1", "x", []time.Time{Base}, later, func(o int, c []map[string]int64) error {
		seen, costs = o, c
		return errQuotaFull
	}), errQuotaFull)
	if seen != 3 || len(costs) != 1 {
		t.Fatalf("decide saw %d open runs and %d cost windows, want 3 (two runs and one admission) and 1", seen, len(costs))
	}
}

// testSharedRateWindows takes calls from both handles against one
// window: exactly N fit in it, whichever handle counted them, and the
// window slides.
func testSharedRateWindows(t *testing.T, open func(t *testing.T) (APIStore, APIStore)) {
	a, b := open(t)
	ra, okA := any(a).(store.RateStore)
	rb, okB := any(b).(store.RateStore)
	if !okA || !okB {
		t.Fatal("the store does not implement store.RateStore: rate-limit windows would live in each process")
	}
	user := store.RateWindow{Key: "user:tenant-1:priya:refund", N: 5, Per: time.Minute}
	tenant := store.RateWindow{Key: "tenant:tenant-1:refund", N: 100, Per: time.Hour}
	windows := []store.RateWindow{tenant, user}
	taken := make([]int, racers)
	errs := race(a, b, func(i int, _ APIStore) error {
		rs := ra
		if i%2 == 1 {
			rs = rb
		}
		for range 2 {
			full, err := rs.TakeRate(t.Context(), windows, Base.Add(time.Duration(i)*time.Millisecond), true)
			if err != nil {
				return err
			}
			if full < 0 {
				taken[i]++
			} else if full != 1 {
				return fmt.Errorf("window %d full, want the user's (1)", full)
			}
		}
		return nil
	})
	winners(t, "TakeRate", errs)
	total := 0
	for _, n := range taken {
		total += n
	}
	if total != user.N {
		t.Fatalf("%d calls fit a window of %d shared by two handles", total, user.N)
	}
	// A check without charge counts nothing.
	full, err := rb.TakeRate(t.Context(), []store.RateWindow{tenant}, Base.Add(time.Second), false)
	ok(t, "TakeRate(check)", err)
	if full != -1 {
		t.Fatalf("the tenant window (%d of 100 used) is full: %d", total, full)
	}
	// The window slides: a minute on, the user has room again, and the
	// tenant's hour still counts the earlier calls.
	full, err = ra.TakeRate(t.Context(), windows, Base.Add(time.Minute+time.Second), true)
	ok(t, "TakeRate(a minute on)", err)
	if full != -1 {
		t.Fatalf("a minute on, window %d is full", full)
	}
	small := store.RateWindow{Key: tenant.Key, N: total + 1, Per: time.Hour}
	full, err = rb.TakeRate(t.Context(), []store.RateWindow{small}, Base.Add(2*time.Minute), false)
	ok(t, "TakeRate(tenant)", err)
	if full != 0 {
		t.Fatalf("the tenant window forgot calls: %d calls in its hour should fill a limit of %d", total+1, total+1)
	}
}
