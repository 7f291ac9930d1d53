// Package sandbox runs tools of isolation tier 2 and 3 out of process.
//
// An Executor creates Sandboxes of one kind (a bubblewrap container, a gVisor
// sandbox, a Firecracker microVM) and declares what it isolates in its
// Capabilities; nothing is inferred from the kind. A Sandbox belongs to one
// run of one tenant: it runs one or more commands (Exec) over a private
// workspace and is destroyed afterwards, never handed to another run.
//
// Everything that comes back across the boundary is treated as data from an
// attacker: stdout and stderr are counted by the host before they are cut to
// a tail, the wrapper's sidecar report is size-capped and schema-checked
// (ParseSidecar), and text bound for a model or a log goes through Sanitize.
// What the host measures itself (times, exit status, byte counts, OOM kills,
// egress decisions) is kept apart from what the sandbox claims.
//
// The Manager (manager.go) sits between the broker and the executors: a warm
// pool per image, one sandbox per run session, a reaper for sandboxes past
// their TTL, and the Boundary record of every call.
package sandbox

import (
	"context"
	"errors"
	"os"
	"time"
)

// Lifecycle says how the sandbox that ran a call came to exist.
const (
	LifecycleCreated  = "created"           // cold start for this call
	LifecycleWarm     = "warm"              // taken from the warm pool
	LifecycleRestored = "restored"          // restored from a snapshot (microVM)
	LifecycleReused   = "reused-in-session" // an earlier call of the same run made it
)

// Who destroyed a sandbox.
const (
	TeardownCaller = "caller" // the platform, when the session or call ended
	TeardownReaper = "reaper" // the reaper, past the TTL
	TeardownNobody = "nobody" // found left over (after a crash) by the startup sweep
)

// Outcomes of one Exec, kept distinct on purpose: 124, 137 and 1 mean
// different things.
const (
	OutcomeOK      = "ok"      // exit code 0
	OutcomeNonZero = "exit"    // the program exited with a non-zero code
	OutcomeTimeout = "timeout" // the host's wall-clock timer fired and killed it
	OutcomeOOM     = "oom"     // the kernel (or gVisor) killed it for memory
	OutcomeKilled  = "killed"  // killed by a signal for another reason (CPU limit, ...)
	OutcomeCrashed = "sandbox" // the sandbox itself failed (its runtime died)
)

// Capabilities are what an executor declares it enforces. The broker refuses
// a tool whose manifest asks for more than its tier's executor declares.
type Capabilities struct {
	// Name of the executor: bubblewrap, gvisor, firecracker.
	Name string `json:"name"`
	// Tier is the isolation tier the executor provides (2 or 3).
	Tier int `json:"tier"`
	// Kernel is whose kernel the sandboxed code talks to: "host" (shared,
	// filtered by seccomp), "gvisor" (a user-space kernel) or "guest" (a
	// guest kernel behind KVM).
	Kernel string `json:"kernel"`
	// Filesystem isolation: the root is read-only and only the workspace
	// is writable.
	ReadOnlyRoot bool `json:"read_only_root"`
	// OwnRootfs is true when a tool may bring its own root filesystem
	// (manifest image: a directory or an OCI image layout).
	OwnRootfs bool `json:"own_rootfs"`
	// Network is "none" (no interface but loopback) for every executor
	// here; Egress says whether the allowlisting proxy can be reached.
	Network string `json:"network"`
	Egress  bool   `json:"egress"`
	// Process isolation: own pid namespace, unprivileged uid, no
	// capabilities, no_new_privs, a seccomp filter, Landlock.
	PIDNamespace bool `json:"pid_namespace"`
	Unprivileged bool `json:"unprivileged"`
	Seccomp      bool `json:"seccomp"`
	Landlock     bool `json:"landlock"`
	// Mounts: Spec.Mount is bound read-only and Spec.State read-write.
	// Streams: Exec.StdinFile and StdoutFile are honoured.
	Mounts, Streams bool
	// Limits enforced: memory, pids, cpu_time, wall_time, output.
	Memory   bool `json:"memory"`
	Pids     bool `json:"pids"`
	CPUTime  bool `json:"cpu_time"`
	WallTime bool `json:"wall_time"`
}

