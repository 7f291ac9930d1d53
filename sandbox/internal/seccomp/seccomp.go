// Package seccomp builds the classic-BPF seccomp filter of a tier-2
// sandbox: it refuses the system calls that reach kernel attack surface a
// tool never needs (new namespaces, mount, ptrace, bpf, io_uring, keyrings,
// module loading, kexec, perf) and answers clone3 with ENOSYS so that C
// libraries fall back to clone, whose namespace flags the filter can see.
// Everything else is allowed: the namespaces, the read-only root, Landlock
// and the cgroup limits do the rest.
package seccomp

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Seccomp return values and the offsets of struct seccomp_data.
const (
	retAllow       = 0x7fff0000
	retErrno       = 0x00050000
	retKillProcess = 0x80000000

	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on little-endian
	offArg1 = 24
)

// cloneNamespaceFlags are the clone flags that create namespaces.
const cloneNamespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// Denied lists the system calls refused with EPERM, by name, for the
// design document and the tests.
func Denied() []string {
	out := make([]string, 0, len(denied))
	for _, d := range denied {
		out = append(out, d.name)
	}
	return out
}

type sysc struct {
	name string
	nr   uint32
}

// Program returns the filter as the kernel's struct sock_filter array
// (what bwrap --seccomp reads from a file descriptor).
func Program() ([]byte, error) {
	ins, err := Instructions()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(ins)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		out = binary.LittleEndian.AppendUint16(out, r.Op)
		out = append(out, r.Jt, r.Jf)
		out = binary.LittleEndian.AppendUint32(out, r.K)
	}
	return out, nil
}

// Instructions returns the filter for the running architecture.
func Instructions() ([]bpf.Instruction, error) {
	if auditArch == 0 {
		return nil, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
	}
	eperm := bpf.RetConstant{Val: retErrno | uint32(unix.EPERM)}
	enosys := bpf.RetConstant{Val: retErrno | uint32(unix.ENOSYS)}
	allow := bpf.RetConstant{Val: retAllow}
	var p []bpf.Instruction
	// A foreign architecture's numbers would mean other calls: kill.
	p = append(p,
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
		bpf.LoadAbsolute{Off: offNr, Size: 4},
	)
	if x32Bit != 0 { // amd64: refuse the x32 ABI
		p = append(p, bpf.JumpIf{Cond: bpf.JumpGreaterOrEqual, Val: x32Bit, SkipFalse: 1}, eperm)
	}
	for _, d := range denied {
		p = append(p, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: d.nr, SkipTrue: 1}, eperm)
	}
	p = append(p,
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(unix.SYS_CLONE3), SkipTrue: 1}, enosys,
		// clone: refuse namespace flags (flags are argument 0).
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(unix.SYS_CLONE), SkipTrue: 3},
		bpf.LoadAbsolute{Off: offArg0, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpBitsSet, Val: cloneNamespaceFlags, SkipFalse: 1}, eperm,
		// ioctl TIOCSTI would push keystrokes into a terminal.
		bpf.LoadAbsolute{Off: offNr, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(unix.SYS_IOCTL), SkipTrue: 3},
		bpf.LoadAbsolute{Off: offArg1, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.TIOCSTI, SkipFalse: 1}, eperm,
		allow,
	)
	return p, nil
}
