// Package postgres is the store of agentplane for many processes: every
// store interface (runs and leases, event logs with their hash chain and
// epoch fencing, the prompt-hash index, signals, agents, tools, principals,
// tenant settings, connectors, browser sessions and the API's idempotency
// keys, webhooks, quotas and fair claiming) on one PostgreSQL database
// through a pgx connection pool. Blobs are kept by the store.Blobs it is
// opened with (a folder, an S3 bucket), per tenant, not in the database.
//
// Whatever several processes must agree on is decided by the database:
// runs are claimed with FOR UPDATE SKIP LOCKED, so claimers never wait on
// one another and one run goes to one claimer; an append locks its run's
// row and checks the lease epoch and the next sequence number before it
// writes; an idempotency key and an approval's decision are unique
// constraints, so the first writer wins and the others read its record.
//
// The schema is created and upgraded by embedded migrations, each with an
// up and a down step; the version is recorded in schema_migrations, and a
// database whose schema is newer than this binary knows is refused.
// Failures to reach the database, an exhausted pool or a full disk are
// returned as store.ErrUnavailable (see docs/design/postgres.md).
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/blobcrypt"
)

//go:embed migrations/*.sql
var migrations embed.FS

// Options configure Open.
type Options struct {
	// DSN is a postgres:// URL. Its password is never printed: errors and
	// logs show Redact(DSN).
	DSN string
	// MaxConns bounds the pool (default: the DSN's pool_max_conns, else
	// 20: a serve process's workers, its API handlers and its webhook
	// dispatcher each hold one connection at a time).
	MaxConns int32
	Logger   *slog.Logger
	// Blobs is where blobs are kept (required): the run store and the blob
	// store are chosen independently (an S3 bucket, or a folder).
	Blobs store.Blobs
	// BlobKey is the 32-byte master key blobs are sealed under (package
	// store/blobcrypt); nil keeps blobs as plaintext. Every process
	// sharing the database must give the same key: another is refused.
	BlobKey []byte
	// StoredBlobKey, without BlobKey, seals blobs under a master key kept
	// in the database itself (created by the first process), so that
	// processes given no key agree. BlobKey given outside is stronger: a
	// database backup then holds no key that opens the blob store's.
	StoredBlobKey bool
}

// Store implements store.Store, store.APIStore, store.PrincipalStore,
// store.TenantStore, store.ConnectorStore and store.SessionStore on
// PostgreSQL. It is safe for concurrent use, and any
// number of Stores (in any number of processes) may share one database.
type Store struct {
	pool   *pgxpool.Pool
	log    *slog.Logger
	blobs  store.Blobs
	sealed *blobcrypt.Sealed // nil: blobs kept as plaintext
}

var (
	_ store.Store          = (*Store)(nil)
	_ store.APIStore       = (*Store)(nil)
	_ store.PrincipalStore = (*Store)(nil)
	_ store.TenantStore    = (*Store)(nil)
	_ store.ConnectorStore = (*Store)(nil)
	_ store.SessionStore   = (*Store)(nil)
)

// ErrSchemaNewer is returned by Open for a database migrated by a newer
// agentplane than this one.
var ErrSchemaNewer = errors.New("database schema is newer than this agentplane knows")

// Open connects to o.DSN, applies the migrations this binary has not yet
// applied, and refuses a database whose schema is newer than it knows.
func Open(ctx context.Context, o Options) (*Store, error) {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Blobs == nil {
		return nil, errors.New("postgres store: no blob store (Options.Blobs): blobs are kept outside the database")
	}
	cfg, err := pgxpool.ParseConfig(o.DSN)
	if err != nil {
		// The parse error can quote the DSN, password and all.
		return nil, fmt.Errorf("postgres store: %s is not a valid postgres:// URL", Redact(o.DSN))
	}
	switch {
	case o.MaxConns > 0:
		cfg.MaxConns = o.MaxConns
	case !strings.Contains(o.DSN, "pool_max_conns="):
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres store %s: %w", Redact(o.DSN), classify(err))
	}
	s := &Store{pool: pool, log: o.Logger, blobs: o.Blobs}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: %w", Redact(o.DSN), classify(err))
	}
	if err := s.migrateTo(ctx, len(upSteps())); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres store %s: %w", Redact(o.DSN), err)
	}
	if o.BlobKey == nil && o.StoredBlobKey {
		if o.BlobKey, err = s.storedBlobKey(ctx); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres store %s: blob master key: %w", Redact(o.DSN), err)
		}
	}
	if o.BlobKey != nil {
		if err := s.CheckBlobKey(ctx, blobcrypt.CheckValue(o.BlobKey)); err != nil {
			pool.Close()
			return nil, fmt.Errorf("postgres store %s: %w", Redact(o.DSN), err)
		}
		if s.sealed, err = blobcrypt.New(blobcrypt.Options{Backend: o.Blobs, Keys: s, MasterKey: o.BlobKey}); err != nil {
			pool.Close()
			return nil, err
		}
	}
	return s, nil
}

const defaultMaxConns = 20

