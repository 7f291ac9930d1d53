package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

func testEvents(t *testing.T, newStore func(*testing.T) store.Store) {
	t.Run("AppendRead", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		first := c.next(2, "first")
		c.appendOK(t, s, a.LeaseEpoch, first)
		second := c.next(3, "second")
		c.appendOK(t, s, a.LeaseEpoch, second)
		all := append(slices.Clone(first), second...)
		if all[0].PrevHash != ([32]byte{}) {
			t.Fatal("suite bug: first PrevHash not zero")
		}

		checkEvents(t, "Events(0, 0)", readEvents(t, s, "r", 0, 0), all)
		checkEvents(t, "Events(2, 0)", readEvents(t, s, "r", 2, 0), all[2:])
		checkEvents(t, "Events(1, 2)", readEvents(t, s, "r", 1, 2), all[1:3])
		checkEvents(t, "Events(0, 1)", readEvents(t, s, "r", 0, 1), all[:1])
		checkEvents(t, "Events(5, 0)", readEvents(t, s, "r", 5, 0), nil)
		if err := verifyChain(readEvents(t, s, "r", 0, 0)); err != nil {
			t.Fatalf("stored chain: %v", err)
		}
		if got := getRun(t, s, "r"); got.LastSeq != 5 {
			t.Errorf("LastSeq = %d, want 5", got.LastSeq)
		}
		// Another run's log is separate.
		newRun(t, s, "r2", modeAsync, Base)
		checkEvents(t, "Events(r2)", readEvents(t, s, "r2", 0, 0), nil)
	})

	t.Run("EmptyPayload", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		evs := c.next(2, "marker")
		evs[0].Payload = nil // ChainHash covers nil and empty alike
		evs[0].Hash = store.ChainHash(evs[0].PrevHash, &evs[0])
		evs[1].PrevHash = evs[0].Hash
		evs[1].Hash = store.ChainHash(evs[1].PrevHash, &evs[1])
		c.appendOK(t, s, a.LeaseEpoch, evs)
		got := readEvents(t, s, "r", 0, 0)
		checkEvents(t, "Events", got, c.log)
		if err := verifyChain(got); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("StaleEpoch", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		c.appendOK(t, s, a.LeaseEpoch, c.next(2, "a"))
		b := claim(t, s, "r", "B", Base.Add(2*leaseTTL))

		stale := c.next(1, "a")
		err := s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: stale, Durable: true,
			Update: &store.RunUpdate{Steps: ptr(99), Result: ptr("stale")}})
		wantErr(t, "durable Append with stale epoch", err, store.ErrLeaseLost)
		checkEvents(t, "Events after stale append", readEvents(t, s, "r", 0, 0), c.log)
		if got := getRun(t, s, "r"); got.LastSeq != 2 || got.Steps == 99 || got.Result == "stale" {
			t.Fatalf("stale append changed the run: LastSeq %d Steps %d Result %q", got.LastSeq, got.Steps, got.Result)
		}

		// A buffered stale append is refused too: by that call or, at the
		// latest, by the next Flush.
		err = s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: stale})
		if err == nil {
			err = s.Flush(t.Context(), "r")
		}
		wantErr(t, "non-durable Append with stale epoch, then Flush", err, store.ErrLeaseLost)

		// The new owner is not affected by the old owner's failures.
		mine := c.next(2, "b")
		ok(t, "Append by the new owner", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: b.LeaseEpoch, Events: mine, Durable: true}))
		c.accept(mine)
		evs := readEvents(t, s, "r", 0, 0)
		if err := verifyChain(evs); err != nil {
			t.Fatal(err)
		}
		if len(evs) != 4 || evs[2].Type != "b" || evs[3].Type != "b" {
			t.Fatalf("log = %v, want a a b b", evTypes(evs))
		}
		ok(t, "ReleaseRun by the new owner", s.ReleaseRun(t.Context(), "r", b.LeaseEpoch, store.RunUpdate{Status: ptr(store.StatusCompleted)}))
	})

	t.Run("SeqConflict", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		c.appendOK(t, s, a.LeaseEpoch, c.next(3, "ok"))
		want := readEvents(t, s, "r", 0, 0)

		good := c.next(3, "bad")      // seq 4, 5, 6
		dup := []store.Event{want[2]} // seq 3 again
		skip := &chain{runID: "r", seq: c.seq + 1, head: c.head}
		for _, tc := range []struct {
			name string
			evs  []store.Event
		}{
			{"gap", skip.next(1, "bad")},                                               // seq 5
			{"duplicate", dup},                                                         // seq 3
			{"gap inside request", []store.Event{good[0], good[2]}},                    // 4, 6
			{"out of order", []store.Event{good[1], good[0]}},                          // 5, 4
			{"duplicate inside request", []store.Event{good[0], good[0]}},              // 4, 4
			{"valid then gap", append(slices.Clone(good[:2]), skip.next(3, "bad")[2])}, // 4, 5, 7
		} {
			t.Run(tc.name, func(t *testing.T) {
				err := s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: tc.evs, Durable: true,
					Update: &store.RunUpdate{Steps: ptr(99)}})
				wantErr(t, fmt.Sprintf("Append(seq %v) after seq 3", seqs(tc.evs)), err, store.ErrConflict)
				checkEvents(t, "Events after conflict", readEvents(t, s, "r", 0, 0), want)
				if got := getRun(t, s, "r"); got.LastSeq != 3 || got.Steps == 99 {
					t.Fatalf("failed append changed the run: LastSeq %d Steps %d", got.LastSeq, got.Steps)
				}
			})
		}
		// A refused durable append leaves the log writable.
		c.appendOK(t, s, a.LeaseEpoch, c.next(1, "ok"))
		if err := verifyChain(readEvents(t, s, "r", 0, 0)); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("NonDurableFlush", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		var all []store.Event
		for i := 1; i <= 4; i++ {
			evs := c.next(i, "buffered")
			ok(t, "non-durable Append", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: evs,
				Update: &store.RunUpdate{Steps: ptr(i)}}))
			c.accept(evs)
			all = append(all, evs...)
		}
		ok(t, "Flush", s.Flush(t.Context(), "r"))
		checkEvents(t, "Events after Flush", readEvents(t, s, "r", 0, 0), all)
		if got := getRun(t, s, "r"); got.LastSeq != 10 || got.Steps != 4 {
			t.Fatalf("after Flush: LastSeq %d Steps %d, want 10 and 4", got.LastSeq, got.Steps)
		}
		// Flushing a run with nothing queued is fine.
		ok(t, "Flush(idle)", s.Flush(t.Context(), "r"))
	})

	t.Run("NonDurableFailureReported", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		c.appendOK(t, s, a.LeaseEpoch, c.next(1, "ok"))
		skip := &chain{runID: "r", seq: c.seq + 1, head: c.head}
		err := s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: skip.next(1, "bad")})
		if err == nil {
			err = s.Flush(t.Context(), "r")
		}
		wantErr(t, "non-durable Append with a seq gap, then Flush", err, store.ErrConflict)
		checkEvents(t, "Events", readEvents(t, s, "r", 0, 0), c.log)
	})

	t.Run("RunUpdate", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		c := &chain{runID: "r"}
		wake := Base.Add(time.Hour)
		evs := c.next(1, "model")
		ok(t, "Append with update", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: evs, Durable: true,
			Update: &store.RunUpdate{
				Steps: ptr(2), InputTokens: ptr(int64(1500)), OutputTokens: ptr(int64(300)), CostMicros: ptr(int64(4200)),
				Currency: ptr("USD"), CostUnknown: ptr(true), Result: ptr("partial"), WakeAt: &wake,
			}}))
		c.accept(evs)
		got := getRun(t, s, "r")
		if got.Steps != 2 || got.InputTokens != 1500 || got.OutputTokens != 300 || got.CostMicros != 4200 ||
			got.Currency != "USD" || !got.CostUnknown || got.Result != "partial" || !got.WakeAt.Equal(wake) ||
			got.LastSeq != 1 || got.Status != store.StatusRunning {
			t.Fatalf("after update: %+v", got)
		}

		// Nil fields are left alone; set ones change, including to zero.
		evs = c.next(1, "model")
		ok(t, "Append with partial update", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: evs, Durable: true,
			Update: &store.RunUpdate{Steps: ptr(3), CostUnknown: ptr(false), Status: ptr(store.StatusCompletedPartial)}}))
		c.accept(evs)
		got = getRun(t, s, "r")
		if got.Steps != 3 || got.InputTokens != 1500 || got.OutputTokens != 300 || got.CostMicros != 4200 ||
			got.Currency != "USD" || got.CostUnknown || got.Result != "partial" || !got.WakeAt.Equal(wake) ||
			got.LastSeq != 2 || got.Status != store.StatusCompletedPartial {
			t.Fatalf("after partial update: %+v", got)
		}

		// An update without events applies too.
		ok(t, "Append with only an update", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Durable: true,
			Update: &store.RunUpdate{Result: ptr("final")}}))
		if got := getRun(t, s, "r"); got.Result != "final" || got.LastSeq != 2 {
			t.Fatalf("after update-only append: Result %q LastSeq %d", got.Result, got.LastSeq)
		}
	})

	t.Run("ConsumeSignals", func(t *testing.T) {
		s := newStore(t)
		newRun(t, s, "r", modeAsync, Base)
		a := claim(t, s, "r", "A", Base)
		var ids []int64
		for i := range 3 {
			sg := &store.Signal{RunID: "r", Kind: "message", Payload: fmt.Appendf(nil, `{"n":%d}`, i)}
			ok(t, "SendSignal", s.SendSignal(t.Context(), sg))
			ids = append(ids, sg.ID)
		}
		c := &chain{runID: "r"}
		evs := c.next(2, "signal")
		ok(t, "Append consuming two signals", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch,
			Events: evs, Durable: true, ConsumeSignals: ids[:2]}))
		c.accept(evs)
		checkPending(t, s, "r", ids[2:])

		// Consuming an already consumed signal fails and writes nothing,
		// not even the signals of the request that were still pending.
		bad := c.next(2, "signal")
		err := s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch, Events: bad, Durable: true,
			ConsumeSignals: []int64{ids[2], ids[1]}, Update: &store.RunUpdate{Steps: ptr(99)}})
		wantErr(t, "Append consuming a consumed signal", err, store.ErrConflict)
		checkEvents(t, "Events after conflict", readEvents(t, s, "r", 0, 0), c.log)
		checkPending(t, s, "r", ids[2:])
		if got := getRun(t, s, "r"); got.LastSeq != 2 || got.Steps == 99 {
			t.Fatalf("failed append changed the run: LastSeq %d Steps %d", got.LastSeq, got.Steps)
		}

		// Buffered consumption, as the engine does it.
		evs = c.next(1, "signal")
		ok(t, "non-durable Append consuming a signal", s.Append(t.Context(), store.AppendRequest{RunID: "r", Epoch: a.LeaseEpoch,
			Events: evs, ConsumeSignals: ids[2:]}))
		c.accept(evs)
		ok(t, "Flush", s.Flush(t.Context(), "r"))
		checkPending(t, s, "r", nil)
		if err := verifyChain(readEvents(t, s, "r", 0, 0)); err != nil {
			t.Fatal(err)
		}
	})
}

