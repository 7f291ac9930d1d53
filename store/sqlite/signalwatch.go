package sqlite

import (
	"context"
	"database/sql"
	"sync"
	"time"
)

// Every step of a run asks for its pending signals, and almost every answer
// is none. signalWatch lets PendingSignals give that answer without a query
// when nothing can have changed since it last found none: signal ids only
// grow (AUTOINCREMENT), so SQLite's sequence of the signals table is a
// version of the table that every process writing it advances. The writer
// reads it in each group commit's transaction; a signal sent through this
// store advances it at once; one sent by another process on the same
// database is seen at this process's next group commit, and an answer is
// only reused while the version is younger than signalFreshness (an older
// one is read again, by a reader, before the answer is given). A cached
// answer is only ever "none": a signal can be seen late, by at most that
// bound, never twice or out of order.
const signalFreshness = 50 * time.Millisecond

type signalWatch struct {
	mu sync.Mutex
	// freshness is how long a version is trusted (signalFreshness; tests
	// change it).
	freshness time.Duration
	version   int64
	seen      time.Time        // when version was read
	none      map[string]int64 // run id -> version at which it had none pending
	queries   int64            // pending-signal queries made (for tests)
}

// signalVersionSQL reads the version: the largest signal id ever given.
const signalVersionSQL = "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'signals'), 0)"

// readVersion reads the version in the writer's transaction; publish makes
// it current once that transaction has committed.
func (w *writeStmts) readVersion(ctx context.Context, tx *sql.Tx) (int64, error) {
	var v int64
	err := tx.StmtContext(ctx, w.signalVersion).QueryRowContext(ctx).Scan(&v)
	return v, err
}

func (sw *signalWatch) publish(v int64, at time.Time) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if v >= sw.version {
		sw.version, sw.seen = v, at
	}
}

// sent records a signal sent through this store: every cached answer is
// stale.
func (sw *signalWatch) sent(id int64) {
	sw.publish(id, time.Now())
}

// known reports whether run is known to have no pending signal, and the
// version to record its answer under if it has none (ok false: do not).
func (sw *signalWatch) known(runID string) (none bool, version int64, ok bool) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if time.Since(sw.seen) >= sw.freshness {
		return false, 0, false
	}
	if v, found := sw.none[runID]; found && v == sw.version {
		return true, 0, false
	}
	return false, sw.version, true
}

// querying counts a query of a run's pending signals.
func (sw *signalWatch) querying() {
	sw.mu.Lock()
	sw.queries++
	sw.mu.Unlock()
}

// found records that run had no pending signal at version.
func (sw *signalWatch) found(runID string, version int64) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.none == nil {
		sw.none = map[string]int64{}
	}
	if len(sw.none) >= maxWatchedRuns {
		clear(sw.none)
	}
	sw.none[runID] = version
}

// forget drops run's cached answer (its lease ended).
func (sw *signalWatch) forget(runID string) {
	sw.mu.Lock()
	delete(sw.none, runID)
	sw.mu.Unlock()
}

// maxWatchedRuns bounds the cache; past it, it starts again empty.
const maxWatchedRuns = 1 << 16
