package hostfs

import (
	"os"
	"testing"
)

// Two UIDs over the same range stand for two agentplane processes on one
// host: flock locks belong to open files, so the second sees the first's
// uids as taken exactly as another process would.
// useLockDir points the leases at a fresh directory for one test.
func useLockDir(t *testing.T) {
	old := LockDir
	LockDir = t.TempDir() + "/locks"
	t.Cleanup(func() { LockDir = old })
}

func TestUIDsAreHostWide(t *testing.T) {
	useLockDir(t)
	a, b := NewUIDs(5000, 2), NewUIDs(5000, 2)
	ua, err := a.Get()
	if err != nil {
		t.Fatal(err)
	}
	ub, err := b.Get()
	if err != nil {
		t.Fatal(err)
	}
	if ua == ub {
		t.Fatalf("two processes were given the same sandbox uid %d", ua)
	}
	if _, err := b.Get(); err == nil {
		t.Fatal("a third uid came out of a range of two")
	}
	a.Put(ua)
	uc, err := b.Get()
	if err != nil {
		t.Fatalf("a released uid is not offered again: %v", err)
	}
	if uc != ua {
		t.Fatalf("got uid %d, want the released %d", uc, ua)
	}
}

func TestLeaseOwnership(t *testing.T) {
	useLockDir(t)
	id := NewID("apb-")
	if owned, err := Owned(id); owned || err != nil {
		t.Fatalf("an id nobody claimed is reported owned (%v)", err)
	}
	l, err := Claim(id)
	if err != nil {
		t.Fatal(err)
	}
	if owned, _ := Owned(id); !owned {
		t.Fatal("a claimed id is not reported owned: a sweep would remove a live sandbox")
	}
	if _, err := Claim(id); err == nil {
		t.Fatal("the same id was claimed twice")
	}
	l.Release()
	if owned, _ := Owned(id); owned {
		t.Fatal("a released id is still reported owned")
	}
}

// A lock directory others could write to, or a symlink, is refused: a lease
// there proves nothing.
func TestLockDirMustBePrivate(t *testing.T) {
	useLockDir(t)
	d := t.TempDir()
	LockDir = d + "/locks"
	if err := os.Mkdir(LockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(LockDir, 0o777); err != nil {
		t.Fatal(err)
	}
	if _, err := Claim(NewID("apb-")); err == nil {
		t.Fatal("a world-writable lock directory was used")
	}
	if owned, err := Owned("apb-x"); !owned || err == nil {
		t.Fatal("Owned must say owned, with the reason, when it cannot tell")
	}
	LockDir = d + "/link"
	if err := os.Symlink(t.TempDir(), LockDir); err != nil {
		t.Fatal(err)
	}
	if _, err := NewUIDs(5000, 1).Get(); err == nil {
		t.Fatal("a symlinked lock directory was used")
	}
}
