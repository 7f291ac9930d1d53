package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentplane/agentplane/store"
)

// The change feed: every append and release notifies the channel
// changeChannel in its own transaction, so the notification is delivered
// (to every process listening) exactly when the change commits, and never
// for one that rolled back. Each process listens on one connection of its
// own, outside the pool.

// changeChannel is the LISTEN/NOTIFY channel of run changes. A payload is
// "RUN_ID SEQ", far below PostgreSQL's 8000-byte payload limit.
const changeChannel = "agentplane_runs"

// notifySQL notifies the change of run $1 up to seq $2 (0: its status).
const notifySQL = "SELECT pg_notify('" + changeChannel + "', $1::text || ' ' || $2::bigint::text)"

// maxChangePayload bounds a payload the listener accepts: longer ones
// (never sent by agentplane) are dropped.
const maxChangePayload = 256

// feedBackoff bounds the wait before reconnecting a lost listener.
const (
	feedBackoffMin = 100 * time.Millisecond
	feedBackoffMax = 5 * time.Second
)

// Watch implements store.ChangeFeed with LISTEN on a dedicated
// connection. A lost connection is reported to fn as the zero Change once
// it is back (changes committed meanwhile were not heard), after waits
// that double from 100ms to 5s while the database stays unreachable.
func (s *Store) Watch(ctx context.Context, fn func(store.Change)) error {
	backoff := feedBackoffMin
	for {
		started := time.Now()
		err := s.listen(ctx, fn)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(started) > time.Minute {
			backoff = feedBackoffMin // it had been up: reconnect at once
		}
		s.log.Warn("change feed lost; streams poll until it is back", "err", classify(err), "retry_in", backoff)
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil
		}
		backoff = min(backoff*2, feedBackoffMax)
	}
}

// listen holds one listening connection until it fails or ctx ends.
func (s *Store) listen(ctx context.Context, fn func(store.Change)) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, s.pool.Config().ConnConfig.Copy())
	cancel()
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+changeChannel); err != nil {
		return err
	}
	// Whatever committed before LISTEN took effect was not heard.
	fn(store.Change{})
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if c, ok := parseChange(n.Payload); ok {
			fn(c)
		} else {
			s.log.Warn("change feed: payload dropped", "bytes", len(n.Payload))
		}
	}
}

// parseChange reads "RUN_ID SEQ"; anything else (anyone with access to
// the database can notify the channel) is refused.
func parseChange(p string) (store.Change, bool) {
	if len(p) > maxChangePayload {
		return store.Change{}, false
	}
	id, seqText, ok := strings.Cut(p, " ")
	if !ok || id == "" {
		return store.Change{}, false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c >= 0x7f {
			return store.Change{}, false
		}
	}
	seq, err := strconv.ParseInt(seqText, 10, 64)
	if err != nil || seq < 0 {
		return store.Change{}, false
	}
	return store.Change{RunID: id, Seq: seq}, true
}

// notifyChange queues the notification of run's change in tx.
func notifyChange(ctx context.Context, tx pgx.Tx, runID string, seq int64) error {
	if _, err := tx.Exec(ctx, notifySQL, runID, seq); err != nil {
		return fmt.Errorf("notify the change of run %s: %w", runID, err)
	}
	return nil
}
