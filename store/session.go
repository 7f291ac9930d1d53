package store

import (
	"context"
	"time"
)

// Session is a browser's sign-in to the API (package api, docs/design/viewer.md):
// a principal copied from the credential that signed in, kept server-side so
// that signing out, or revoking that credential, ends it everywhere at once.
// The cookie holds a random secret; the store keeps only a hash of it, so a
// copy of the database gives no one a session.
type Session struct {
	// IDHash identifies the session: a hash of the cookie's secret.
	IDHash [32]byte
	Tenant string
	User   string
	Scopes []string
	// Via names the credential that signed in ("api_key:ID", "jwt:ISSUER");
	// every request made with the session checks that it still holds.
	Via       string
	CreatedAt time.Time
	ExpiresAt time.Time
}

// SessionStore persists browser sessions. Methods are safe for concurrent
// use; a session past its ExpiresAt is still returned by GetSession (the
// caller judges expiry by its own clock) until DeleteExpiredSessions
// removes it.
type SessionStore interface {
	// PutSession stores a new session; an existing IDHash is ErrConflict.
	PutSession(ctx context.Context, s *Session) error
	// GetSession returns a session by IDHash, or ErrNotFound.
	GetSession(ctx context.Context, idHash [32]byte) (*Session, error)
	// DeleteSession removes a session (signing out); a missing one is not
	// an error.
	DeleteSession(ctx context.Context, idHash [32]byte) error
	// DeleteExpiredSessions removes the sessions that expired at or before
	// now and says how many.
	DeleteExpiredSessions(ctx context.Context, now time.Time) (int, error)
}
