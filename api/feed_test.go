package api_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/api/apitest"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/trace"
)

// TestStreamWokenByAnotherProcess: two API processes on one PostgreSQL
// database; only the first has workers. Clients of the second follow runs
// the first executes, approving through the second, dropping the
// connection at random points and resuming with Last-Event-ID. With the
// streams' fallback poll set to an hour, a stream only moves when the
// store's change feed (LISTEN/NOTIFY) wakes it (or the client reconnects): every client must still
// receive every event of the log, in order, exactly once.
func TestStreamWokenByAnotherProcess(t *testing.T) {
	dsn := pgtest.DSN(t)
	// No heartbeats either: they would end a client's connection at its
	// byte allowance, and the reconnect reads the store.
	noPoll := func(o *api.Options) { o.StreamPoll, o.Heartbeat = time.Hour, time.Hour }
	pg := func(o *platform.Options) { o.Store = dsn }
	first := apitest.Start(t, apitest.Options{Platform: pg, API: noPoll})
	second := apitest.Join(t, first, apitest.Options{Platform: pg, API: func(o *api.Options) {
		noPoll(o)
		o.NoWorkers = true
	}})
	worker, watcher := fixtureOf(t, first), fixtureOf(t, second)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const runs = 3
	type result struct {
		id    string
		got   []api.Event
		conns int
	}
	done := make(chan result, runs)
	for i := range runs {
		id := worker.startAsync(priya)
		go func() {
			got, conns := resumingClient(t, watcher, id, rand.New(rand.NewPCG(seed, uint64(i))))
			done <- result{id, got, conns}
		}()
	}
	timeout := time.After(90 * time.Second)
	for range runs {
		var r result
		select {
		case r = <-done:
		case <-timeout:
			t.Fatal("streams on the second process did not reach the end of runs executed by the first: nothing woke them")
		}
		want, err := first.Platform.Store.Events(context.Background(), r.id, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(r.got) != len(want) {
			t.Fatalf("run %s: the second process streamed %d events over %d connections, the log has %d", r.id, len(r.got), r.conns, len(want))
		}
		for j := range want {
			if r.got[j].Seq != want[j].Seq || r.got[j].Type != want[j].Type || string(r.got[j].Payload) != string(want[j].Payload) ||
				r.got[j].Hash != fmt.Sprintf("%x", want[j].Hash) {
				t.Fatalf("run %s: event %d differs: got seq %d %s", r.id, j, r.got[j].Seq, r.got[j].Type)
			}
		}
		if last := r.got[len(r.got)-1].Type; last != trace.EvRunCompleted {
			t.Fatalf("run %s ended with %s", r.id, last)
		}
		t.Logf("run %s: %d events over %d connections to the second process", r.id, len(r.got), r.conns)
	}
}
