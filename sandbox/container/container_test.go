package container_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/container"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
)

// newExecutor returns a bubblewrap executor over a fresh state directory,
// or skips naming what the host lacks.
func newExecutor(t *testing.T) sandbox.Executor {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the tier-2 executor needs root (cgroups, uids); run scripts/test.sh as root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed (scripts/test.sh installs it: apt-get install bubblewrap)")
	}
	e := container.New(container.Options{Guest: sandboxtest.BuildGuest(t), StateDir: sandboxtest.StateDir(t)})
	if err := e.Available(); err != nil {
		t.Skipf("bubblewrap executor unavailable: %v", err)
	}
	return e
}

func TestConformance(t *testing.T) {
	sandboxtest.Exercise(t, newExecutor)
}
