package hostfs

import (
	"testing"
)

// Two UIDs over the same range stand for two agentplane processes on one
// host: flock locks belong to open files, so the second sees the first's
// uids as taken exactly as another process would.
func TestUIDsAreHostWide(t *testing.T) {
	LockDir = t.TempDir()
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
	LockDir = t.TempDir()
	id := NewID("apb-")
	if Owned(id) {
		t.Fatal("an id nobody claimed is reported owned")
	}
	l, err := Claim(id)
	if err != nil {
		t.Fatal(err)
	}
	if !Owned(id) {
		t.Fatal("a claimed id is not reported owned: a sweep would remove a live sandbox")
	}
	if _, err := Claim(id); err == nil {
		t.Fatal("the same id was claimed twice")
	}
	l.Release()
	if Owned(id) {
		t.Fatal("a released id is still reported owned")
	}
}
