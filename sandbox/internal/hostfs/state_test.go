package hostfs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestAdoptState hands a state folder and its plain files to a sandbox
// uid, and leaves alone what a sandbox could have planted to reach the
// host: a symbolic link, a second link to a file, a subfolder, and a
// state folder that is itself a link.
func TestAdoptState(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "host-file")
	for _, f := range []string{filepath.Join(dir, "mail.db"), outside} {
		if err := os.WriteFile(f, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	const uid = 1_234_567
	if err := AdoptState(dir, uid); err != nil {
		t.Fatal(err)
	}
	owner := func(p string) int {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		return int(st.Uid)
	}
	if owner(dir) != uid || owner(filepath.Join(dir, "mail.db")) != uid {
		t.Fatalf("state folder %d, its file %d; want both %d", owner(dir), owner(filepath.Join(dir, "mail.db")), uid)
	}
	for _, p := range []string{outside, filepath.Join(dir, "link"), filepath.Join(dir, "sub")} {
		if owner(p) != 0 {
			t.Errorf("%s was given to the sandbox uid", p)
		}
	}
	ln := filepath.Join(t.TempDir(), "state-link")
	if err := os.Symlink(dir, ln); err != nil {
		t.Fatal(err)
	}
	if err := AdoptState(ln, uid); err == nil {
		t.Fatal("a state folder that is a link was adopted")
	}
}
