package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentplane/agentplane/store"
)

// PutSession implements store.SessionStore.
func (s *Store) PutSession(ctx context.Context, ss *store.Session) error {
	if ss.Tenant == "" || ss.User == "" || ss.Via == "" {
		return errors.New("put session: tenant, user and via are required")
	}
	_, err := s.w.ExecContext(ctx, `INSERT INTO sessions(id_hash, tenant, user_id, scopes, via, created_at, expires_at)
		VALUES (?,?,?,?,?,?,?)`, ss.IDHash[:], ss.Tenant, ss.User, strings.Join(ss.Scopes, " "), ss.Via,
		micros(ss.CreatedAt), micros(ss.ExpiresAt))
	if err != nil && strings.Contains(err.Error(), "UNIQUE") {
		return fmt.Errorf("session: %w", store.ErrConflict)
	}
	return err
}

// GetSession implements store.SessionStore.
func (s *Store) GetSession(ctx context.Context, idHash [32]byte) (*store.Session, error) {
	var ss store.Session
	var hash []byte
	var scopes string
	var created, expires int64
	err := s.r.QueryRowContext(ctx, `SELECT id_hash, tenant, user_id, scopes, via, created_at, expires_at
		FROM sessions WHERE id_hash = ?`, idHash[:]).Scan(&hash, &ss.Tenant, &ss.User, &scopes, &ss.Via, &created, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("session: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	copy(ss.IDHash[:], hash)
	ss.Scopes = strings.Fields(scopes)
	ss.CreatedAt, ss.ExpiresAt = fromMicros(created), fromMicros(expires)
	return &ss, nil
}

// DeleteSession implements store.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, idHash [32]byte) error {
	_, err := s.w.ExecContext(ctx, "DELETE FROM sessions WHERE id_hash = ?", idHash[:])
	return err
}

// DeleteExpiredSessions implements store.SessionStore.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) (int, error) {
	res, err := s.w.ExecContext(ctx, "DELETE FROM sessions WHERE expires_at <= ?", micros(now))
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	return int(n), err
}
