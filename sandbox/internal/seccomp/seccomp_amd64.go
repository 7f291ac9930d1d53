package seccomp

import "golang.org/x/sys/unix"

const (
	auditArch = unix.AUDIT_ARCH_X86_64
	x32Bit    = 0x40000000
)

var denied = append(commonDenied(),
	sysc{"kexec_load", unix.SYS_KEXEC_LOAD},
	sysc{"iopl", unix.SYS_IOPL},
	sysc{"ioperm", unix.SYS_IOPERM},
	sysc{"create_module", unix.SYS_CREATE_MODULE},
	sysc{"uselib", unix.SYS_USELIB},
)
