package secrets

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// KeyEnv is the environment variable FileStore reads its key from first:
// 32 bytes, base64 (standard or URL alphabet) or 64 hex digits.
const KeyEnv = "AGENTPLANE_SECRETS_KEY"

// FileOptions configure OpenFileStore.
type FileOptions struct {
	// Dir holds the sealed secrets; it is created (0700) if missing.
	Dir string
	// KeyFile is read when the environment gives no key.
	KeyFile string
	// CreateKey writes a fresh random key to KeyFile (0600), when the
	// first secret is stored, if neither the environment nor the file has
	// one. Convenient for a development data directory; in production give
	// the key through the environment or use a vault, so that the key does
	// not sit beside what it seals.
	CreateKey bool
	// Getenv reads the environment (os.Getenv when nil).
	Getenv func(string) string
}

// FileStore is the embedded default Store: one file per secret, sealed
// with AES-256-GCM. The tenant and connector are bound to each file as
// additional data, so a sealed file copied to another tenant's name does not
// open. Writes go to a temporary file renamed into place, so concurrent
// processes see either the old or the new secret.
type FileStore struct {
	dir string
	o   FileOptions

	mu   sync.Mutex
	aead cipher.AEAD // nil until a key exists (CreateKey, nothing stored yet)
}

// OpenFileStore loads the key and opens the store.
func OpenFileStore(o FileOptions) (*FileStore, error) {
	if o.Dir == "" {
		return nil, errors.New("secrets: no directory")
	}
	s := &FileStore{dir: o.Dir, o: o}
	key, err := loadKey(o)
	switch {
	case errors.Is(err, errNoKeyYet):
		// Created with the first secret.
	case err != nil:
		return nil, err
	default:
		if s.aead, err = newAEAD(key); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(block)
}

// cipher returns the AEAD, creating the key first when create is set and
// the store has none yet.
func (s *FileStore) cipher(create bool) (cipher.AEAD, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.aead != nil {
		return s.aead, nil
	}
	// Another process may have created the key since this store opened.
	key, err := loadKey(s.o)
	switch {
	case err == nil:
		if s.aead, err = newAEAD(key); err != nil {
			return nil, err
		}
		return s.aead, nil
	case !errors.Is(err, errNoKeyYet):
		return nil, err
	case !create:
		return nil, nil
	}
	key, err = createKey(s.o.KeyFile)
	if err != nil {
		return nil, err
	}
	if s.aead, err = newAEAD(key); err != nil {
		return nil, err
	}
	return s.aead, nil
}

var errNoKeyYet = errors.New("secrets: no key yet")

func loadKey(o FileOptions) ([]byte, error) {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := strings.TrimSpace(getenv(KeyEnv)); v != "" {
		k, err := ParseKey(v)
		if err != nil {
			return nil, fmt.Errorf("secrets: %s: %w", KeyEnv, err)
		}
		return k, nil
	}
	if o.KeyFile == "" {
		return nil, fmt.Errorf("secrets: no key: set %s or give a key file", KeyEnv)
	}
	data, err := os.ReadFile(o.KeyFile)
	if errors.Is(err, fs.ErrNotExist) && o.CreateKey {
		return nil, errNoKeyYet
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: key file: %w", err)
	}
	k, err := ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("secrets: key file %s: %w", o.KeyFile, err)
	}
	return k, nil
}

func createKey(path string) ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another process created it first: use theirs.
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("secrets: key file: %w", err)
		}
		return ParseKey(strings.TrimSpace(string(data)))
	}
	if err != nil {
		return nil, fmt.Errorf("secrets: key file: %w", err)
	}
	_, werr := f.WriteString(base64.StdEncoding.EncodeToString(k) + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		return nil, fmt.Errorf("secrets: key file: %w", err)
	}
	return k, nil
}

// LoadKey returns a 32-byte key: the one in environment variable env
// (base64 or hex) when set, else the one in the file at path, which is
// created (0600, a fresh random key) when it does not exist. Another
// process creating it at the same time wins, and its key is used.
func LoadKey(getenv func(string) string, env, path string) ([]byte, error) {
	if v := strings.TrimSpace(getenv(env)); v != "" {
		k, err := ParseKey(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", env, err)
		}
		return k, nil
	}
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return createKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	k, err := ParseKey(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("key file %s: %w", path, err)
	}
	return k, nil
}

// ParseKey reads a 32-byte key written as base64 or hex.
func ParseKey(s string) ([]byte, error) {
	if len(s) == 64 {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil && len(k) == 32 {
			return k, nil
		}
	}
	return nil, errors.New("want 32 bytes as base64 or 64 hex digits")
}

type sealed struct {
	Version   int    `json:"v"`
	Tenant    string `json:"tenant"`
	Connector string `json:"connector"`
	// User is set for a user's secret (UserStore), empty for a tenant's.
	User   string `json:"user,omitempty"`
	Nonce  []byte `json:"nonce"`
	Sealed []byte `json:"sealed"`
}

func (s *FileStore) path(tenant, connector string) string {
	sum := sha256.Sum256([]byte(tenant + "\x00" + connector))
	return filepath.Join(s.dir, hex.EncodeToString(sum[:16])+".sealed")
}

