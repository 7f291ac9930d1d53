package sqlite

import (
	"context"
	"sync/atomic"
	"time"
)

// The write-ahead log is copied into the database file by a checkpointer of
// its own, on a reading connection, rather than by SQLite's automatic
// checkpoint, which runs inside the commit that crosses 1,000 pages: on the
// single writing connection, every append queued meanwhile waited for the
// copy and its fsync. A passive checkpoint takes no write lock, so the
// writer goes on committing while it runs.
const (
	// checkpointGap is the least time between two checkpoints.
	checkpointGap = 100 * time.Millisecond
	// checkpointIdle is how often the checkpointer looks without being
	// told of a commit (writes that bypass the group commit).
	checkpointIdle = time.Second
)

// writerStats are what the writer and the checkpointer have done (for
// tests and benchmarks).
type writerStats struct {
	batches atomic.Int64 // batches the writer began to write
	commits atomic.Int64 // group commits
	runs    atomic.Int64 // checkpoints run
	frames  atomic.Int64 // frames copied in all
}

// committed tells the checkpointer that the writer committed.
func (s *Store) committed() {
	s.stats.commits.Add(1)
	select {
	case s.commits <- struct{}{}:
	default:
	}
}

func (s *Store) checkpointer() {
	defer s.wg.Done()
	idle := time.NewTicker(checkpointIdle)
	defer idle.Stop()
	for {
		select {
		case <-s.done:
			return
		case <-s.commits:
		case <-idle.C:
		}
		s.checkpoint()
		select {
		case <-s.done:
			return
		case <-time.After(checkpointGap):
		}
	}
}

// checkpoint copies what it can of the log into the database file without
// waiting for readers or the writer.
func (s *Store) checkpoint() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var busy, logFrames, copied int64
	if err := s.r.QueryRowContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &logFrames, &copied); err != nil {
		s.log.Warn("checkpoint of the write-ahead log", "err", err)
		return
	}
	s.stats.runs.Add(1)
	if copied > 0 {
		s.stats.frames.Add(copied)
	}
}
