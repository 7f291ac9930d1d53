// Package firecracker is the tier-3 executor for hosts with KVM: one
// Firecracker microVM per sandbox, behind the jailer, with its own guest
// kernel. It is built as far as can be checked without KVM: Available
// refuses hosts without /dev/kvm or without the firecracker and jailer
// binaries, and the VM configuration (machine, boot source, read-only root
// drive, scratch drive, vsock, no network interface) is generated and
// tested here. Booting, snapshot restore and the vsock link to the wrapper
// are described in docs/design/sandboxes.md and are exercised only where
// KVM exists.
package firecracker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/agentplane/agentplane/sandbox"
)

// Options configure the executor.
type Options struct {
	// Firecracker and Jailer are the binaries (default: on PATH).
	Firecracker string
	Jailer      string
	// Kernel is an uncompressed guest kernel (vmlinux); Rootfs a read-only
	// ext4 image holding /usr, python3 and the wrapper as /sbin/init's
	// helper.
	Kernel string
	Rootfs string
	// VCPUs (default 1) and the guest's scratch disk (default 2048 MiB).
	VCPUs     int
	ScratchMB int
}

// Executor would run sandboxes as Firecracker microVMs.
type Executor struct {
	o   Options
	err error
}

// New checks the host; Available says why it cannot run here.
func New(o Options) *Executor {
	if o.VCPUs == 0 {
		o.VCPUs = 1
	}
	if o.ScratchMB == 0 {
		o.ScratchMB = 2048
	}
	e := &Executor{o: o}
	e.err = e.check()
	return e
}

// ErrNoKVM says the host exposes no /dev/kvm.
var ErrNoKVM = errors.New("no /dev/kvm on this host (Firecracker needs KVM: bare metal or nested virtualisation)")

func (e *Executor) check() error {
	if _, err := os.Stat("/dev/kvm"); err != nil {
		return fmt.Errorf("%w: %w", sandbox.ErrUnavailable, ErrNoKVM)
	}
	for _, b := range []*string{&e.o.Firecracker, &e.o.Jailer} {
		name := "firecracker"
		if b == &e.o.Jailer {
			name = "jailer"
		}
		if *b == "" {
			p, err := exec.LookPath(name)
			if err != nil {
				return fmt.Errorf("%w: %s is not installed", sandbox.ErrUnavailable, name)
			}
			*b = p
		}
	}
	if e.o.Kernel == "" || e.o.Rootfs == "" {
		return fmt.Errorf("%w: no guest kernel or root filesystem image configured", sandbox.ErrUnavailable)
	}
	return nil
}

// Available reports why the executor cannot run here.
func (e *Executor) Available() error { return e.err }

// Capabilities declares what a microVM enforces.
func (e *Executor) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Name: "firecracker", Tier: 3, Kernel: "guest",
		ReadOnlyRoot: true, OwnRootfs: true, Network: "none", Egress: true,
		PIDNamespace: true, Unprivileged: true, Seccomp: true,
		Memory: true, Pids: true, CPUTime: true, WallTime: true,
	}
}

// Create is not implemented past the host checks: without KVM nothing here
// could be verified.
func (e *Executor) Create(ctx context.Context, s sandbox.Spec) (sandbox.Sandbox, error) {
	if e.err != nil {
		return nil, e.err
	}
	return nil, fmt.Errorf("%w: the Firecracker executor boots only on hosts with KVM; see docs/design/sandboxes.md", sandbox.ErrUnavailable)
}

// VMConfig is Firecracker's --config-file document.
type VMConfig struct {
	BootSource    BootSource    `json:"boot-source"`
	Drives        []Drive       `json:"drives"`
	MachineConfig MachineConfig `json:"machine-config"`
	Vsock         *Vsock        `json:"vsock,omitempty"`
	// NetworkInterfaces is always empty: egress goes over vsock to the
	// host's proxy, never through a tap device.
	NetworkInterfaces []any `json:"network-interfaces"`
}

// BootSource is the guest kernel and its command line.
type BootSource struct {
	KernelImagePath string `json:"kernel_image_path"`
	BootArgs        string `json:"boot_args"`
}

// Drive is a block device.
type Drive struct {
	DriveID      string `json:"drive_id"`
	PathOnHost   string `json:"path_on_host"`
	IsRootDevice bool   `json:"is_root_device"`
	IsReadOnly   bool   `json:"is_read_only"`
}

// MachineConfig sizes the VM.
type MachineConfig struct {
	VCPUCount  int  `json:"vcpu_count"`
	MemSizeMib int  `json:"mem_size_mib"`
	SMT        bool `json:"smt"`
}

// Vsock is the host-guest channel the wrapper and the egress relay use.
type Vsock struct {
	GuestCID int    `json:"guest_cid"`
	UDSPath  string `json:"uds_path"`
}

// Config returns the VM configuration of a sandbox: read-only root drive,
// a scratch drive for the workspace, memory from the spec, vsock, and no
// network interface. Paths are inside the jailer's chroot.
func (e *Executor) Config(s sandbox.Spec, cid int) ([]byte, error) {
	s = s.Normalize()
	cfg := VMConfig{
		BootSource: BootSource{
			KernelImagePath: "vmlinux",
			// Quiet, no serial console to parse, panic reboots (the VM ends),
			// the wrapper is the init's child.
			BootArgs: "console=off reboot=k panic=1 pci=off nomodule random.trust_cpu=on init=/sbin/agentplane-init",
		},
		Drives: []Drive{
			{DriveID: "rootfs", PathOnHost: "rootfs.ext4", IsRootDevice: true, IsReadOnly: true},
			{DriveID: "scratch", PathOnHost: "scratch.ext4", IsReadOnly: false},
		},
		MachineConfig:     MachineConfig{VCPUCount: e.o.VCPUs, MemSizeMib: s.MemoryMB, SMT: false},
		Vsock:             &Vsock{GuestCID: cid, UDSPath: "vsock.sock"},
		NetworkInterfaces: []any{},
	}
	if cid < 3 {
		return nil, errors.New("firecracker: guest CID must be 3 or more")
	}
	return json.MarshalIndent(cfg, "", "  ")
}

// JailerArgs returns the jailer command line for sandbox id running as the
// host uid: its own chroot, cgroup, pid namespace and no network namespace
// access.
func (e *Executor) JailerArgs(id string, uid int, configPath string) []string {
	return []string{
		"--id", id, "--exec-file", e.o.Firecracker,
		"--uid", fmt.Sprint(uid), "--gid", fmt.Sprint(uid),
		"--new-pid-ns", "--cgroup-version", "2",
		"--", "--config-file", configPath, "--no-api", "--level", "Warning",
	}
}
