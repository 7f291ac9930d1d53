package sandbox

import "golang.org/x/sys/unix"

func signalName(n int) string {
	if s := unix.SignalName(unix.Signal(n)); s != "" {
		return s
	}
	return "SIG" + itoa(n)
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
