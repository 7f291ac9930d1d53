package postgres

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/store/storetest"
)

// TestChangeFeed: a Store watching hears the appends and releases another
// Store (another process) commits, and none that rolled back; when its
// listening connection is killed it reports a resync once it is back and
// goes on hearing changes.
func TestChangeFeed(t *testing.T) {
	dsn := pgtest.DSN(t)
	watcher, writer := open(t, dsn), open(t, dsn)
	ctx, cancel := context.WithCancel(t.Context())
	changes := make(chan store.Change, 64)
	done := make(chan error, 1)
	go func() {
		done <- watcher.Watch(ctx, func(c store.Change) { changes <- c })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch returned %v after its context ended, want nil", err)
		}
	})
	next := func(what string) store.Change {
		t.Helper()
		select {
		case c := <-changes:
			return c
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: no change heard in 30s", what)
			return store.Change{}
		}
	}
	if c := next("start"); c != (store.Change{}) {
		t.Fatalf("first change %+v, want the resync that starts the feed", c)
	}

	ok := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	now := storetest.Base
	ok("create", writer.CreateRun(t.Context(), &store.Run{ID: "run_a", Tenant: "t", Agent: "a", AgentVersion: 1, Mode: "async",
		Status: store.StatusQueued, CreatedAt: now, UpdatedAt: now}))
	run, err := writer.ClaimRunByID(t.Context(), "run_a", "w", time.Minute, now)
	ok("claim", err)
	ev := store.Event{RunID: "run_a", Seq: 1, Type: "run_started", At: now, Payload: []byte(`{}`)}
	ev.Hash = store.ChainHash(ev.PrevHash, &ev)
	// Refused (stale epoch): rolled back, so never announced.
	if err := writer.Append(t.Context(), store.AppendRequest{RunID: "run_a", Epoch: run.LeaseEpoch + 7, Events: []store.Event{ev}, Durable: true}); err == nil {
		t.Fatal("append under a stale epoch succeeded")
	}
	ok("append", writer.Append(t.Context(), store.AppendRequest{RunID: "run_a", Epoch: run.LeaseEpoch, Events: []store.Event{ev}, Durable: true}))
	if c := next("append"); c != (store.Change{RunID: "run_a", Seq: 1}) {
		t.Fatalf("after the append heard %+v, want run_a up to 1 (and nothing of the refused append)", c)
	}
	st := store.StatusWaiting
	ok("release", writer.ReleaseRun(t.Context(), "run_a", run.LeaseEpoch, store.RunUpdate{Status: &st}))
	if c := next("release"); c != (store.Change{RunID: "run_a", Seq: 0}) {
		t.Fatalf("after the release heard %+v, want run_a's status", c)
	}

	// Kill the listening connection, as a failover or a restart would.
	conn, err := pgx.Connect(t.Context(), dsn)
	ok("connect", err)
	defer conn.Close(context.Background())
	tag, err := conn.Exec(t.Context(), "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query = 'LISTEN "+changeChannel+"'")
	ok("terminate the listener", err)
	if tag.RowsAffected() != 1 {
		t.Fatalf("terminated %d listening connections, want 1", tag.RowsAffected())
	}
	if c := next("reconnect"); c != (store.Change{}) {
		t.Fatalf("after the listener was killed heard %+v, want a resync", c)
	}
	// Foreign payloads on the channel are dropped, not misread.
	for _, p := range []string{"", "run_a", "run_a -1", "run_a x", "run\x01 2", strings.Repeat("r", 300) + " 1"} {
		_, err := conn.Exec(t.Context(), "SELECT pg_notify($1, $2)", changeChannel, p)
		ok("notify", err)
	}
	run, err = writer.ClaimRunByID(t.Context(), "run_a", "w", time.Minute, now.Add(time.Hour))
	if err != nil {
		// Waiting without a timer or a signal is not claimable: send one.
		ok("signal", writer.SendSignal(t.Context(), &store.Signal{RunID: "run_a", Kind: "message", CreatedAt: now}))
		run, err = writer.ClaimRunByID(t.Context(), "run_a", "w", time.Minute, now.Add(time.Hour))
		ok("claim again", err)
	}
	ev2 := store.Event{RunID: "run_a", Seq: 2, Type: "signal", At: now, Payload: []byte(`{}`), PrevHash: ev.Hash}
	ev2.Hash = store.ChainHash(ev2.PrevHash, &ev2)
	ok("append after reconnect", writer.Append(t.Context(), store.AppendRequest{RunID: "run_a", Epoch: run.LeaseEpoch, Events: []store.Event{ev2}}))
	if c := next("append after reconnect"); c != (store.Change{RunID: "run_a", Seq: 2}) {
		t.Fatalf("after the reconnect heard %+v, want run_a up to 2", c)
	}
}
