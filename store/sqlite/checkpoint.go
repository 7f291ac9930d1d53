package sqlite

import (
	"context"
	"sync/atomic"
	"time"
)

// The write-ahead log is copied into the database file by a checkpointer of
// its own, on a reading connection, rather than only by SQLite's automatic
// checkpoint, which runs inside the commit that crosses its threshold: on
// the single writing connection, every append queued meanwhile waited for
// the copy and its fsync. A passive checkpoint takes no write lock, so the
// writer goes on committing while it runs.
//
// A passive checkpoint alone never lets the log start again from its
// beginning while appends keep coming (the writer restarts it only when
// every frame has been copied, and it is always appending more): under
// steady load the log grew without bound. So the writer still
// checkpoints, but only past walAutoCheckpoint pages, when the checkpointer
// has already copied all but the last frames: the writer's pass is short,
// completes, and its next transaction starts the log again.
const (
	// walAutoCheckpoint is the log's size in pages (4 KB) past which the
	// writer checkpoints in its commit (SQLite's default is 1,000).
	walAutoCheckpoint = 4000
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
