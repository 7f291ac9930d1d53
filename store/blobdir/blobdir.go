// Package blobdir is the blob folder: the embedded default store.Blobs,
// one file per blob under a directory, each tenant in its own folder
// (ROOT/<tenant>/<first two hex digits>/<other 62>). A tenant's store opens
// only paths under its own folder, so a hash another tenant stored is a
// file it never looks at: absent and foreign answer the same ErrNotFound.
//
// A put writes a temporary file (ROOT/.tmp, a name no tenant can have),
// fsyncs it, renames it into place and fsyncs the folder; a get hashes what
// it read and refuses a mismatch with store.ErrCorrupt.
package blobdir

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/agentplane/agentplane/store"
)

// Dir is a blob folder. It implements store.Blobs.
type Dir struct{ root string }

var _ store.Blobs = (*Dir)(nil)

// Open opens (creating if needed) the blob folder at root.
func Open(root string) (*Dir, error) {
	if err := os.MkdirAll(filepath.Join(root, ".tmp"), 0o700); err != nil {
		return nil, fmt.Errorf("blob folder: %w", err)
	}
	return &Dir{root: root}, nil
}

// Root returns the folder's path.
func (d *Dir) Root() string { return d.root }

// Blobs implements store.Blobs.
func (d *Dir) Blobs(tenant string) store.BlobStore {
	if err := store.CheckTenant(tenant); err != nil {
		return store.RefuseBlobs(fmt.Errorf("blob folder: %w", err))
	}
	return &tenantDir{d: d, tenant: tenant}
}

// Path returns where tenant's blob of hash sum lives (for tamper tests and
// tooling), or "" for an invalid tenant name.
func (d *Dir) Path(tenant string, sum [32]byte) string {
	if store.CheckTenant(tenant) != nil {
		return ""
	}
	h := hex.EncodeToString(sum[:])
	return filepath.Join(d.root, tenant, h[:2], h[2:])
}

type tenantDir struct {
	d      *Dir
	tenant string
}

// PutBlob implements store.BlobStore. An existing blob is replaced, not
// trusted: its bytes may have been damaged since they were written, and
// skipping the write would let a caller time whether content exists.
func (b *tenantDir) PutBlob(ctx context.Context, data []byte) ([32]byte, error) {
	sum := sha256.Sum256(data)
	if len(data) > store.MaxBlobSize {
		return sum, fmt.Errorf("blob of %d bytes: larger than the %d a blob may hold", len(data), store.MaxBlobSize)
	}
	p := b.d.Path(b.tenant, sum)
	dir := filepath.Dir(p)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sum, fmt.Errorf("blob folder: %w", err)
	}
	if err := writeFile(filepath.Join(b.d.root, ".tmp"), p, data); err != nil {
		return sum, fmt.Errorf("blob folder: put %x: %w", sum[:8], err)
	}
	if f, err := os.Open(dir); err == nil {
		f.Sync()
		f.Close()
	}
	return sum, nil
}

// writeFile writes data to a temporary file in tmpDir, fsyncs it and
// renames it to p.
func writeFile(tmpDir, p string, data []byte) error {
	f, err := os.CreateTemp(tmpDir, "blob-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// GetBlob implements store.BlobStore: the bytes read are hashed, and bytes
// that do not match sum are refused with store.ErrCorrupt.
func (b *tenantDir) GetBlob(ctx context.Context, sum [32]byte) ([]byte, error) {
	f, err := os.Open(b.d.Path(b.tenant, sum))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("blob folder: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, store.MaxBlobSize+1))
	if err != nil {
		return nil, fmt.Errorf("blob folder: read %x: %w", sum[:8], err)
	}
	if len(data) > store.MaxBlobSize || sha256.Sum256(data) != sum {
		return nil, fmt.Errorf("blob %x: %w", sum, store.ErrCorrupt)
	}
	return data, nil
}

// BlobSize implements store.BlobStore.
func (b *tenantDir) BlobSize(ctx context.Context, sum [32]byte) (int64, error) {
	st, err := os.Stat(b.d.Path(b.tenant, sum))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, fmt.Errorf("blob %x: %w", sum, store.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("blob folder: %w", err)
	}
	return st.Size(), nil
}

// DeleteBlob removes the tenant's blob sum (retention and erasure); a blob
// that is not there is not an error.
func (b *tenantDir) DeleteBlob(ctx context.Context, sum [32]byte) error {
	err := os.Remove(b.d.Path(b.tenant, sum))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob folder: delete %x: %w", sum[:8], err)
	}
	return nil
}

// Legacy lists the blobs of the layout before blobs were kept per tenant
// (ROOT/<aa>/<other 62 hex digits>, no tenant), which no tenant's store
// reads. A tenant folder is told apart by holding folders, not files.
func (d *Dir) Legacy() ([][32]byte, error) {
	tops, err := os.ReadDir(d.root)
	if err != nil {
		return nil, fmt.Errorf("blob folder: %w", err)
	}
	var out [][32]byte
	for _, top := range tops {
		if !top.IsDir() || len(top.Name()) != 2 {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(d.root, top.Name()))
		if err != nil {
			return nil, fmt.Errorf("blob folder: %w", err)
		}
		for _, e := range ents {
			b, err := hex.DecodeString(top.Name() + e.Name())
			if !e.Type().IsRegular() || err != nil || len(b) != 32 || hex.EncodeToString(b) != top.Name()+e.Name() {
				continue
			}
			out = append(out, [32]byte(b))
		}
	}
	return out, nil
}

// AdoptLegacy copies the legacy blob sum into each of tenants (after
// checking its bytes) and removes the legacy file. A damaged legacy blob is
// left where it is, unadopted, and reported.
func (d *Dir) AdoptLegacy(ctx context.Context, sum [32]byte, tenants []string) error {
	h := hex.EncodeToString(sum[:])
	p := filepath.Join(d.root, h[:2], h[2:])
	data, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("blob folder: %w", err)
	}
	if sha256.Sum256(data) != sum {
		return fmt.Errorf("legacy blob %x: %w", sum, store.ErrCorrupt)
	}
	for _, t := range tenants {
		if _, err := d.Blobs(t).PutBlob(ctx, data); err != nil {
			return err
		}
	}
	return os.Remove(p)
}
