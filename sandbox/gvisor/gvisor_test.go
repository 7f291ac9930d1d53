package gvisor_test

import (
	"os"
	"testing"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/gvisor"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
)

func newExecutor(t *testing.T) sandbox.Executor {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the gVisor executor needs root; run scripts/test.sh as root")
	}
	e := gvisor.New(gvisor.Options{Runsc: sandboxtest.Runsc(t), Guest: sandboxtest.BuildGuest(t), StateDir: sandboxtest.StateDir(t)})
	if err := e.Available(); err != nil {
		t.Skipf("gVisor executor unavailable: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func TestConformance(t *testing.T) {
	sandboxtest.Exercise(t, newExecutor)
}
