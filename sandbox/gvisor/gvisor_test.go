package gvisor_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/gvisor"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
)

// runsc finds the static runsc scripts/test.sh builds into the tools cache,
// or one on PATH.
func runsc(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AGENTPLANE_RUNSC"); p != "" {
		return p
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "agentplane-tools", "bin", "runsc")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	t.Skip("runsc is not installed; scripts/test.sh builds it (CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@...)")
	return ""
}

func newExecutor(t *testing.T) sandbox.Executor {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the gVisor executor needs root; run scripts/test.sh as root")
	}
	e := gvisor.New(gvisor.Options{Runsc: runsc(t), Guest: sandboxtest.BuildGuest(t), StateDir: sandboxtest.StateDir(t)})
	if err := e.Available(); err != nil {
		t.Skipf("gVisor executor unavailable: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	sandboxtest.Exercise(t, newExecutor)
}
