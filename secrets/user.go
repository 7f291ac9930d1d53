package secrets

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ErrNotConnected is wrapped by a credential source when the call's user
// has not connected their own account to the connector (per-user OAuth):
// the call must not run, and the user is told how to connect. No other
// identity stands in for theirs.
var ErrNotConnected = errors.New("account not connected")

// UserStore keeps secrets per tenant, user and connector: a user's OAuth
// grant for one server. It is optional (found by type assertion on a
// Store); FileStore and Memory implement it. Safe for concurrent use.
type UserStore interface {
	// GetUser returns the secret or an error wrapping ErrNotFound.
	GetUser(ctx context.Context, tenant, user, connector string) ([]byte, error)
	// PutUser creates or replaces a secret.
	PutUser(ctx context.Context, tenant, user, connector string, value []byte) error
	// DeleteUser removes a secret or returns an error wrapping ErrNotFound.
	DeleteUser(ctx context.Context, tenant, user, connector string) error
}

// maxUserSecretBytes bounds one user secret (a token record).
const maxUserSecretBytes = 64 << 10

func checkUserNames(tenant, user, connector string) error {
	return errors.Join(CheckName("tenant", tenant), CheckName("user", user), CheckName("connector", connector))
}

var _ UserStore = (*FileStore)(nil)

func (s *FileStore) userPath(tenant, user, connector string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + user + "\x00" + connector))
	return filepath.Join(s.dir, "users", hex.EncodeToString(sum[:16])+".sealed")
}

// GetUser implements UserStore.
func (s *FileStore) GetUser(_ context.Context, tenant, user, connector string) ([]byte, error) {
	if err := checkUserNames(tenant, user, connector); err != nil {
		return nil, err
	}
	return s.open(s.userPath(tenant, user, connector), sealed{Tenant: tenant, User: user, Connector: connector})
}

// PutUser implements UserStore: sealed like a tenant's secret, with the
// user bound into the additional data too.
func (s *FileStore) PutUser(_ context.Context, tenant, user, connector string, value []byte) error {
	if err := checkUserNames(tenant, user, connector); err != nil {
		return err
	}
	if len(value) == 0 || len(value) > maxUserSecretBytes {
		return fmt.Errorf("secrets: a user secret must be 1 byte to %d KiB", maxUserSecretBytes>>10)
	}
	return s.seal(filepath.Join(s.dir, "users"), s.userPath(tenant, user, connector), sealed{Tenant: tenant, User: user, Connector: connector}, value)
}

// DeleteUser implements UserStore.
func (s *FileStore) DeleteUser(_ context.Context, tenant, user, connector string) error {
	if err := checkUserNames(tenant, user, connector); err != nil {
		return err
	}
	err := os.Remove(s.userPath(tenant, user, connector))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("secrets: tenant %s, user %s, connector %s: %w", tenant, user, connector, ErrNotFound)
	}
	return err
}

var _ UserStore = (*Memory)(nil)

// GetUser implements UserStore.
func (m *Memory) GetUser(_ context.Context, tenant, user, connector string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.users[[3]string{tenant, user, connector}]
	if !ok {
		return nil, fmt.Errorf("secrets: tenant %s, user %s, connector %s: %w", tenant, user, connector, ErrNotFound)
	}
	return append([]byte(nil), v...), nil
}

// PutUser implements UserStore.
func (m *Memory) PutUser(_ context.Context, tenant, user, connector string, value []byte) error {
	if err := checkUserNames(tenant, user, connector); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.users[[3]string{tenant, user, connector}] = append([]byte(nil), value...)
	return nil
}

// DeleteUser implements UserStore.
func (m *Memory) DeleteUser(_ context.Context, tenant, user, connector string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [3]string{tenant, user, connector}
	if _, ok := m.users[k]; !ok {
		return fmt.Errorf("secrets: tenant %s, user %s, connector %s: %w", tenant, user, connector, ErrNotFound)
	}
	delete(m.users, k)
	return nil
}