func evTypes(evs []store.Event) []string {
	out := make([]string, len(evs))
	for i := range evs {
		out[i] = evs[i].Type
	}
	return out
}

func checkPending(t *testing.T, s store.Store, runID string, want []int64) {
	t.Helper()
	sigs, err := s.PendingSignals(t.Context(), runID)
	ok(t, "PendingSignals", err)
	var got []int64
	for _, sg := range sigs {
		got = append(got, sg.ID)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("pending signals of %s = %v, want %v", runID, got, want)
	}
}

// testGroupCommit has many runs append at once, as a busy worker pool does,
// mixing durable and buffered appends, and checks that every log is whole.
func testGroupCommit(t *testing.T, s store.Store) {
	const runs, perRun = 64, 50
	epochs := make([]int64, runs)
	logs := make([][]store.Event, runs) // what each appender had acknowledged
	for i := range runs {
		id := fmt.Sprintf("run-%02d", i)
		newRun(t, s, id, modeAsync, Base.Add(time.Duration(i)*time.Millisecond))
		epochs[i] = claim(t, s, id, "worker", Base).LeaseEpoch
	}
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range runs {
		wg.Go(func() {
			<-start
			id := fmt.Sprintf("run-%02d", i)
			c := &chain{runID: id}
			for req := 0; c.seq < perRun; req++ {
				n := min(1+(i+req)%3, perRun-int(c.seq))
				evs := c.next(n, "step")
				err := s.Append(t.Context(), store.AppendRequest{RunID: id, Epoch: epochs[i], Events: evs,
					Durable: (i+req)%4 == 0, Update: &store.RunUpdate{Steps: ptr(int(evs[n-1].Seq))}})
				if err != nil {
					t.Errorf("Append(%s seq %d..%d): %v", id, evs[0].Seq, evs[n-1].Seq, err)
					return
				}
				c.accept(evs)
			}
			if err := s.Flush(t.Context(), id); err != nil {
				t.Errorf("Flush(%s): %v", id, err)
			}
			logs[i] = c.log
		})
	}
	close(start)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i := range runs {
		id := fmt.Sprintf("run-%02d", i)
		evs := readEvents(t, s, id, 0, 0)
		if err := verifyChain(evs); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		checkEvents(t, id, evs, logs[i])
		if r := getRun(t, s, id); r.LastSeq != perRun || r.Steps != perRun {
			t.Errorf("%s: LastSeq %d Steps %d, want %d", id, r.LastSeq, r.Steps, perRun)
		}
	}
}