// Spec describes a sandbox to create. Sandboxes in the warm pool are created
// before a run asks for one, so nothing here names a tenant or a run.
type Spec struct {
	// Image is the root filesystem: "" for the host's /usr mounted
	// read-only, a directory holding a root filesystem, or "oci:DIR" for
	// an OCI image layout (its single manifest, layers unpacked once).
	Image string
	// MemoryMB caps the sandbox's memory (default 512).
	MemoryMB int
	// Pids caps the number of processes and threads (default 128).
	Pids int
	// WorkspaceMB caps the workspace tmpfs (default 64).
	WorkspaceMB int
	// Mount, when set, is a host directory bound read-only at GuestMount
	// (a program's installed files: an MCP server's npm package folder).
	// Only executors whose Capabilities declare Mounts accept it.
	Mount string
	// State, when set, is a host directory bound read-write at GuestState:
	// a long-lived program's data that outlives the sandbox (an MCP stdio
	// server's database). The executor gives it, and the files directly
	// in it, to the sandbox's uid before each Exec; links and
	// subdirectories in it are left alone. One sandbox at a time may use a
	// state directory. Only executors whose Capabilities declare Mounts
	// accept it; it is the operator's choice, never a tenant's.
	State string
}

// GuestMount is where Spec.Mount appears inside the sandbox, GuestState
// where Spec.State does.
const (
	GuestMount = "/opt/agentplane"
	GuestState = "/var/lib/agentplane"
)

// Key is the warm-pool key of a spec: sandboxes with equal keys are
// interchangeable before first use.
func (s Spec) Key() Spec { return s.withDefaults() }

func (s Spec) withDefaults() Spec {
	if s.MemoryMB <= 0 {
		s.MemoryMB = 512
	}
	if s.Pids <= 0 {
		s.Pids = 128
	}
	if s.WorkspaceMB <= 0 {
		s.WorkspaceMB = 64
	}
	return s
}

// Normalize returns s with defaults filled in.
func (s Spec) Normalize() Spec { return s.withDefaults() }

// File is a file written into the workspace before a command runs.
type File struct {
	// Path is relative to the workspace; it may not leave it.
	Path string
	Data []byte
}

// Exec is one command to run in a sandbox.
type Exec struct {
	// Argv is the program and its arguments, resolved inside the sandbox.
	Argv []string
	// Env is the complete environment given to the program, as KEY=VALUE.
	// Nothing from the host's environment is added; the sandbox sets only
	// HOME, PATH, LANG, TMPDIR and, when set, TRACEPARENT.
	Env []string
	// StdinFile and StdoutFile, when set, are the program's standard
	// input and output for its whole life, in place of Stdin and the
	// stdout tail: a long-running server (an MCP stdio connector) speaks
	// over them. Only executors whose Capabilities declare Streams accept
	// them. The caller keeps and closes its ends.
	StdinFile, StdoutFile *os.File
	// Stdin is written to the program's standard input.
	Stdin []byte
	// Files are written into the workspace before the program starts.
	Files []File
	// Timeout is the wall-clock limit (default 30 s).
	Timeout time.Duration
	// CPUTime is the CPU-time limit (RLIMIT_CPU); 0 means the timeout.
	CPUTime time.Duration
	// TailBytes is how much of the end of stdout and of stderr is kept
	// (default 64 KiB each). Everything is counted.
	TailBytes int
	// Traceparent is a W3C traceparent passed in as TRACEPARENT.
	Traceparent string
	// Egress, when set, routes the program's HTTP(S) through the
	// sandbox's egress proxy (HTTPS_PROXY and HTTP_PROXY are set).
	Egress bool
}

// Output is what the host read from one of the program's streams.
type Output struct {
	// Tail is the last bytes of the stream, raw (not sanitised).
	Tail []byte `json:"-"`
	// Bytes is the stream's full length, counted by the host before any
	// truncation.
	Bytes int64 `json:"bytes"`
	// Truncated is set when Tail is shorter than Bytes.
	Truncated bool `json:"truncated,omitempty"`
}

