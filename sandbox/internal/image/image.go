// Package image resolves a tool manifest's image to a root filesystem
// directory: a directory is used as it is (read-only); an OCI image layout
// ("oci:DIR", or "oci:DIR:TAG" to pick a manifest by its
// org.opencontainers.image.ref.name) is unpacked once, layer by layer with
// whiteouts, into a cache keyed by the manifest digest. Layers are
// untrusted archives: entries that would leave the root, device nodes and
// setuid bits are dropped, and sizes are capped.
package image

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// MaxUnpacked bounds the bytes one image may unpack to.
const MaxUnpacked = 4 << 30

// Cache unpacks OCI images under Dir.
type Cache struct {
	Dir string
	mu  sync.Mutex
}

// NewCache returns a cache rooted at dir.
func NewCache(dir string) *Cache { return &Cache{Dir: dir} }

// Rootfs returns the root filesystem directory of img.
func (c *Cache) Rootfs(ctx context.Context, img string) (string, error) {
	if rest, ok := strings.CutPrefix(img, "oci:"); ok {
		layout, tag := rest, ""
		if i := strings.LastIndex(rest, ":"); i > 0 && !strings.Contains(rest[i:], "/") {
			layout, tag = rest[:i], rest[i+1:]
		}
		return c.unpack(ctx, layout, tag)
	}
	if !filepath.IsAbs(img) {
		return "", fmt.Errorf("image %q: want an absolute directory or oci:DIR", img)
	}
	st, err := os.Stat(img)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", img, err)
	}
	if !st.IsDir() {
		return "", fmt.Errorf("image %q is not a directory", img)
	}
	return img, nil
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations"`
}

type index struct {
	Manifests []descriptor `json:"manifests"`
}

type manifest struct {
	Layers []descriptor `json:"layers"`
}

func readBlob(layout, digest string, limit int64) ([]byte, error) {
	f, err := openBlob(layout, digest)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("blob %s too large", digest)
	}
	sum := sha256.Sum256(data)
	if "sha256:"+hex.EncodeToString(sum[:]) != digest {
		return nil, fmt.Errorf("blob %s: digest mismatch", digest)
	}
	return data, nil
}

func openBlob(layout, digest string) (*os.File, error) {
	alg, hexd, ok := strings.Cut(digest, ":")
	if !ok || alg != "sha256" || len(hexd) != 64 || strings.Trim(hexd, "0123456789abcdef") != "" {
		return nil, fmt.Errorf("unsupported digest %q", digest)
	}
	return os.Open(filepath.Join(layout, "blobs", alg, hexd))
}