// Close closes the pool; calls in flight fail with store.ErrUnavailable.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Redact returns dsn with its password replaced by xxxxx, for messages.
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || u.Scheme == "" {
		return "(a PostgreSQL DSN that does not parse)"
	}
	q := u.Query()
	if q.Has("password") {
		q.Set("password", "xxxxx")
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// upSteps lists the embedded up migrations in order; step n (1-based) is
// schema version n.
func upSteps() []string {
	names, _ := fs.Glob(migrations, "migrations/*.up.sql")
	sort.Strings(names)
	return names
}

// migrationLock is the advisory lock that keeps two processes starting at
// once from migrating together.
const migrationLock = 0x61676e74706c6e // "agntpln"

// SchemaVersion returns the schema version recorded in the database.
func (s *Store) SchemaVersion(ctx context.Context) (int, error) {
	return schemaVersion(ctx, s.pool)
}

type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func schemaVersion(ctx context.Context, q querier) (int, error) {
	if _, err := q.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version integer PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
		return 0, fmt.Errorf("schema version: %w", classify(err))
	}
	var v int
	if err := q.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM schema_migrations").Scan(&v); err != nil {
		return 0, fmt.Errorf("schema version: %w", classify(err))
	}
	return v, nil
}

// migrateTo moves the schema up or down to version target, one step per
// transaction, under the migration lock.
func (s *Store) migrateTo(ctx context.Context, target int) error {
	ups := upSteps()
	if target < 0 || target > len(ups) {
		return fmt.Errorf("migrate: no schema version %d (this binary knows 0 to %d)", target, len(ups))
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return classify(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", int64(migrationLock)); err != nil {
		return fmt.Errorf("migrate: take the migration lock: %w", classify(err))
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", int64(migrationLock))
	cur, err := schemaVersion(ctx, conn)
	if err != nil {
		return err
	}
	if cur > len(ups) {
		return fmt.Errorf("%w: the database is at version %d, this binary knows up to %d; run a newer agentplane, or point --store at another database",
			ErrSchemaNewer, cur, len(ups))
	}
	step := func(name string, v int, up bool) error {
		body, err := migrations.ReadFile(name)
		if err != nil {
			return err
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			return classify(err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, string(body)); err != nil {
			return fmt.Errorf("migration %s: %w", name, classify(err))
		}
		if up {
			_, err = tx.Exec(ctx, "INSERT INTO schema_migrations(version, applied_at) VALUES ($1, $2)", v, time.Now().UnixMicro())
		} else {
			_, err = tx.Exec(ctx, "DELETE FROM schema_migrations WHERE version = $1", v)
		}
		if err != nil {
			return fmt.Errorf("migration %s: %w", name, classify(err))
		}
		return classify(tx.Commit(ctx))
	}
	for v := cur + 1; v <= target; v++ {
		if err := step(ups[v-1], v, true); err != nil {
			return err
		}
	}
	for v := cur; v > target; v-- {
		if err := step(strings.TrimSuffix(ups[v-1], ".up.sql")+".down.sql", v, false); err != nil {
			return err
		}
	}
	return nil
}

// classify maps a driver error to the store's: a unique violation is
// store.ErrConflict; an unreachable server, a closed or exhausted pool, a
// full disk, a server shutting down or a lock timeout is
// store.ErrUnavailable. The driver's error stays in the chain for logs.
func classify(err error) error {
	if err == nil || errors.Is(err, pgx.ErrNoRows) || errors.Is(err, context.Canceled) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505": // unique_violation
			return fmt.Errorf("%w: %s exists already", store.ErrConflict, pe.ConstraintName)
		case strings.HasPrefix(pe.Code, "08"), // connection exception
			strings.HasPrefix(pe.Code, "53"),  // insufficient resources: disk full, out of memory, too many connections
			strings.HasPrefix(pe.Code, "57P"), // admin or crash shutdown, cannot connect now
			pe.Code == "55P03",                // lock not available
			pe.Code == "40001", pe.Code == "40P01",
			pe.Code == "58030": // io error
			return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
		}
		return err
	}
	var ce *pgconn.ConnectError
	var ne net.Error
	if errors.As(err, &ce) || errors.As(err, &ne) || pgconn.Timeout(err) || pgconn.SafeToRetry(err) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded) ||
		strings.Contains(err.Error(), "closed pool") || strings.Contains(err.Error(), "conn closed") {
		return fmt.Errorf("%w: %w", store.ErrUnavailable, err)
	}
	return err
}

// inTx runs f in a transaction and commits it; f's error rolls it back.
func (s *Store) inTx(ctx context.Context, f func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return classify(err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	if err := f(tx); err != nil {
		return classify(err)
	}
	return classify(tx.Commit(ctx))
}

func (s *Store) exec(ctx context.Context, q string, args ...any) (int64, error) {
	tag, err := s.pool.Exec(ctx, q, args...)
	return tag.RowsAffected(), classify(err)
}

// row wraps pgx.Row so that Scan's error is classified.
type row struct{ r pgx.Row }

func (r row) Scan(dst ...any) error { return classify(r.r.Scan(dst...)) }

func (s *Store) queryRow(ctx context.Context, q string, args ...any) row {
	return row{s.pool.QueryRow(ctx, q, args...)}
}

type scanner interface{ Scan(...any) error }

func queryAll[T any](ctx context.Context, q querier, sql string, args []any, scan func(scanner) (T, error)) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, classify(err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, v)
	}
	return out, classify(rows.Err())
}

// notFound turns pgx.ErrNoRows into store.ErrNotFound naming what.
func notFound(err error, what string) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
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

// blob returns b, or an empty slice for nil (bound as NULL otherwise).
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
