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
	s, err := Open(ctx, Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now()
	epochs := map[string]int64{}
	for _, id := range []string{"good", "fenced", "gap"} {
		if err := s.CreateRun(ctx, &store.Run{ID: id, Tenant: "t", User: "u", Agent: "a", AgentVersion: 1, Task: "x",
			Mode: "async", Status: store.StatusQueued, CreatedAt: now}); err != nil {
			t.Fatal(err)
		}
		r, err := s.ClaimRunByID(ctx, id, "w", time.Minute, now)
		if err != nil {
			t.Fatal(err)
		}
		epochs[id] = r.LeaseEpoch
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

	// Hold the writing connection so that the appends below queue up while
	// the writer waits for it, and the failing ones share a batch with
	// good ones.
	conn, err := s.w.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps := 3
	for i := 1; i <= steps; i++ {
		if err := s.Append(ctx, store.AppendRequest{RunID: "good", Epoch: epochs["good"], Events: []store.Event{event("good", int64(i))}}); err != nil {
			t.Fatal(err)
		}
	}
	results := make(chan error, 3)
	durable := func(id string, epoch, seq int64) {
		go func() {
			results <- s.Append(ctx, store.AppendRequest{RunID: id, Epoch: epoch, Events: []store.Event{event(id, seq)}, Durable: true})
		}()
	}
	durable("fenced", epochs["fenced"]+1, 1)
	durable("gap", epochs["gap"], 5)
	durable("good", epochs["good"], int64(steps+1))
	// The writer took one or more of the buffered appends into a batch and
	// waits for the connection; the three durable ones queue for the next.
	for len(s.queue) < 3 {
		time.Sleep(time.Millisecond)
	}
	conn.Close()

	var errs []error
	for range 3 {
		errs = append(errs, <-results)
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
	for id, want := range map[string]int{"good": steps + 1, "fenced": 0, "gap": 0} {
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
