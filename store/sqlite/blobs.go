package sqlite

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentplane/agentplane/store"
)

// blobDir stores blobs as files named by their sha256, two levels deep.
type blobDir struct{ root string }

func newBlobDir(root string) (*blobDir, error) {
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("blob store: %w", err)
	}
	return &blobDir{root: root}, nil
}

func (b *blobDir) path(sum [32]byte) string {
	h := hex.EncodeToString(sum[:])
	return filepath.Join(b.root, h[:2], h[2:])
}

// PutBlob implements store.BlobStore: write to a temporary file, fsync,
// rename into place, fsync the directory. An existing blob is replaced, not
// trusted: its bytes may have been damaged since they were written, and
// skipping the write would let a caller time whether content exists.
func (s *Store) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	p := s.blobs.path(sum)
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sum, err
	}
	f, err := os.CreateTemp(filepath.Join(s.blobs.root, "tmp"), "blob-*")
	if err != nil {
		return sum, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return sum, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return sum, err
	}
	if err := f.Close(); err != nil {
		return sum, err
	}
	if err := os.Rename(tmp, p); err != nil {
		return sum, err
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return sum, nil
}

// GetBlob implements store.BlobStore: the bytes read are hashed, and bytes
// that do not match sum are refused with store.ErrCorrupt.
func (s *Store) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	data, err := os.ReadFile(s.blobs.path(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if sha256.Sum256(data) != sum {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	return data, nil
}

// BlobSize implements store.BlobStore.
func (s *Store) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	st, err := os.Stat(s.blobs.path(sum))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	}
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

// BlobPath returns where a blob lives on disk (for tamper tests and tooling).
func (s *Store) BlobPath(sum [32]byte) string { return s.blobs.path(sum) }
