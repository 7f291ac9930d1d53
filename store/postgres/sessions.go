package postgres

import (
	"context"
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
	_, err := s.exec(ctx, `INSERT INTO sessions(id_hash, tenant, user_id, scopes, via, created_at, expires_at)
		VALUES ($1,$2,$3,$4,$5,$6,$7)`, ss.IDHash[:], ss.Tenant, ss.User, strings.Join(ss.Scopes, " "), ss.Via,
		micros(ss.CreatedAt), micros(ss.ExpiresAt))
	if err != nil {
		return fmt.Errorf("put session: %w", err)
	}
	return nil
}

// GetSession implements store.SessionStore.
func (s *Store) GetSession(ctx context.Context, idHash [32]byte) (*store.Session, error) {
	var (
		ss               store.Session
		scopes           string
		created, expires int64
	)
	err := s.queryRow(ctx, `SELECT tenant, user_id, scopes, via, created_at, expires_at FROM sessions WHERE id_hash = $1`,
		idHash[:]).Scan(&ss.Tenant, &ss.User, &scopes, &ss.Via, &created, &expires)
	if err != nil {
		return nil, notFound(err, "session")
	}
	ss.IDHash = idHash
	ss.Scopes = strings.Fields(scopes)
	ss.CreatedAt, ss.ExpiresAt = fromMicros(created), fromMicros(expires)
	return &ss, nil
}

// DeleteSession implements store.SessionStore.
func (s *Store) DeleteSession(ctx context.Context, idHash [32]byte) error {
	if _, err := s.exec(ctx, "DELETE FROM sessions WHERE id_hash = $1", idHash[:]); err != nil {
		return fmt.Errorf("delete session: %w", err)
	}
	return nil
}

// DeleteExpiredSessions implements store.SessionStore.
func (s *Store) DeleteExpiredSessions(ctx context.Context, now time.Time) (int, error) {
	n, err := s.exec(ctx, "DELETE FROM sessions WHERE expires_at <= $1", micros(now))
	if err != nil {
		return 0, fmt.Errorf("delete expired sessions: %w", err)
	}
	return int(n), nil
}
