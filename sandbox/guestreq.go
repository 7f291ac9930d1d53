package sandbox

import (
	"regexp"
	"strings"
)

// Paths inside every sandbox.
const (
	// GuestWorkspace is the writable workspace, the program's working
	// directory and HOME.
	GuestWorkspace = "/workspace"
	// GuestRunDir holds the egress socket. It is the host's, mounted
	// read-only: nothing in it carries a request or a report.
	GuestRunDir = "/run/agentplane"
	// GuestBinary is where the wrapper binary is mounted.
	GuestBinary = "/.agentplane/guest"
	// GuestRelayAddr is where the wrapper's relay to the egress proxy
	// listens inside the sandbox's own network namespace.
	GuestRelayAddr = "127.0.0.1:3128"
)

// The wrapper's channel with the host: two pipes whose other ends only the
// host holds. The host writes the request (JSON) into GuestRequestFD and
// closes it; the wrapper writes its report (the sidecar, JSON) into
// GuestReportFD once the command and everything it started are gone.
// Nothing in the sandbox's file system carries either, and the program
// never holds them: the wrapper keeps them close-on-exec and is not
// dumpable, so neither /proc/PID/fd nor ptrace reaches them.
const (
	GuestRequestFD = 5
	GuestReportFD  = 6
)

// GuestRequest is what the host asks the wrapper inside a sandbox to do
// for one command. The host writes it as JSON into GuestRequestFD.
type GuestRequest struct {
	Argv []string `json:"argv"`
	// Env is the program's complete environment.
	Env []string `json:"env"`
	Cwd string   `json:"cwd"`
	// Workspace is watched for changed files and installed packages.
	Workspace string `json:"workspace"`
	// EgressSocket, when set, is the proxy socket the relay forwards to.
	EgressSocket string `json:"egress_socket,omitempty"`
	RelayAddr    string `json:"relay_addr,omitempty"`
	// Limits set with setrlimit on the program (0: unchanged).
	NProc         int   `json:"nproc,omitempty"`
	CPUSeconds    int   `json:"cpu_seconds,omitempty"`
	FileSizeBytes int64 `json:"file_size_bytes,omitempty"`
	NoFile        int   `json:"nofile,omitempty"`
	// Landlock is "require" (fail if the kernel lacks it), "best-effort"
	// or "off". Writable lists the paths the program may write.
	Landlock string   `json:"landlock"`
	Writable []string `json:"writable,omitempty"`
	// PIDNamespace makes the wrapper run the program in a pid namespace
	// of its own (with a user namespace, so no privilege is needed) whose
	// init is a wrapper process: when the program's main process exits,
	// or the init is killed, the kernel kills everything the command
	// started. For runtimes that run several commands in one long-lived
	// sandbox (gVisor); bubblewrap gives each command its own already.
	PIDNamespace bool `json:"pid_namespace,omitempty"`
}

var reTraceparent = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// ValidTraceparent reports whether tp is a W3C traceparent of version 00
// with non-zero ids.
func ValidTraceparent(tp string) bool {
	return reTraceparent.MatchString(tp) &&
		tp[3:35] != strings.Repeat("0", 32) && tp[36:52] != strings.Repeat("0", 16)
}

// GuestEnv builds the complete environment of a program: the fixed
// variables every sandbox has, then e.Env (later entries win), then
// TRACEPARENT and the proxy variables. The host's environment is never
// read.
func GuestEnv(e Exec) []string {
	base := []string{
		"HOME=" + GuestWorkspace,
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"LANG=C.UTF-8",
		"TMPDIR=/tmp",
		"PYTHONDONTWRITEBYTECODE=1",
		// HOME is the workspace: no user site-packages from it.
		"PYTHONNOUSERSITE=1",
	}
	env := map[string]string{}
	var order []string
	add := func(kv string) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return
		}
		if _, seen := env[k]; !seen {
			order = append(order, k)
		}
		env[k] = v
	}
	for _, kv := range base {
		add(kv)
	}
	for _, kv := range e.Env {
		add(kv)
	}
	if ValidTraceparent(e.Traceparent) {
		add("TRACEPARENT=" + e.Traceparent)
		add(GuestSpansEnv + "=" + GuestWorkspace + "/" + GuestSpansFile)
	}
	if e.Egress {
		for _, k := range []string{"HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"} {
			add(k + "=http://" + GuestRelayAddr)
		}
		add("NO_PROXY=")
	}
	out := make([]string, 0, len(order))
	for _, k := range order {
		out = append(out, k+"="+env[k])
	}
	return out
}
