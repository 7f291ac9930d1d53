package firecracker_test

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/firecracker"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
)

func TestConformance(t *testing.T) {
	sandboxtest.Exercise(t, func(t *testing.T) sandbox.Executor {
		if _, err := os.Stat("/dev/kvm"); err != nil {
			t.Skip("Firecracker needs KVM and this host has no /dev/kvm (no bare metal or nested virtualisation); the executor is designed in docs/design/sandboxes.md")
		}
		e := firecracker.New(firecracker.Options{})
		if err := e.Available(); err != nil {
			t.Skipf("Firecracker unavailable: %v", err)
		}
		return e
	})
}

// TestUnavailableWithoutKVM: on a host without KVM the executor says so and
// refuses to create sandboxes, so its tier fails closed.
func TestUnavailableWithoutKVM(t *testing.T) {
	if _, err := os.Stat("/dev/kvm"); err == nil {
		t.Skip("this host has KVM")
	}
	e := firecracker.New(firecracker.Options{})
	if err := e.Available(); err == nil || !strings.Contains(err.Error(), "kvm") {
		t.Fatalf("Available: %v", err)
	}
	if _, err := e.Create(t.Context(), sandbox.Spec{}); err == nil {
		t.Fatal("Create succeeded without KVM")
	}
}

func TestConfig(t *testing.T) {
	e := firecracker.New(firecracker.Options{})
	raw, err := e.Config(sandbox.Spec{MemoryMB: 1024}, 7)
	if err != nil {
		t.Fatal(err)
	}
	var cfg firecracker.VMConfig
	if err := json.Unmarshal(raw, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.MachineConfig.MemSizeMib != 1024 || cfg.MachineConfig.VCPUCount != 1 || len(cfg.NetworkInterfaces) != 0 ||
		!cfg.Drives[0].IsRootDevice || !cfg.Drives[0].IsReadOnly || cfg.Vsock == nil || cfg.Vsock.GuestCID != 7 {
		t.Fatalf("config %s", raw)
	}
	if _, err := e.Config(sandbox.Spec{}, 2); err == nil {
		t.Fatal("CID 2 (the host) accepted")
	}
	args := strings.Join(e.JailerArgs("apf-1", 1300000, "vm.json"), " ")
	if !strings.Contains(args, "--new-pid-ns") || !strings.Contains(args, "--uid 1300000") || !strings.Contains(args, "--no-api") {
		t.Fatalf("jailer args %s", args)
	}
}
