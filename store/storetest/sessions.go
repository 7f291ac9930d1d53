package storetest

import (
	"context"
	"crypto/sha256"
	"slices"
	"testing"
	"time"

	"github.com/agentplane/agentplane/store"
)

// ExerciseSessions runs the conformance suite of store.SessionStore.
func ExerciseSessions(t *testing.T, s store.SessionStore) {
	ctx := context.Background()
	a := &store.Session{IDHash: sha256.Sum256([]byte("a")), Tenant: "acme", User: "ann", Scopes: []string{"runs:read", "runs:write"},
		Via: "api_key:k1", CreatedAt: Base, ExpiresAt: Base.Add(time.Hour)}
	b := &store.Session{IDHash: sha256.Sum256([]byte("b")), Tenant: "acme", User: "bob", Scopes: []string{"runs:read"},
		Via: "api_key:k2", CreatedAt: Base, ExpiresAt: Base.Add(3 * time.Hour)}
	ok(t, "PutSession(a)", s.PutSession(ctx, a))
	ok(t, "PutSession(b)", s.PutSession(ctx, b))
	wantErr(t, "PutSession(a again)", s.PutSession(ctx, a), store.ErrConflict)
	got, err := s.GetSession(ctx, a.IDHash)
	ok(t, "GetSession(a)", err)
	if got.Tenant != a.Tenant || got.User != a.User || !slices.Equal(got.Scopes, a.Scopes) || got.Via != a.Via ||
		!got.CreatedAt.Equal(a.CreatedAt) || !got.ExpiresAt.Equal(a.ExpiresAt) || got.IDHash != a.IDHash {
		t.Fatalf("GetSession = %+v, want %+v", got, a)
	}
	_, err = s.GetSession(ctx, sha256.Sum256([]byte("missing")))
	wantErr(t, "GetSession(missing)", err, store.ErrNotFound)

	n, err := s.DeleteExpiredSessions(ctx, Base.Add(2*time.Hour))
	ok(t, "DeleteExpiredSessions", err)
	if n != 1 {
		t.Fatalf("DeleteExpiredSessions removed %d sessions, want 1 (a)", n)
	}
	_, err = s.GetSession(ctx, a.IDHash)
	wantErr(t, "GetSession(a, expired and deleted)", err, store.ErrNotFound)
	ok(t, "DeleteSession(b)", s.DeleteSession(ctx, b.IDHash))
	_, err = s.GetSession(ctx, b.IDHash)
	wantErr(t, "GetSession(b, signed out)", err, store.ErrNotFound)
	ok(t, "DeleteSession(b again)", s.DeleteSession(ctx, b.IDHash))
}
