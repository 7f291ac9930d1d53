// Package blobcrypt seals every blob a tenant stores with a data key of
// its own, so that destroying the key (an erasure, an expired payload)
// makes every copy of the content unreadable, backups of the blob folder
// or the bucket included. It implements store.Blobs over another
// store.Blobs (the blob folder or S3), which only ever sees ciphertext.
//
// For a plaintext p with sum = sha256(p), stored by tenant T:
//
//   - the data key (DEK) is 32 random bytes, one per (T, sum); it is kept in
//     the run store (store.BlobKey), wrapped (AES-256-GCM) by T's key, which
//     is derived from the master key with HKDF-SHA256 and never stored;
//   - the sealed object is "apb1" || nonce || AES-256-GCM(DEK, p) with the
//     additional data T and sum; the nonce is HMAC-SHA256(DEK, sum), so a
//     key seals exactly one plaintext and a second put rewrites the same
//     bytes (a damaged copy is repaired, as before);
//   - the back end names the object by the sha256 of the sealed bytes, so
//     its key says nothing about the plaintext: a backup cannot confirm a
//     guessed content by its hash.
//
// The hash chain and every Content reference keep naming sha256(p): a
// read checks the plaintext against it after opening the seal. A blob put
// before sealing existed (no key row) is read from the back end under sum
// as it was written: legacy blobs stay readable and purgeable.
package blobcrypt

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentplane/agentplane/store"
)

