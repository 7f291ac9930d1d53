// Package image resolves a tool manifest's image to a root filesystem
// directory: a directory is used as it is (read-only); an OCI image layout
// ("oci:DIR", or "oci:DIR:TAG" to pick a manifest by its
// org.opencontainers.image.ref.name) is unpacked once, layer by layer with
// whiteouts, into a cache keyed by the manifest digest. Layers are
// untrusted archives: every create, chmod, link and removal goes through an
// os.Root of the unpack directory, which resolves each path beneath it and
// refuses symlinks that lead out, so nothing a layer holds (a symlink and
// then an entry of the same name or beneath it, a hard link out, absolute
// or ".." names, which are refused outright) touches anything outside;
// device nodes and setuid bits are dropped, and sizes are capped.
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
	"syscall"
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
	root, err := os.OpenRoot(dst)
	if err != nil {
		return "", err
	}
	defer root.Close()
	var total int64
	for _, l := range m.Layers {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		if err := applyLayer(layout, l, root, &total); err != nil {
			_ = os.RemoveAll(filepath.Dir(dst))
			return "", fmt.Errorf("layer %s: %w", l.Digest, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dst, "..", "complete"), nil, 0o644); err != nil {
		return "", err
	}
	return dst, nil
}

func applyLayer(layout string, l descriptor, root *os.Root, total *int64) error {
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
		name, err := entryName(hdr.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		if err := applyEntry(root, tr, hdr, name, total); err != nil {
			return fmt.Errorf("entry %q: %w", hdr.Name, err)
		}
	}
	_, _ = io.Copy(io.Discard, r)
	if "sha256:"+hex.EncodeToString(h.Sum(nil)) != l.Digest {
		return errors.New("digest mismatch")
	}
	return nil
}

// entryName turns a layer entry's name into a path relative to the root.
// A name that is absolute or climbs with ".." is refused: no honest layer
// has one, and a hostile one gets no second reading.
func entryName(n string) (string, error) {
	if n == "" || strings.ContainsRune(n, 0) || strings.HasPrefix(n, "/") {
		return "", fmt.Errorf("entry %q: names must be relative", n)
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", fmt.Errorf("entry %q: names may not climb with \"..\"", n)
		}
	}
	return filepath.Clean(n), nil
}

// applyEntry writes one entry through root, which resolves every path
// component beneath the root and refuses a symlink (absolute, or climbing
// out) that would leave it: an entry can neither be written through nor
// change the mode of anything outside, whatever earlier entries planted.
// The entry's own name is never followed: what is there is removed first
// (or, for a directory, kept only when it is a real directory).
func applyEntry(root *os.Root, tr io.Reader, hdr *tar.Header, name string, total *int64) error {
	dir, base := filepath.Dir(name), filepath.Base(name)
	if base == ".wh..wh..opq" {
		d, err := root.Open(dir)
		if err != nil {
			return nil // nothing to hide
		}
		ents, err := d.ReadDir(-1)
		d.Close()
		if err != nil {
			return err
		}
		for _, e := range ents {
			if err := root.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	if hidden, ok := strings.CutPrefix(base, ".wh."); ok {
		if hidden == "" || hidden == "." {
			return errors.New("empty whiteout")
		}
		return root.RemoveAll(filepath.Join(dir, hidden))
	}
	mode := os.FileMode(hdr.Mode).Perm() // no setuid, setgid or sticky
	if dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		if st, err := root.Lstat(name); err == nil && !st.IsDir() {
			if err := root.RemoveAll(name); err != nil {
				return err
			}
		}
		if err := root.Mkdir(name, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		// name is a real directory beneath the root now, never a link.
		return root.Chmod(name, mode|0o111)
	case tar.TypeReg:
		*total += hdr.Size
		if *total > MaxUnpacked {
			return errors.New("image larger than the unpack limit")
		}
		if err := root.RemoveAll(name); err != nil {
			return err
		}
		out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, io.LimitReader(tr, hdr.Size))
		return errors.Join(err, out.Close())
	case tar.TypeSymlink:
		if err := root.RemoveAll(name); err != nil {
			return err
		}
		// The link is resolved inside the sandbox's root, never here: root
		// refuses to follow it out of the bundle.
		return root.Symlink(hdr.Linkname, name)
	case tar.TypeLink:
		src, err := entryName(hdr.Linkname)
		if err != nil {
			return fmt.Errorf("hard link: %w", err)
		}
		if st, err := root.Lstat(src); err != nil || !st.Mode().IsRegular() {
			return fmt.Errorf("hard link to %q: not a regular file in the layer", hdr.Linkname)
		}
		if err := root.RemoveAll(name); err != nil {
			return err
		}
		return root.Link(src, name)
	default:
		// Devices, fifos and the like are not needed in a tool's root.
		return nil
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
