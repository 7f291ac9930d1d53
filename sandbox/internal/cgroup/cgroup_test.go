package cgroup

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The limits a v2 group gets, as the files the kernel reads them from. A
// plain directory stands in for the cgroup filesystem.
func TestV2LimitFiles(t *testing.T) {
	dir := t.TempDir()
	p := &Parent{v2: true, dirs: map[string]string{"": dir}}
	g, err := p.New("apb-1", Limits{MemoryBytes: 256 << 20, Pids: 68, CPUQuota: 150})
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{
		"memory.max":      "268435456",
		"memory.swap.max": "0",
		"pids.max":        "68",
		"cpu.max":         "150000 100000",
	} {
		got, err := os.ReadFile(filepath.Join(g.Dir(), file))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q (%v), want %q", file, got, err, want)
		}
	}
	if pf := g.ProcsFiles(); len(pf) != 1 || pf[0] != filepath.Join(dir, "apb-1", "cgroup.procs") {
		t.Errorf("v2 procs files %v, want the one group's cgroup.procs", pf)
	}
	if _, err := p.New("../escape", Limits{}); err == nil {
		t.Error("a group id with a path in it was accepted")
	}
}

// On the unified hierarchy: a process tree that joined the group before
// exec is killed whole by cgroup.kill, and the group is removed. This host
// mixes v1 and v2 (the unified hierarchy has no memory or pids), so limits
// are not set here; joining, killing and removal are the kernel's own.
func TestV2KillAndRemove(t *testing.T) {
	const unified = "/sys/fs/cgroup/unified"
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	base := unified
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		base = root // a pure v2 host
	} else if _, err := os.Stat(filepath.Join(unified, "cgroup.procs")); err != nil {
		t.Skip("no cgroup v2 hierarchy on this host")
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "agentplane-test-" + hex.EncodeToString(b[:])
	p, err := openV2At(base, name, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(filepath.Join(base, name)) })
	g, err := p.New("apb-kill", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// Join, then fork a background child that ignores SIGTERM, then exec.
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1" || exit 125; (trap '' TERM; sleep 300) & exec sleep 300`, "sh", g.ProcsFiles()[0])
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(10 * time.Second)
	for len(g.Pids()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the processes did not join the group: %v", g.Pids())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := g.Kill(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	if left := g.Pids(); len(left) > 0 {
		t.Fatalf("processes left after Kill: %v", left)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "killed") {
			t.Fatalf("the group's process ended with %v, want killed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the group's process was not killed")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if g.Exists() {
		t.Fatal("the group is still there after Remove")
	}
}