// Keys is where the data keys live: the run store (both back ends
// implement it). See store.RetentionStore for the methods' contracts.
type Keys interface {
	PutBlobKey(ctx context.Context, k *store.BlobKey) (*store.BlobKey, error)
	GetBlobKey(ctx context.Context, tenant string, sum [32]byte) (*store.BlobKey, error)
	RemoveBlobKey(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error
}

// Deleter is a back end's tenant store that can delete an object (the
// blob folder and S3 do). Deleting what is not there is not an error.
type Deleter interface {
	DeleteBlob(ctx context.Context, sum [32]byte) error
}

// Overhead is what sealing adds to a blob: a plaintext may be at most
// store.MaxBlobSize - Overhead bytes.
const Overhead = len(magic) + nonceSize + 16

const (
	magic     = "apb1"
	nonceSize = 12
)

// Options configure New.
type Options struct {
	// Backend keeps the sealed objects.
	Backend store.Blobs
	// Keys keeps the wrapped data keys.
	Keys Keys
	// MasterKey is 32 bytes; every process sharing the stores must use
	// the same (see CheckValue).
	MasterKey []byte
	// Clock stamps LastPut (default time.Now).
	Clock func() time.Time
}

// Sealed is a store.Blobs sealing each tenant's blobs. It is safe for
// concurrent use.
type Sealed struct {
	o Options
	// keks are the tenants' derived keys: a run takes its tenant's view
	// of the blobs at every activity, and HKDF is most of what that costs.
	// They depend only on the master key and the tenant's name, so they
	// never go stale; the map starts over past maxTenantKeys entries.
	mu   sync.Mutex
	keks map[string][]byte
}

// maxTenantKeys bounds Sealed.keks (a variable for the tests).
var maxTenantKeys = 4096

var _ store.Blobs = (*Sealed)(nil)

// New checks o and returns the sealing store.
func New(o Options) (*Sealed, error) {
	if len(o.MasterKey) != 32 {
		return nil, fmt.Errorf("blob encryption: the master key is %d bytes, want 32", len(o.MasterKey))
	}
	if o.Backend == nil || o.Keys == nil {
		return nil, errors.New("blob encryption: a back end and a key table are required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Sealed{o: o}, nil
}

// CheckValue is a value derived from the master key that a store keeps
// from the first open on, so that a process started with another master
// key is refused at start rather than failing every read.
func CheckValue(master []byte) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte("agentplane blob master key check v1"))
	return m.Sum(nil)
}

// Backend returns the store the sealed objects are kept in.
func (s *Sealed) Backend() store.Blobs { return s.o.Backend }

// Blobs implements store.Blobs.
func (s *Sealed) Blobs(tenant string) store.BlobStore {
	if err := store.CheckTenant(tenant); err != nil {
		return store.RefuseBlobs(fmt.Errorf("blob encryption: %w", err))
	}
	kek, err := s.tenantKey(tenant)
	if err != nil {
		return store.RefuseBlobs(fmt.Errorf("blob encryption: derive the tenant key: %w", err))
	}
	return &tenantBlobs{s: s, tenant: tenant, back: s.o.Backend.Blobs(tenant), kek: kek}
}

// tenantKey returns tenant's key, derived from the master key with HKDF
// once per tenant (per maxTenantKeys tenants). The returned slice is
// shared and only ever read.
func (s *Sealed) tenantKey(tenant string) ([]byte, error) {
	s.mu.Lock()
	kek, ok := s.keks[tenant]
	s.mu.Unlock()
	if ok {
		return kek, nil
	}
	kek, err := hkdf.Key(sha256.New, s.o.MasterKey, nil, "agentplane blob tenant key v1\x00"+tenant, 32)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.keks == nil || len(s.keks) >= maxTenantKeys {
		s.keks = make(map[string][]byte)
	}
	s.keks[tenant] = kek
	s.mu.Unlock()
	return kek, nil
}

// Object returns the back end's name of tenant's content sum: the sealed
// object's hash for sealed content, sum itself for legacy content (for
// tamper tests and tooling).
func (s *Sealed) Object(ctx context.Context, tenant string, sum [32]byte) [32]byte {
	k, err := s.o.Keys.GetBlobKey(ctx, tenant, sum)
	if err != nil || k.Object == ([32]byte{}) {
		return sum
	}
	return k.Object
}

// Remove makes tenant's content sum unreadable for good: its data key is
// destroyed (or a tombstone recorded for legacy content), then the stored
// object is deleted. Content put again after notPutAfter is in use again
// and left alone (store.ErrConflict). Removing twice is not an error.
func (s *Sealed) Remove(ctx context.Context, tenant string, sum [32]byte, size int64, reason string, at, notPutAfter time.Time) error {
	k, err := s.o.Keys.GetBlobKey(ctx, tenant, sum)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if err := s.o.Keys.RemoveBlobKey(ctx, tenant, sum, size, reason, at, notPutAfter); err != nil {
		return err
	}
	return DeleteObjects(ctx, s.o.Backend.Blobs(tenant), k, sum)
}

// DeleteObjects deletes what the back end may hold of content sum: the
// sealed object k names (when k is not nil) and a legacy plaintext copy.
func DeleteObjects(ctx context.Context, back store.BlobStore, k *store.BlobKey, sum [32]byte) error {
	d, ok := back.(Deleter)
	if !ok {
		return fmt.Errorf("blob %x: this blob store cannot delete", sum[:6])
	}
	if k != nil && k.Object != ([32]byte{}) {
		if err := d.DeleteBlob(ctx, k.Object); err != nil {
			return err
		}
	}
	return d.DeleteBlob(ctx, sum)
}

type tenantBlobs struct {
	s      *Sealed
	tenant string
	back   store.BlobStore
	kek    []byte
}

func (b *tenantBlobs) keyAAD(sum [32]byte) []byte {
	return []byte("dek\x00" + b.tenant + "\x00" + hex.EncodeToString(sum[:]))
}

func (b *tenantBlobs) blobAAD(sum [32]byte) []byte {
	return []byte("blob\x00" + b.tenant + "\x00" + hex.EncodeToString(sum[:]))
}

func gcm(key []byte) (cipher.AEAD, error) {
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(blk)
}

func (b *tenantBlobs) wrap(sum [32]byte, dek []byte) ([]byte, error) {
	a, err := gcm(b.kek)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, nonceSize)
	rand.Read(nonce)
	return a.Seal(nonce, nonce, dek, b.keyAAD(sum)), nil
}

func (b *tenantBlobs) unwrap(k *store.BlobKey) ([]byte, error) {
	a, err := gcm(b.kek)
	if err != nil {
		return nil, err
	}
	if len(k.Wrapped) < nonceSize {
		return nil, fmt.Errorf("blob %x: data key: %w", k.Sum, store.ErrCorrupt)
	}
	dek, err := a.Open(nil, k.Wrapped[:nonceSize], k.Wrapped[nonceSize:], b.keyAAD(k.Sum))
	if err != nil {
		return nil, fmt.Errorf("blob %x: the data key does not open with this tenant's key (another master key?): %w", k.Sum[:6], store.ErrCorrupt)
	}
	return dek, nil
}