// aad binds a sealed value to its owner: a file copied to another name
// does not open.
func (rec sealed) aad() []byte {
	if rec.User != "" {
		return []byte("agentplane-user-secret-v1\x00" + rec.Tenant + "\x00" + rec.User + "\x00" + rec.Connector)
	}
	return []byte("agentplane-secret-v1\x00" + rec.Tenant + "\x00" + rec.Connector)
}

// Put implements Store.
func (s *FileStore) Put(_ context.Context, tenant, connector string, value []byte) error {
	if err := errors.Join(CheckName("tenant", tenant), CheckName("connector", connector)); err != nil {
		return err
	}
	if len(value) < MinSecretBytes || len(value) > 64<<10 {
		return fmt.Errorf("secrets: a secret must be %d bytes to 64 KiB", MinSecretBytes)
	}
	return s.seal(s.dir, s.path(tenant, connector), sealed{Tenant: tenant, Connector: connector}, value)
}

// seal writes value sealed under the record's names (bound as additional
// data) to path, through a temporary file in dir renamed into place.
func (s *FileStore) seal(dir, path string, rec sealed, value []byte) error {
	aead, err := s.cipher(true)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return err
	}
	rec.Version, rec.Nonce = 1, nonce
	rec.Sealed = aead.Seal(nil, nonce, value, rec.aad())
	data, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Sync(), tmp.Close()); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("secrets: %w", err)
	}
	return nil
}

func (s *FileStore) read(path string) (*sealed, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var rec sealed
	if err := json.Unmarshal(data, &rec); err != nil || rec.Version != 1 {
		return nil, fmt.Errorf("secrets: %s is not a sealed secret", filepath.Base(path))
	}
	return &rec, nil
}

// Get implements Store.
func (s *FileStore) Get(_ context.Context, tenant, connector string) ([]byte, error) {
	return s.open(s.path(tenant, connector), sealed{Tenant: tenant, Connector: connector})
}

// open reads the sealed file at path and opens it, refusing a file that
// names anything but want's tenant, user and connector.
func (s *FileStore) open(path string, want sealed) ([]byte, error) {
	what := fmt.Sprintf("tenant %s, connector %s", want.Tenant, want.Connector)
	if want.User != "" {
		what = fmt.Sprintf("tenant %s, user %s, connector %s", want.Tenant, want.User, want.Connector)
	}
	rec, err := s.read(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("secrets: %s: %w", what, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if rec.Tenant != want.Tenant || rec.Connector != want.Connector || rec.User != want.User {
		return nil, fmt.Errorf("secrets: %s: the sealed file names another owner", what)
	}
	aead, err := s.cipher(false)
	if err != nil {
		return nil, err
	}
	if aead == nil {
		return nil, fmt.Errorf("secrets: %s: a sealed secret exists but there is no key to open it (set %s)", what, KeyEnv)
	}
	v, err := aead.Open(nil, rec.Nonce, rec.Sealed, want.aad())
	if err != nil {
		return nil, fmt.Errorf("secrets: %s: does not open with this key (wrong key, or the file was tampered with)", what)
	}
	return v, nil
}

// Delete implements Store.
func (s *FileStore) Delete(_ context.Context, tenant, connector string) error {
	err := os.Remove(s.path(tenant, connector))
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("secrets: tenant %s, connector %s: %w", tenant, connector, ErrNotFound)
	}
	return err
}

// List implements Store.
func (s *FileStore) List(_ context.Context, tenant string) ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sealed") {
			continue
		}
		rec, err := s.read(filepath.Join(s.dir, e.Name()))
		if err != nil {
			continue
		}
		if rec.Tenant == tenant && rec.User == "" {
			out = append(out, rec.Connector)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Memory is an in-memory Store (and UserStore) for tests.
type Memory struct {
	m     map[[2]string][]byte
	mu    sync.Mutex
	users map[[3]string][]byte
}

// NewMemory returns an empty in-memory store. It is not safe for
// concurrent writes of tenant secrets; fill those before use. User
// secrets may be written concurrently.
func NewMemory() *Memory { return &Memory{m: map[[2]string][]byte{}, users: map[[3]string][]byte{}} }

// Get implements Store.
func (m *Memory) Get(_ context.Context, tenant, connector string) ([]byte, error) {
	v, ok := m.m[[2]string{tenant, connector}]
	if !ok {
		return nil, fmt.Errorf("secrets: tenant %s, connector %s: %w", tenant, connector, ErrNotFound)
	}
	return append([]byte(nil), v...), nil
}

// Put implements Store.
func (m *Memory) Put(_ context.Context, tenant, connector string, value []byte) error {
	if len(value) < MinSecretBytes {
		return fmt.Errorf("secrets: a secret must be at least %d bytes", MinSecretBytes)
	}
	m.m[[2]string{tenant, connector}] = append([]byte(nil), value...)
	return nil
}

// Delete implements Store.
func (m *Memory) Delete(_ context.Context, tenant, connector string) error {
	k := [2]string{tenant, connector}
	if _, ok := m.m[k]; !ok {
		return fmt.Errorf("secrets: tenant %s, connector %s: %w", tenant, connector, ErrNotFound)
	}
	delete(m.m, k)
	return nil
}

// List implements Store.
func (m *Memory) List(_ context.Context, tenant string) ([]string, error) {
	var out []string
	for k := range m.m {
		if k[0] == tenant {
			out = append(out, k[1])
		}
	}
	sort.Strings(out)
	return out, nil
}
