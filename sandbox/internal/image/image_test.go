package image

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layout writes an OCI image layout of one uncompressed layer holding hdrs
// (a regular file's body is its Linkname field's partner, body[i]).
func layout(t *testing.T, entries []entry) string {
	t.Helper()
	dir := t.TempDir()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.Size = int64(len(e.body))
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	blob := func(data []byte) string {
		sum := sha256.Sum256(data)
		d := hex.EncodeToString(sum[:])
		if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", d), data, 0o644); err != nil {
			t.Fatal(err)
		}
		return "sha256:" + d
	}
	layer := blob(buf.Bytes())
	m, _ := json.Marshal(map[string]any{"layers": []map[string]any{{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer, "size": buf.Len()}}})
	md := blob(m)
	idx, _ := json.Marshal(map[string]any{"manifests": []map[string]any{{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md, "size": len(m)}}})
	if err := os.WriteFile(filepath.Join(dir, "index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

type entry struct {
	hdr  tar.Header
	body string
}

func dirEnt(name string, mode int64) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: mode}}
}
func fileEnt(name, body string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg}, body: body}
}
func symEnt(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}}
}
func linkEnt(name, target string) entry {
	return entry{hdr: tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}}
}

// snapshot records every path, mode and content under dir.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		b.WriteString(p + " " + info.Mode().String())
		if info.Mode().IsRegular() {
			data, _ := os.ReadFile(p)
			b.WriteString(" " + string(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestHostile_LayerExtractionStaysInsideBundle unpacks crafted layers that
// try to reach a host directory beside the bundle: whatever a layer holds,
// nothing outside the unpack directory is created, changed, linked or
// removed.
func TestHostile_LayerExtractionStaysInsideBundle(t *testing.T) {
	cases := []struct {
		name    string
		entries func(host string) []entry
		// inside, when set, must hold in the unpacked root afterwards
		// (the layer was neutralised, not refused).
		inside func(t *testing.T, rootfs string)
	}{
		{"SymlinkThenFileThroughIt", func(host string) []entry {
			return []entry{symEnt("etc", host), fileEnt("etc/pwned", "x")}
		}, nil},
		{"SymlinkThenDirectoryOfTheSameName", func(host string) []entry {
			// The directory entry's mode must not land on the link's target.
			return []entry{symEnt("etc", host), dirEnt("etc", 0o777)}
		}, func(t *testing.T, rootfs string) {
			if st, err := os.Lstat(filepath.Join(rootfs, "etc")); err != nil || !st.IsDir() {
				t.Fatalf("etc should be a real directory in the root now: %v %v", st, err)
			}
		}},
		{"RelativeSymlinkClimbingOutThenDirectory", func(host string) []entry {
			return []entry{symEnt("etc", "../../../../../../../../.."+host), dirEnt("etc/", 0o777)}
		}, nil},
		{"SymlinkChainThenDirectory", func(host string) []entry {
			return []entry{symEnt("b", host), symEnt("a", "b"), dirEnt("a", 0o777)}
		}, nil},
		{"SymlinkThenFileOfTheSameName", func(host string) []entry {
			return []entry{symEnt("secret", host+"/secret"), fileEnt("secret", "overwritten")}
		}, func(t *testing.T, rootfs string) {
			if data, err := os.ReadFile(filepath.Join(rootfs, "secret")); err != nil || string(data) != "overwritten" {
				t.Fatalf("the file should replace the link inside the root: %q %v", data, err)
			}
		}},
		{"SymlinkThenWhiteoutThrough", func(host string) []entry {
			return []entry{symEnt("d", host), fileEnt("d/.wh.secret", ""), fileEnt("d/.wh..wh..opq", "")}
		}, nil},
		{"HardLinkToOutside", func(host string) []entry {
			return []entry{linkEnt("stolen", "../../../../../../.."+host+"/secret")}
		}, nil},
		{"HardLinkAbsolute", func(host string) []entry {
			return []entry{linkEnt("stolen", host+"/secret")}
		}, nil},
		{"HardLinkThroughSymlink", func(host string) []entry {
			return []entry{symEnt("h", host), linkEnt("stolen", "h/secret")}
		}, nil},
		{"DotDotPath", func(host string) []entry {
			return []entry{fileEnt("../../../../../../../.."+host+"/dotdot", "x"), fileEnt("a/../../escape", "x")}
		}, nil},
		{"AbsolutePath", func(host string) []entry {
			return []entry{fileEnt(host+"/abs", "x"), dirEnt(host, 0o777)}
		}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			host := filepath.Join(base, "host")
			if err := os.Mkdir(host, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(host, "secret"), []byte("host data"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(host, 0o700); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, host)
			cache := NewCache(filepath.Join(base, "cache"))
			rootfs, err := cache.Rootfs(context.Background(), "oci:"+layout(t, c.entries(host)))
			if after := snapshot(t, host); after != before {
				t.Fatalf("the host directory changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if c.inside != nil {
				if err != nil {
					t.Fatalf("a layer that can be neutralised was refused: %v", err)
				}
				c.inside(t, rootfs)
			}
			// Nothing outside the cache (the unpack directory) was created.
			ents, _ := os.ReadDir(base)
			for _, e := range ents {
				if e.Name() != "host" && e.Name() != "cache" {
					t.Fatalf("created %s beside the bundle", e.Name())
				}
			}
			if err == nil {
				// What was unpacked holds no link to the host's file.
				_ = filepath.Walk(rootfs, func(p string, info os.FileInfo, err error) error {
					if err == nil && info.Mode().IsRegular() {
						if data, _ := os.ReadFile(p); string(data) == "host data" {
							t.Errorf("%s holds the host file's content", p)
						}
					}
					return nil
				})
			}
		})
	}
}

// TestUnpackOrdinaryLayer: the usual shapes of a real layer still unpack.
func TestUnpackOrdinaryLayer(t *testing.T) {
	dir := layout(t, []entry{
		dirEnt("./usr/", 0o755), dirEnt("usr/bin/", 0o755), fileEnt("usr/bin/tool", "#!/bin/sh\n"),
		symEnt("bin", "usr/bin"), fileEnt("bin/viaLink", "y"), linkEnt("usr/bin/hard", "usr/bin/tool"),
		fileEnt("usr/gone", "z"), fileEnt("usr/.wh.gone", ""),
		{hdr: tar.Header{Name: "usr/bin/suid", Typeflag: tar.TypeReg, Mode: 0o4755}, body: "s"},
	})
	rootfs, err := NewCache(t.TempDir()).Rootfs(context.Background(), "oci:"+dir)
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"usr/bin/tool": "#!/bin/sh\n", "usr/bin/viaLink": "y", "usr/bin/hard": "#!/bin/sh\n"} {
		if data, err := os.ReadFile(filepath.Join(rootfs, p)); err != nil || string(data) != want {
			t.Errorf("%s: %q %v", p, data, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(rootfs, "usr/gone")); err == nil {
		t.Errorf("whiteout did not remove usr/gone")
	}
	if st, err := os.Stat(filepath.Join(rootfs, "usr/bin/suid")); err != nil || st.Mode()&os.ModeSetuid != 0 {
		t.Errorf("setuid bit kept: %v %v", st, err)
	}
}