func (b *tenantBlobs) seal(sum [32]byte, dek, plain []byte) ([]byte, error) {
	a, err := gcm(dek)
	if err != nil {
		return nil, err
	}
	m := hmac.New(sha256.New, dek)
	m.Write(sum[:])
	nonce := m.Sum(nil)[:nonceSize]
	out := make([]byte, 0, len(magic)+nonceSize+len(plain)+a.Overhead())
	out = append(append(out, magic...), nonce...)
	return a.Seal(out, nonce, plain, b.blobAAD(sum)), nil
}

func (b *tenantBlobs) open(sum [32]byte, dek, sealed []byte) ([]byte, error) {
	a, err := gcm(dek)
	if err != nil {
		return nil, err
	}
	if len(sealed) < len(magic)+nonceSize || !bytes.HasPrefix(sealed, []byte(magic)) {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	rest := sealed[len(magic):]
	plain, err := a.Open(nil, rest[:nonceSize], rest[nonceSize:], b.blobAAD(sum))
	if err != nil || sha256.Sum256(plain) != sum {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	return plain, nil
}

// PutBlob implements store.BlobStore: the content's key is created on
// its first put (or after it was removed), then the sealed bytes are
// written, every time.
func (b *tenantBlobs) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	if len(data) > store.MaxBlobSize-Overhead {
		return sum, fmt.Errorf("blob of %d bytes: larger than the %d a blob may hold", len(data), store.MaxBlobSize-Overhead)
	}
	now := b.s.o.Clock().UTC()
	k, err := b.s.o.Keys.GetBlobKey(ctx, b.tenant, sum)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return sum, fmt.Errorf("blob encryption: %w", err)
	}
	if err != nil || k.Wrapped == nil {
		dek := make([]byte, 32)
		rand.Read(dek)
		wrapped, err := b.wrap(sum, dek)
		if err != nil {
			return sum, err
		}
		sealed, err := b.seal(sum, dek, data)
		if err != nil {
			return sum, err
		}
		k = &store.BlobKey{Tenant: b.tenant, Sum: sum, Size: int64(len(data)), Wrapped: wrapped,
			Object: sha256.Sum256(sealed), CreatedAt: now}
	}
	k.LastPut = now
	if k, err = b.s.o.Keys.PutBlobKey(ctx, k); err != nil {
		return sum, fmt.Errorf("blob encryption: store the data key: %w", err)
	}
	dek, err := b.unwrap(k) // the key in force: another put may have won
	if err != nil {
		return sum, err
	}
	sealed, err := b.seal(sum, dek, data)
	if err != nil {
		return sum, err
	}
	obj, err := b.back.PutBlob(ctx, sealed)
	if err != nil {
		return sum, err
	}
	if obj != k.Object {
		return sum, fmt.Errorf("blob %x: sealed object %x, its key names %x: %w", sum[:6], obj[:6], k.Object[:6], store.ErrCorrupt)
	}
	return sum, nil
}

// key returns the live key of sum, nil for legacy content, or the error a
// read answers (store.RemovedError for removed content).
func (b *tenantBlobs) key(ctx context.Context, sum [32]byte) (*store.BlobKey, error) {
	k, err := b.s.o.Keys.GetBlobKey(ctx, b.tenant, sum)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("blob encryption: %w", err)
	}
	if k.Wrapped == nil {
		return nil, &store.RemovedError{Sum: sum, Reason: k.Reason, At: k.RemovedAt}
	}
	return k, nil
}

// GetBlob implements store.BlobStore.
func (b *tenantBlobs) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	k, err := b.key(ctx, sum)
	if err != nil {
		return nil, err
	}
	if k == nil {
		return b.back.GetBlob(ctx, sum) // legacy: stored as plaintext under its hash
	}
	dek, err := b.unwrap(k)
	if err != nil {
		return nil, err
	}
	sealed, err := b.back.GetBlob(ctx, k.Object)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	case errors.Is(err, store.ErrCorrupt):
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	case err != nil:
		return nil, err
	}
	return b.open(sum, dek, sealed)
}

// BlobSize implements store.BlobStore: the plaintext's size, once the
// sealed object is known to be there.
func (b *tenantBlobs) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	k, err := b.key(ctx, sum)
	if err != nil {
		return 0, err
	}
	if k == nil {
		return b.back.BlobSize(ctx, sum)
	}
	if _, err := b.back.BlobSize(ctx, k.Object); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return 0, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
		}
		return 0, err
	}
	return k.Size, nil
}