// testFailureIsolation sends, all at once, valid appends for many runs and
// fenced-out appends for one run, so that a batching implementation commits
// them together; only the fenced ones may fail.
func testFailureIsolation(t *testing.T, s store.Store) {
	const good, rounds, staleWriters = 16, 5, 4
	goodEpochs := make([]int64, good)
	for i := range good {
		id := fmt.Sprintf("good-%02d", i)
		newRun(t, s, id, modeAsync, Base)
		goodEpochs[i] = claim(t, s, id, "A", Base).LeaseEpoch
	}
	newRun(t, s, "contested", modeAsync, Base)
	old := claim(t, s, "contested", "A", Base)
	cur := claim(t, s, "contested", "B", Base.Add(2*leaseTTL))

	chains := make([]*chain, good)
	for i := range chains {
		chains[i] = &chain{runID: fmt.Sprintf("good-%02d", i)}
	}
	contested := &chain{runID: "contested"}
	staleView := &chain{runID: "contested"} // what the fenced-out owner believes
	for round := range rounds {
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, c := range chains {
			evs := c.next(3, fmt.Sprintf("round-%d", round))
			wg.Go(func() {
				<-start
				err := s.Append(t.Context(), store.AppendRequest{RunID: c.runID, Epoch: goodEpochs[i], Events: evs, Durable: true})
				if err != nil {
					t.Errorf("round %d: valid Append(%s): %v", round, c.runID, err)
				}
			})
			c.accept(evs)
		}
		for w := range staleWriters {
			evs := staleView.next(1, "stale")
			wg.Go(func() {
				<-start
				err := s.Append(t.Context(), store.AppendRequest{RunID: "contested", Epoch: old.LeaseEpoch, Events: evs,
					Durable: w%2 == 0, Update: &store.RunUpdate{Result: ptr("stale")}})
				if err == nil && w%2 == 1 {
					err = s.Flush(t.Context(), "contested")
				}
				if !errors.Is(err, store.ErrLeaseLost) {
					t.Errorf("round %d: fenced Append: err = %v, want ErrLeaseLost", round, err)
				}
			})
		}
		evs := contested.next(1, fmt.Sprintf("owner-%d", round))
		wg.Go(func() {
			<-start
			err := s.Append(t.Context(), store.AppendRequest{RunID: "contested", Epoch: cur.LeaseEpoch, Events: evs, Durable: true})
			if err != nil {
				t.Errorf("round %d: current owner's Append: %v", round, err)
			}
		})
		contested.accept(evs)
		close(start)
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	for _, c := range chains {
		checkEvents(t, c.runID, readEvents(t, s, c.runID, 0, 0), c.log)
	}
	evs := readEvents(t, s, "contested", 0, 0)
	if err := verifyChain(evs); err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == "stale" {
			t.Fatalf("a fenced-out append was written: seq %d", ev.Seq)
		}
	}
	if len(evs) != rounds {
		t.Fatalf("contested run has %d events, want %d", len(evs), rounds)
	}
	if r := getRun(t, s, "contested"); r.Result == "stale" || r.LeaseOwner != "B" {
		t.Fatalf("contested run: Result %q owner %q", r.Result, r.LeaseOwner)
	}
}
