// Package sqlite is the embedded default store of agentplane: one SQLite
// database (pure Go, WAL, synchronous=FULL) plus, unless another blob store
// is chosen (Options.Blobs), the per-tenant blob folder (store/blobdir),
// both under one data directory.
//
// Event appends from every run go through one writer goroutine that commits
// whatever is queued in a single transaction (group commit), so many
// concurrent runs share each fsync. Each run's part of a batch is fenced by
// the run's lease epoch (its run-row update names the epoch and the seq it
// follows): a worker that lost its lease cannot write. A batch in which one
// part fails is written again with a savepoint per part, so a failure in
// one run does not fail the others. The writer hands what it committed to
// the process's commit feeds (FeedCommits: the telemetry tail).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobcrypt"
	"github.com/agentplane/agentplane/store/blobdir"

	sqlitedrv "modernc.org/sqlite" // also the database/sql driver "sqlite"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configure Open.
type Options struct {
	// Dir is the data directory; it is created if missing.
	Dir string
	// MaxBatch bounds how many appends one group commit takes (default
	// 4096, half the queue). With many runs appending, a commit rewrites
	// every page each run's part touches (the run's last page of events
	// above all), so the pages written per step fall as batches grow: at 64
	// runs, 4.5 pages a step with batches of 256, 2.5 with 1,024. A batch
	// is only as big as what is queued when the writer takes it: with few
	// runs, batches stay small and commits frequent.
	MaxBatch int
	// BusyTimeout is how long a write waits for another process's write
	// lock before failing with store.ErrUnavailable (default 10s).
	BusyTimeout time.Duration
	Logger      *slog.Logger
	// Blobs is where blobs are kept; nil means the blob folder of the data
	// directory (Dir/blobs). The run store and the blob store are chosen
	// independently.
	Blobs store.Blobs
	// BlobKey is the 32-byte master key blobs are sealed under (package
	// store/blobcrypt); nil keeps blobs as plaintext, as before sealing
	// existed. A store once opened with a key refuses another.
	BlobKey []byte
}

// Store implements store.Store.
type Store struct {
	dir    string
	w      writer  // the single writing connection
	r      *sql.DB // readers
	blobs  store.Blobs
	sealed *blobcrypt.Sealed // nil: blobs kept as plaintext
	log    *slog.Logger
	queue  chan *appendOp
	done   chan struct{}
	closed sync.Once
	wg     sync.WaitGroup

	maxBatch int
	stmts    *writeStmts
	reads    *readStmts

	// closeMu is held shared while an append is being queued and
	// exclusively by Close, so that nothing is queued once the writer may
	// have stopped.
	closeMu  sync.RWMutex
	isClosed bool

	mu     sync.Mutex
	sticky map[string]map[int64]error // run id -> lease epoch -> failure of a non-durable append

	feedMu sync.Mutex
	feedID int64
	feeds  map[int64]func(string, []store.Event) // FeedCommits

	commits chan struct{} // the writer committed: wakes the checkpointer
	stats   writerStats
	sigw    signalWatch
}

var _ store.Store = (*Store)(nil)

// Open opens (creating if needed) the store in o.Dir and applies migrations.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("sqlite store: empty data directory")
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	if o.MaxBatch <= 0 {
		o.MaxBatch = 4096
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 10 * time.Second
	}
	if err := useFdatasync(); err != nil {
		return nil, err
	}
	path := filepath.Join(o.Dir, "agentplane.db")
	// The writer checkpoints only once the log passes walAutoCheckpoint
	// pages, by when the checkpointer has copied nearly all of it (see
	// checkpoint.go), and keeps up to 64 MB of pages in its cache: a
	// batch's dirty pages must fit, or SQLite spills them into the log
	// before the commit and writes them again in it.
	dsn := fmt.Sprintf("file:%s?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(%d)&_pragma=foreign_keys(1)&_pragma=secure_delete(1)&_pragma=wal_autocheckpoint(%d)&_pragma=cache_size(-65536)&_txlock=immediate",
		path, o.BusyTimeout.Milliseconds(), walAutoCheckpoint)
	w, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	r, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)")
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite store: %w", err)
	}
	// Every reading connection stays open: one opened anew parses the
	// schema and prepares each statement again (with the default of two
	// idle connections, concurrent runs churned through them at every step).
	// 32 of them: with 8, runs at 64 at once spent more time waiting for a
	// connection (held by a reader the scheduler had set aside) than
	// reading.
	r.SetMaxOpenConns(32)
	r.SetMaxIdleConns(32)
	r.SetConnMaxLifetime(0)
	s := &Store{
		dir: o.Dir, w: writer{w}, r: r, log: o.Logger,
		queue: make(chan *appendOp, 8192), done: make(chan struct{}), commits: make(chan struct{}, 1),
		maxBatch: o.MaxBatch, sticky: map[string]map[int64]error{}, sigw: signalWatch{freshness: signalFreshness},
	}
	if err := s.migrate(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	stmts, err := prepareWrites(ctx, w)
	if err != nil {
		s.closeDBs()
		return nil, err
	}
	s.stmts = stmts
	if s.reads, err = prepareReads(ctx, r); err != nil {
		s.closeDBs()
		return nil, err
	}
	s.blobs = o.Blobs
	if s.blobs == nil {
		d, err := blobdir.Open(filepath.Join(o.Dir, "blobs"))
		if err != nil {
			s.closeDBs()
			return nil, err
		}
		s.blobs = d
	}
	if o.BlobKey != nil {
		if err := s.CheckBlobKey(ctx, blobcrypt.CheckValue(o.BlobKey)); err != nil {
			s.closeDBs()
			return nil, fmt.Errorf("sqlite store %s: %w", o.Dir, err)
		}
		if s.sealed, err = blobcrypt.New(blobcrypt.Options{Backend: s.blobs, Keys: s, MasterKey: o.BlobKey}); err != nil {
			s.closeDBs()
			return nil, err
		}
	}
	s.wg.Add(2)
	go s.writer()
	go s.checkpointer()
	return s, nil
}