func (c *Cache) unpack(ctx context.Context, layout, tag string) (string, error) {
	idxData, err := os.ReadFile(filepath.Join(layout, "index.json"))
	if err != nil {
		return "", fmt.Errorf("OCI layout %s: %w", layout, err)
	}
	var idx index
	if err := json.Unmarshal(idxData, &idx); err != nil {
		return "", fmt.Errorf("OCI layout %s: index.json: %w", layout, err)
	}
	var pick *descriptor
	for i := range idx.Manifests {
		d := &idx.Manifests[i]
		if tag == "" || d.Annotations["org.opencontainers.image.ref.name"] == tag {
			if pick != nil && tag == "" {
				return "", fmt.Errorf("OCI layout %s has several manifests: name one as oci:DIR:TAG", layout)
			}
			pick = d
		}
	}
	if pick == nil {
		return "", fmt.Errorf("OCI layout %s: no manifest %q", layout, tag)
	}
	mdata, err := readBlob(layout, pick.Digest, 4<<20)
	if err != nil {
		return "", err
	}
	var m manifest
	if err := json.Unmarshal(mdata, &m); err != nil {
		return "", fmt.Errorf("manifest %s: %w", pick.Digest, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	dst := filepath.Join(c.Dir, strings.ReplaceAll(pick.Digest, ":", "-"), "rootfs")
	if _, err := os.Stat(filepath.Join(dst, "..", "complete")); err == nil {
		return dst, nil
	}
	_ = os.RemoveAll(filepath.Dir(dst))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return "", err
	}
	// Traversable by sandbox uids.
	for _, d := range []string{c.Dir, filepath.Dir(dst)} {
		_ = os.Chmod(d, 0o711)
	}
	var total int64
	for _, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := applyLayer(layout, l, dst, &total); err != nil {
			_ = os.RemoveAll(filepath.Dir(dst))
			return "", fmt.Errorf("layer %s: %w", l.Digest, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dst, "..", "complete"), nil, 0o644); err != nil {
		return "", err
	}
	return dst, nil
}

func applyLayer(layout string, l descriptor, dst string, total *int64) error {
	f, err := openBlob(layout, l.Digest)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	var r io.Reader = io.TeeReader(f, h)
	if strings.HasSuffix(l.MediaType, "gzip") {
		gz, err := gzip.NewReader(r)
		if err != nil {
			return err
		}
		defer gz.Close()
		r = gz
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name := filepath.Clean("/" + hdr.Name)
		if name == "/" {
			continue
		}
		target := filepath.Join(dst, name)
		if !safeParent(dst, target) {
			return fmt.Errorf("entry %q resolves outside the root", hdr.Name)
		}
		base := filepath.Base(name)
		if base == ".wh..wh..opq" {
			ents, _ := os.ReadDir(filepath.Dir(target))
			for _, e := range ents {
				_ = os.RemoveAll(filepath.Join(filepath.Dir(target), e.Name()))
			}
			continue
		}
		if strings.HasPrefix(base, ".wh.") {
			_ = os.RemoveAll(filepath.Join(filepath.Dir(target), strings.TrimPrefix(base, ".wh.")))
			continue
		}
		mode := os.FileMode(hdr.Mode).Perm() // no setuid, setgid or sticky
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
			_ = os.Chmod(target, mode|0o111)
		case tar.TypeReg:
			*total += hdr.Size
			if *total > MaxUnpacked {
				return errors.New("image larger than the unpack limit")
			}
			_ = os.RemoveAll(target)
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			out, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
			if err != nil {
				return err
			}
			_, err = io.Copy(out, io.LimitReader(tr, hdr.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			_ = os.RemoveAll(target)
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			// The link is resolved inside the sandbox's root, not here.
			if err := os.Symlink(hdr.Linkname, target); err != nil {
				return err
			}
		case tar.TypeLink:
			src := filepath.Join(dst, filepath.Clean("/"+hdr.Linkname))
			if !safeParent(dst, src) {
				return fmt.Errorf("hard link %q leaves the root", hdr.Linkname)
			}
			_ = os.RemoveAll(target)
			if err := os.Link(src, target); err != nil {
				return err
			}
		default:
			// Devices, fifos and the like are not needed in a tool's root.
		}
	}
	_, _ = io.Copy(io.Discard, r)
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != l.Digest {
		return errors.New("digest mismatch")
	}
	return nil
}

// safeParent reports whether target's parent directory, with symlinks
// resolved, is still inside root: a layer cannot write through a symlink an
// earlier entry planted.
func safeParent(root, target string) bool {
	parent := filepath.Dir(target)
	for p := parent; ; p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			real, err := filepath.EvalSymlinks(p)
			if err != nil {
				return false
			}
			rootReal, _ := filepath.EvalSymlinks(root)
			return real == rootReal || strings.HasPrefix(real, rootReal+string(filepath.Separator))
		}
		if p == root || p == "/" {
			return true
		}
	}
}

// Entry is one top-level entry of a root filesystem as a sandbox sees it.
type Entry struct {
	// Name is the entry's name under /.
	Name string
	// Source is the host directory to bind read-only, or "" for a symlink.
	Source string
	// Target is the symlink's target.
	Target string
}

// TopLevel lists what of the root filesystem dir goes into a sandbox's
// root. For the host's own root (host set) only what programs need to run
// is taken (/usr and the lib and bin links or directories); a tool's image
// gives everything but the mount points the sandbox provides itself.
func TopLevel(dir string, host bool) ([]Entry, error) {
	provided := map[string]bool{"proc": true, "dev": true, "sys": true, "tmp": true, "run": true, "workspace": true, ".agentplane": true}
	hostKeep := map[string]bool{"usr": true, "lib": true, "lib64": true, "lib32": true, "libx32": true, "bin": true, "sbin": true}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, ent := range ents {
		name := ent.Name()
		if provided[name] || (host && !hostKeep[name]) {
			continue
		}
		p := filepath.Join(dir, name)
		switch {
		case ent.Type()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				out = append(out, Entry{Name: name, Target: t})
			}
		case ent.IsDir():
			out = append(out, Entry{Name: name, Source: p})
		}
	}
	return out, nil
}
