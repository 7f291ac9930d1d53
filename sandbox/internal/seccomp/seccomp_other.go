//go:build !amd64 && !arm64

package seccomp

const (
	auditArch = 0
	x32Bit    = 0
)

var denied []sysc