// useFdatasync makes SQLite commit with fdatasync(2) rather than fsync(2),
// as SQLite built by its own configure script does on Linux: the data and
// the size a read needs reach the disk either way, but fsync also forces
// the file's timestamps through the file system's journal, which was most
// of what a commit waited for here (a group commit's fsync of the
// write-ahead log took 1.4 ms where the disk's own floor is 0.2 ms). The
// driver's switch is process-wide; every store of the process wants it.
var useFdatasync = sync.OnceValue(func() error {
	if _, err := sqlitedrv.Fdatasync(true); err != nil && !errors.Is(err, sqlitedrv.ErrFdatasyncUnavailable) {
		return fmt.Errorf("sqlite store: commit with fdatasync: %w", err)
	}
	return nil
})

// Dir returns the data directory.
func (s *Store) Dir() string { return s.dir }

// Close stops the writer after draining queued appends and closes the database.
func (s *Store) Close() error {
	s.closed.Do(func() {
		s.closeMu.Lock()
		s.isClosed = true
		s.closeMu.Unlock()
		close(s.done)
		s.wg.Wait()
	})
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	if s.stmts != nil {
		s.stmts.close()
	}
	if s.reads != nil {
		s.reads.close()
	}
	return errors.Join(s.w.Close(), s.r.Close())
}

// ErrSchemaNewer is returned by Open for a database written by a newer
// agentplane than this one.
var ErrSchemaNewer = errors.New("database schema is newer than this agentplane knows")

// ErrDamaged is returned by Open for a database that fails SQLite's
// integrity check.
var ErrDamaged = errors.New("database is damaged")

// checkIntegrity runs SQLite's quick_check, so that a process never serves
// from a damaged file: it refuses to start and says what was found.
func (s *Store) checkIntegrity(ctx context.Context) error {
	rows, err := s.w.QueryContext(ctx, "PRAGMA quick_check(5)")
	if err != nil {
		return fmt.Errorf("sqlite store %s: %w: %v; restore agentplane.db from a backup", s.dir, ErrDamaged, err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			return fmt.Errorf("sqlite store %s: %w: %v; restore agentplane.db from a backup", s.dir, ErrDamaged, err)
		}
		if line != "ok" {
			problems = append(problems, line)
		}
	}
	if err := rows.Err(); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("sqlite store %s: %w (integrity check: %s); restore agentplane.db from a backup", s.dir, ErrDamaged, strings.Join(problems, "; "))
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	if err := s.checkIntegrity(ctx); err != nil {
		return err
	}
	var ver int
	if err := s.w.QueryRowContext(ctx, "PRAGMA user_version").Scan(&ver); err != nil {
		return fmt.Errorf("sqlite store %s: read schema version: %w: %v", s.dir, ErrDamaged, err)
	}
	names, err := fs.Glob(migrations, "migrations/*.sql")
	if err != nil {
		return err
	}
	sort.Strings(names)
	if ver > len(names) {
		return fmt.Errorf("sqlite store %s: %w: the database is at version %d, this binary knows up to %d; run a newer agentplane, or use another data directory",
			s.dir, ErrSchemaNewer, ver, len(names))
	}
	for i, name := range names {
		n := i + 1
		if n <= ver {
			continue
		}
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		// The transaction is immediate (_txlock): another process opening
		// the same fresh directory at once may have applied this migration
		// since the version was read above.
		tx, err := s.w.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&ver); err != nil {
			tx.Rollback()
			return fmt.Errorf("sqlite store %s: read schema version: %w", s.dir, err)
		}
		if n <= ver {
			tx.Rollback()
			continue
		}
		for _, stmt := range strings.Split(string(body), ";") {
			if strings.TrimSpace(stmt) == "" {
				continue
			}
			if _, err := tx.ExecContext(ctx, stmt); err != nil {
				tx.Rollback()
				return fmt.Errorf("sqlite store: migration %s: %w", name, err)
			}
		}
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", n)); err != nil {
			tx.Rollback()
			return err
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("sqlite store: migration %s: %w", name, err)
		}
	}
	return nil
}

// writer is the writing connection, with its errors classified: SQLite
// busy or locked past the busy timeout, or out of disk, is
// store.ErrUnavailable (the API answers 503 and the client retries).
type writer struct{ *sql.DB }

func (w writer) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	res, err := w.DB.ExecContext(ctx, q, args...)
	return res, classify(err)
}

func (w writer) BeginTx(ctx context.Context, o *sql.TxOptions) (*sql.Tx, error) {
	tx, err := w.DB.BeginTx(ctx, o)
	return tx, classify(err)
}

// SQLite result codes (primary) that mean "not now" rather than "never".
const (
	sqliteBusy   = 5
	sqliteLocked = 6
	sqliteNoMem  = 7
	sqliteIOErr  = 10
	sqliteFull   = 13
)

// classify wraps the SQLite errors a retry may cure in store.ErrUnavailable.
func classify(err error) error {
	var se *sqlitedrv.Error
	if err == nil || !errors.As(err, &se) {
		return err
	}
	switch se.Code() & 0xff {
	case sqliteBusy, sqliteLocked, sqliteNoMem, sqliteIOErr, sqliteFull:
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

func micros(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMicro(v).UTC()
}
