package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_AARCH64
	x32Bit    = 0
)

var denied = append(commonDenied(), sysc{"kexec_load", unix.SYS_KEXEC_LOAD})