// Result is the host's account of one Exec.
type Result struct {
	// Outcome is one of the Outcome constants.
	Outcome string
	// ExitCode is the program's exit code; for a program killed by a
	// signal it is 128 plus the signal number (137 for SIGKILL), as a
	// shell reports it.
	ExitCode int
	// Signal is the signal that killed the program, if any.
	Signal string
	Stdout Output
	Stderr Output
	// ExecMS is the wall time the host waited for the command, from asking
	// the runtime to run it until it exited (the sidecar's own figure is a
	// claim, kept apart in Sidecar).
	ExecMS int64
	// PeakMemoryBytes is the sandbox's peak memory as the host's cgroup (or
	// the runtime) measured it; 0 when unknown.
	PeakMemoryBytes int64
	// Unclean says why the command did not end cleanly, as the host saw
	// it; empty when it did. A command is unclean when the host's timer
	// fired, when the wrapper's report did not arrive on the host's
	// channel (the wrapper was killed or died), or when the host found
	// processes of the command still running after it ended. The Manager
	// destroys such a sandbox instead of using it again.
	Unclean string
	// Sidecar is the wrapper's report, parsed as untrusted input; nil when
	// it was missing or invalid, with SidecarError saying why. It is a
	// claim and never changes a field above.
	Sidecar      *Sidecar
	SidecarError string
}

// Sandbox is one isolated environment. Exec calls on one sandbox are
// serialised by the sandbox; Destroy may be called concurrently with Exec
// (it kills the running command) and more than once.
type Sandbox interface {
	// ID is unique on the host, stable for the sandbox's life.
	ID() string
	// Exec runs one command and waits for it. A non-nil error means the
	// sandbox failed (not the program); the sandbox should be destroyed.
	Exec(ctx context.Context, e Exec) (Result, error)
	// WriteFile and ReadFile move files in and out of the workspace.
	// Paths are relative and may not leave it (symlinks are not followed
	// out of it). ReadFile reads at most limit bytes and fails beyond.
	WriteFile(ctx context.Context, path string, data []byte) error
	ReadFile(ctx context.Context, path string, limit int64) ([]byte, error)
	// EgressSocket is the host path of the Unix socket the sandbox sees as
	// its egress proxy; the Manager serves a proxy on it while the sandbox
	// belongs to a session. "" when the executor has no egress.
	EgressSocket() string
	// Destroy kills every process of the sandbox and removes its state
	// (cgroups, mounts, directories). Idempotent.
	Destroy(ctx context.Context) error
}

// Executor creates sandboxes of one kind. Safe for concurrent use.
type Executor interface {
	Capabilities() Capabilities
	// Available reports why the executor cannot run on this host, or nil.
	Available() error
	// Create makes a sandbox ready to Exec. Its cost is the cold start.
	Create(ctx context.Context, s Spec) (Sandbox, error)
}

// ErrUnavailable is wrapped by errors of an executor that cannot run on
// this host (a missing binary, no KVM, no cgroup controller).
var ErrUnavailable = errors.New("sandbox executor unavailable on this host")

// Sweeper is implemented by executors that can find and remove sandboxes a
// crashed process left behind. It returns the ids removed.
type Sweeper interface {
	Sweep(ctx context.Context) ([]string, error)
}

// Classify turns what the host saw of a finished command into an outcome:
// the host's own timer first, then the kernel's OOM counter, then a death
// by signal (exit code 128+N, as a shell reports it), then the exit code.
func Classify(exitCode int, timedOut, oomKilled bool) (outcome, signal string) {
	if exitCode > 128 && exitCode < 128+65 {
		signal = signalName(exitCode - 128)
	}
	switch {
	case timedOut:
		return OutcomeTimeout, signal
	case oomKilled:
		return OutcomeOOM, signal
	case signal != "":
		return OutcomeKilled, signal
	case exitCode == 0:
		return OutcomeOK, ""
	default:
		return OutcomeNonZero, ""
	}
}
