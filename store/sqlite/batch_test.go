package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// One group commit holding appends of several runs, one of them refused
// (a fenced-out worker, a seq that does not follow): the refused appends
// fail alone, every other append of the batch commits, and the commit feed
// is handed exactly the committed ones.
func TestBatchWithAFailingAppend(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	now := time.Now()
	epochs := map[string]int64{}
	for _, id := range []string{"good", "fenced", "gap"} {
		epochs[id] = createAndClaim(t, s, id, "w", base).LeaseEpoch
	}
	var fedMu sync.Mutex
	fed := map[string][]int64{}
	defer s.FeedCommits(func(runID string, evs []store.Event) {
		fedMu.Lock()
		defer fedMu.Unlock()
		for _, ev := range evs {
			fed[runID] = append(fed[runID], ev.Seq)
		}
	})()
	event := func(id string, seq int64) store.Event {
		return store.Event{RunID: id, Seq: seq, Type: "step_started", At: now, Payload: []byte(fmt.Sprintf(`{"n":%d}`, seq))}
	}

	steps := 3
	for i := 1; i <= steps; i++ {
		if err := s.Append(ctx, store.AppendRequest{RunID: "good", Epoch: epochs["good"], Events: []store.Event{event("good", int64(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Flush(ctx, "good"); err != nil {
		t.Fatal(err)
	}
	// One batch, handed to the writer's commit directly so that its make-up
	// does not depend on when the writer goroutine wakes (the writer is idle:
	// every append above is committed). A non-durable good append leads it
	// so that the failures share a transaction with appends before and
	// after them.
	op := func(id string, epoch, seq int64) *appendOp {
		return &appendOp{req: store.AppendRequest{RunID: id, Epoch: epoch, Events: []store.Event{event(id, seq)}, Durable: true}, done: make(chan error, 1)}
	}
	lead := &appendOp{req: store.AppendRequest{RunID: "good", Epoch: epochs["good"], Events: []store.Event{event("good", int64(steps+1))}}}
	batch := []*appendOp{lead, op("fenced", epochs["fenced"]+1, 1), op("gap", epochs["gap"], 5), op("good", epochs["good"], int64(steps+2))}
	s.commit(batch)
	if err := s.takeSticky("good", epochs["good"]); err != nil {
		t.Fatalf("the non-durable append of the batch failed: %v", err)
	}
	var errs []error
	for _, o := range batch[1:] {
		errs = append(errs, <-o.done)
	}
	var lost, conflict, ok int
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, store.ErrLeaseLost):
			lost++
		case errors.Is(err, store.ErrConflict):
			conflict++
		default:
			t.Errorf("unexpected error %v", err)
		}
	}
	if ok != 1 || lost != 1 || conflict != 1 {
		t.Fatalf("durable appends: %d ok, %d lease lost, %d conflicts (%v); want one each", ok, lost, conflict, errs)
	}
	for id, want := range map[string]int{"good": steps + 2, "fenced": 0, "gap": 0} {
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		r, err := s.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != want || r.LastSeq != int64(want) {
			t.Errorf("run %s: %d events, last seq %d; want %d", id, len(evs), r.LastSeq, want)
		}
		fedMu.Lock()
		if len(fed[id]) != want {
			t.Errorf("run %s: the feed was handed seqs %v, want %d", id, fed[id], want)
		}
		fedMu.Unlock()
	}
}

// The appends of one run in one batch are written with one run-row update:
// the row ends as the ops in turn would leave it (each field from the last
// op that sets it), every event lands, and ops that cannot be joined (an
// empty Flush among them) are still written one by one.
func TestBatchJoinsARunsAppends(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	now := time.Now()
	epochs := map[string]int64{}
	for _, id := range []string{"joined", "flushed"} {
		epochs[id] = createAndClaim(t, s, id, "w", base).LeaseEpoch
	}
	op := func(id string, seq int64, n int, u *store.RunUpdate) *appendOp {
		o := &appendOp{req: store.AppendRequest{RunID: id, Epoch: epochs[id], Update: u, Durable: true}, done: make(chan error, 1)}
		for i := range n {
			o.req.Events = append(o.req.Events, store.Event{RunID: id, Seq: seq + int64(i), Type: "step_started", At: now, Payload: []byte(`{}`)})
		}
		return o
	}
	one, three := 1, 3
	var in, out int64 = 10, 30
	usd, result := "USD", "done"
	batch := []*appendOp{
		op("joined", 1, 2, &store.RunUpdate{Steps: &one, InputTokens: &in, Currency: &usd}),
		op("flushed", 1, 1, nil),
		op("joined", 3, 1, nil),
		op("flushed", 0, 0, nil), // a Flush: nothing to join
		op("joined", 4, 3, &store.RunUpdate{Steps: &three, OutputTokens: &out, Result: &result}),
		op("flushed", 2, 1, nil),
	}
	if j := coalesce([]*appendOp{batch[1], batch[3], batch[5]}); j != nil {
		t.Fatal("ops around an empty Flush were joined")
	}
	s.commit(batch)
	for i, o := range batch {
		if err := <-o.done; err != nil {
			t.Fatalf("op %d: %v", i, err)
		}
	}
	for id, want := range map[string]int{"joined": 6, "flushed": 2} {
		evs, err := s.Events(ctx, id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != want {
			t.Errorf("run %s: %d events, want %d", id, len(evs), want)
		}
	}
	r, err := s.GetRun(ctx, "joined")
	if err != nil {
		t.Fatal(err)
	}
	if r.LastSeq != 6 || r.Steps != 3 || r.InputTokens != 10 || r.OutputTokens != 30 || r.Currency != "USD" || r.Result != "done" {
		t.Errorf("joined run row: last seq %d, steps %d, tokens %d/%d, currency %q, result %q; want 6, 3, 10/30, USD, done",
			r.LastSeq, r.Steps, r.InputTokens, r.OutputTokens, r.Currency, r.Result)
	}
}

// A release queued behind a failed append of the same worker fails with it
// in their batch, and the run stays leased: a worker whose last events did
// not land must not end its run as if they had.
func TestReleaseAfterAFailedAppendInItsBatch(t *testing.T) {
	ctx := context.Background()
	s := openTemp(t)
	now := time.Now()
	r := createAndClaim(t, s, "r", "w", base)
	gap := &appendOp{req: store.AppendRequest{RunID: "r", Epoch: r.LeaseEpoch,
		Events: []store.Event{{RunID: "r", Seq: 7, Type: "step_started", At: now, Payload: []byte(`{}`)}}}}
	done := store.StatusCompleted
	release, released := s.releaseOp("r", r.LeaseEpoch, store.RunUpdate{Status: &done})
	s.commit([]*appendOp{gap, release})
	if err := <-release.done; !errors.Is(err, store.ErrConflict) {
		t.Fatalf("release after a failed append: %v, want the append's conflict", err)
	}
	if *released {
		t.Fatal("the release reports the lease released")
	}
	got, err := s.GetRun(ctx, "r")
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != store.StatusRunning || got.LeaseOwner != "w" {
		t.Fatalf("run is %s, leased by %q; want running, leased by w", got.Status, got.LeaseOwner)
	}
	// Released on its own, it ends the run.
	release, released = s.releaseOp("r", r.LeaseEpoch, store.RunUpdate{Status: &done})
	s.clearSticky("r")
	s.commit([]*appendOp{release})
	if err := <-release.done; err != nil || !*released {
		t.Fatalf("release: %v (released %v)", err, *released)
	}
	if got, _ = s.GetRun(ctx, "r"); got.Status != store.StatusCompleted || got.LeaseOwner != "" {
		t.Fatalf("run is %s, leased by %q; want completed, no lease", got.Status, got.LeaseOwner)
	}
}
