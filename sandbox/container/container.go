// Package container is the tier-2 executor: a bubblewrap container per
// sandbox. Each command starts a fresh bubblewrap with new user, pid,
// network, ipc, uts, mount and cgroup namespaces, running as an
// unprivileged host uid of its own, over a read-only root (the host's /usr
// or the tool's own root filesystem) with a size-capped tmpfs workspace
// that persists for the sandbox's life. It drops every capability, sets
// no_new_privs, loads a seccomp filter (package seccomp), and the wrapper
// inside adds Landlock and rlimits before the program starts. Memory,
// process and CPU limits come from a cgroup per sandbox (v1 or v2) that
// the container joins before it execs.
//
// See docs/design/sandboxes.md for why bubblewrap rather than runc.
package container

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/internal/cgroup"
	"github.com/agentplane/agentplane/sandbox/internal/hostfs"
	"github.com/agentplane/agentplane/sandbox/internal/image"
	"github.com/agentplane/agentplane/sandbox/internal/seccomp"
)

// Options configure the executor.
type Options struct {
	// Guest is the path of the static wrapper binary (sandbox/guest).
	Guest string
	// Bwrap and Setpriv default to the binaries on PATH.
	Bwrap   string
	Setpriv string
	// StateDir holds the sandboxes' directories (default
	// /run/agentplane/bwrap). Sandbox uids must be able to traverse its
	// parents.
	StateDir string
	// UIDBase is the first of 4096 host uids given to sandboxes (default
	// 1_100_000).
	UIDBase int
	// CgroupName is the parent cgroup created beneath this process's own
	// (default "agentplane-bwrap").
	CgroupName string
	Logger     *slog.Logger
}

// Executor runs tier-2 sandboxes with bubblewrap.
type Executor struct {
	o        Options
	guest    string
	cg       *cgroup.Parent
	filter   []byte
	uids     *hostfs.UIDs
	landlock bool
	images   *image.Cache
	err      error
}

// New prepares the executor. When the host lacks something it needs, New
// still returns an executor whose Available says why and whose Create fails.
func New(o Options) *Executor {
	if o.StateDir == "" {
		o.StateDir = "/run/agentplane/bwrap"
	}
	if o.UIDBase == 0 {
		o.UIDBase = 1_100_000
	}
	if o.CgroupName == "" {
		o.CgroupName = "agentplane-bwrap"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Executor{o: o, uids: hostfs.NewUIDs(o.UIDBase, 4096)}
	e.err = e.init()
	return e
}

func (e *Executor) init() error {
	var err error
	if e.o.Bwrap == "" {
		if e.o.Bwrap, err = exec.LookPath("bwrap"); err != nil {
			return fmt.Errorf("%w: bubblewrap (bwrap) is not installed: apt-get install bubblewrap", sandbox.ErrUnavailable)
		}
	}
	if e.o.Setpriv == "" {
		if e.o.Setpriv, err = exec.LookPath("setpriv"); err != nil {
			return fmt.Errorf("%w: setpriv (util-linux) is not installed", sandbox.ErrUnavailable)
		}
	}
	if e.o.Guest == "" {
		return fmt.Errorf("%w: no sandbox wrapper binary configured (build sandbox/guest with CGO_ENABLED=0)", sandbox.ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: the tier-2 executor needs root to set up cgroups and uids", sandbox.ErrUnavailable)
	}
	if err := hostfs.PrepareState(e.o.StateDir); err != nil {
		return fmt.Errorf("%w: state directory: %v", sandbox.ErrUnavailable, err)
	}
	if e.guest, err = hostfs.InstallGuest(e.o.StateDir, e.o.Guest); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if e.filter, err = seccomp.Program(); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if e.cg, err = cgroup.Open(e.o.CgroupName); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	e.images = image.NewCache(filepath.Join(e.o.StateDir, "images"))
	_, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	e.landlock = errno == 0
	e.o.Logger.Info("tier-2 executor ready", "runtime", "bubblewrap", "cgroup", e.cg.String(), "landlock", e.landlock)
	return nil
}

// Available reports why the executor cannot run here, or nil.
func (e *Executor) Available() error { return e.err }

// Capabilities declares what a bubblewrap sandbox enforces.
func (e *Executor) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Name: "bubblewrap", Tier: 2, Kernel: "host",
		ReadOnlyRoot: true, OwnRootfs: true,
		Network: "none", Egress: true,
		PIDNamespace: true, Unprivileged: true, Seccomp: true, Landlock: e.landlock, Mounts: true, Streams: true,
		Memory: true, Pids: true, CPUTime: true, WallTime: true,
	}
}

const idPrefix = "apb-"

// Sweep removes sandboxes a crashed process left: cgroups and directories.
func (e *Executor) Sweep(ctx context.Context) ([]string, error) {
	if e.err != nil {
		return nil, nil
	}
	seen := map[string]bool{}
	err := hostfs.SweepDead(e.cg, e.o.StateDir, idPrefix, seen)
	return hostfs.SortedKeys(seen), err
}

// Create makes a sandbox: its directory, tmpfs workspace and cgroup. The
// container itself starts with each Exec.
func (e *Executor) Create(ctx context.Context, s sandbox.Spec) (sandbox.Sandbox, error) {
	if e.err != nil {
		return nil, e.err
	}
	s = s.Normalize()
	root, err := e.rootfs(ctx, s.Image)
	if err != nil {
		return nil, err
	}
	// Processes and threads: the program's plus bubblewrap's own two.
	h, err := hostfs.NewHost(e.uids, e.cg, e.o.StateDir, idPrefix, hostfs.GuestUID, s.WorkspaceMB,
		cgroup.Limits{MemoryBytes: int64(s.MemoryMB) << 20, Pids: s.Pids + 4, CPUQuota: 100})
	if err != nil {
		return nil, err
	}
	return &box{e: e, id: h.ID, spec: s, dir: h.Dir, cg: h.CG, uid: h.UID, lease: h.Lease, root: root}, nil
}

// rootfs lists what of the image goes into the container's root.
func (e *Executor) rootfs(ctx context.Context, img string) ([]image.Entry, error) {
	if img == "" {
		return image.TopLevel("/", true)
	}
	dir, err := e.images.Rootfs(ctx, img)
	if err != nil {
		return nil, err
	}
	return image.TopLevel(dir, false)
}

// box is one bubblewrap sandbox.
type box struct {
	e    *Executor
	id   string
	spec sandbox.Spec
	dir  *hostfs.Dir
	cg   *cgroup.Group
	uid  int
	// lease marks the id live host-wide, so no other process's sweep
	// removes it.
	lease *hostfs.Lease
	root  []image.Entry

	execMu sync.Mutex // one command at a time

	mu        sync.Mutex
	destroyed bool
	running   *os.Process
}

func (b *box) ID() string           { return b.id }
func (b *box) EgressSocket() string { return filepath.Join(b.dir.Run(), "egress.sock") }

func (b *box) WriteFile(ctx context.Context, p string, data []byte) error {
	if b.isDestroyed() {
		return errors.New("sandbox destroyed")
	}
	return b.dir.WriteFile(p, data)
}

func (b *box) ReadFile(ctx context.Context, p string, limit int64) ([]byte, error) {
	if b.isDestroyed() {
		return nil, errors.New("sandbox destroyed")
	}
	return b.dir.ReadFile(p, limit)
}

func (b *box) isDestroyed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.destroyed
}

// args builds the bubblewrap command line.
func (b *box) args(egress bool) []string {
	a := []string{
		"--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try",
		"--uid", strconv.Itoa(hostfs.GuestUID), "--gid", strconv.Itoa(hostfs.GuestGID),
		"--hostname", "sandbox",
		"--die-with-parent", "--new-session",
		"--cap-drop", "ALL",
		"--clearenv", "--setenv", "PATH", "/usr/bin:/bin",
	}
	for _, r := range b.root {
		if r.Source == "" {
			a = append(a, "--symlink", r.Target, "/"+r.Name)
		} else {
			a = append(a, "--ro-bind", r.Source, "/"+r.Name)
		}
	}
	a = append(a,
		"--proc", "/proc",
		"--dev", "/dev",
		"--size", strconv.Itoa(64<<20), "--tmpfs", "/tmp",
		"--ro-bind", filepath.Join(b.dir.Etc(), "passwd"), "/etc/passwd",
		"--ro-bind", filepath.Join(b.dir.Etc(), "group"), "/etc/group",
		"--ro-bind", filepath.Join(b.dir.Etc(), "hosts"), "/etc/hosts",
		"--ro-bind", filepath.Join(b.dir.Etc(), "nsswitch.conf"), "/etc/nsswitch.conf",
		"--bind", b.dir.Workspace(), sandbox.GuestWorkspace,
		"--ro-bind", b.dir.Run(), sandbox.GuestRunDir,
		"--ro-bind", b.e.guest, sandbox.GuestBinary,
	)
	if b.spec.Mount != "" {
		a = append(a, "--ro-bind", b.spec.Mount, sandbox.GuestMount)
	}
	if b.spec.State != "" {
		a = append(a, "--bind", b.spec.State, sandbox.GuestState)
	}
	a = append(a,
		"--chdir", sandbox.GuestWorkspace,
		"--seccomp", "3",
		"--json-status-fd", "4",
		"--remount-ro", "/",
		"--", sandbox.GuestBinary, "run",
	)
	return a
}

func (b *box) Exec(ctx context.Context, x sandbox.Exec) (sandbox.Result, error) {
	b.execMu.Lock()
	defer b.execMu.Unlock()
	if b.isDestroyed() {
		return sandbox.Result{}, errors.New("sandbox destroyed")
	}
	if b.spec.State != "" {
		if err := hostfs.AdoptState(b.spec.State, b.uid); err != nil {
			return sandbox.Result{}, err
		}
	}
	ch, err := b.dir.PrepareExec(&x, b.spec, func(req *sandbox.GuestRequest) {
		req.Writable = []string{sandbox.GuestWorkspace, "/tmp"}
		if b.spec.State != "" {
			req.Writable = append(req.Writable, sandbox.GuestState)
		}
		if b.e.landlock {
			req.Landlock = "require"
		}
	})
	if err != nil {
		return sandbox.Result{}, err
	}
	started := false
	defer func() {
		if !started {
			ch.Close()
		}
	}()

	filterR, filterW, err := os.Pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	defer filterR.Close()
	if _, err := filterW.Write(b.e.filter); err != nil {
		filterW.Close()
		return sandbox.Result{}, err
	}
	filterW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return sandbox.Result{}, err
	}
	defer statusR.Close()

	// Descriptors 3 (seccomp), 4 (status), 5 and 6 (the wrapper's channel)
	// cross into bubblewrap; enter closes every other one the platform's
	// process holds.
	reqR, repW := ch.GuestEnds()
	procs := b.cg.ProcsFiles()
	argv := []string{"enter", "7", strconv.Itoa(len(procs))}
	argv = append(argv, procs...)
	argv = append(argv, "--", b.e.o.Setpriv, "--reuid", strconv.Itoa(b.uid), "--regid", strconv.Itoa(b.uid),
		"--clear-groups", "--inh-caps=-all", "--", b.e.o.Bwrap)
	argv = append(argv, b.args(x.Egress)...)
	cmd := exec.Command(b.e.guest, argv...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	stdout, stderr := sandbox.NewTailWriter(x.TailBytes), sandbox.NewTailWriter(x.TailBytes)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Stdin = bytes.NewReader(x.Stdin)
	if x.StdinFile != nil && x.StdoutFile != nil {
		cmd.Stdin, cmd.Stdout = x.StdinFile, x.StdoutFile
	}
	cmd.ExtraFiles = []*os.File{filterR, statusW, reqR, repW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second

	b.cg.ResetPeak()
	oomBefore := b.cg.OOMKills()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		statusW.Close()
		return sandbox.Result{}, fmt.Errorf("start bubblewrap: %w", err)
	}
	started = true
	statusW.Close()
	ch.Started()
	b.mu.Lock()
	b.running = cmd.Process
	b.mu.Unlock()

	statusCh := make(chan bwrapStatus, 1)
	go func() { statusCh <- readStatus(statusR) }()
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()

	timer := time.NewTimer(x.Timeout)
	defer timer.Stop()
	timedOut, cancelled := false, false
	var waitErr error
	select {
	case waitErr = <-waitCh:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		cancelled = true
	}
	if timedOut || cancelled {
		// SIGKILL the whole tree: bubblewrap's init dies with its parent,
		// and with it the pid namespace; the cgroup catches stragglers.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = b.cg.Kill(5 * time.Second)
		waitErr = <-waitCh
	}
	elapsed := time.Since(start)
	b.mu.Lock()
	b.running = nil
	b.mu.Unlock()
	// The host's check: bubblewrap has exited, so its pid namespace is
	// being torn down and the sandbox's cgroup must empty (bubblewrap's
	// monitor can exit while its init is still dying). Anything still in
	// it after a moment outlived the command: it is killed, and the
	// command is unclean.
	left := b.settle(2 * time.Second)
	killErr := b.cg.Kill(5 * time.Second)
	st := <-statusCh

	var res sandbox.Result
	ch.Finish(&res)
	if cancelled {
		return sandbox.Result{}, ctx.Err()
	}
	exit := hostfs.ExitCode(cmd.ProcessState)
	if st.exitCode != nil {
		exit = *st.exitCode
	}
	if !timedOut && !st.started {
		return sandbox.Result{}, fmt.Errorf("bubblewrap failed before the program started (exit %d, %v): %s", exit, waitErr,
			sandbox.Sanitize(stderr.Output().Tail, 2048, false, false).Text)
	}
	oom := b.cg.OOMKills() > oomBefore
	res.ExitCode, res.Stdout, res.Stderr = exit, stdout.Output(), stderr.Output()
	res.ExecMS, res.PeakMemoryBytes = elapsed.Milliseconds(), b.cg.PeakMemory()
	res.Outcome, res.Signal = sandbox.Classify(exit, timedOut, oom)
	if timedOut && exit < 0 {
		res.ExitCode, res.Signal = 137, "SIGKILL"
	}
	if timedOut {
		hostfs.Unclean(&res, "the host's timer fired")
	}
	if len(left) > 0 && !timedOut {
		hostfs.Unclean(&res, fmt.Sprintf("%d processes outlived the command (killed by the host)", len(left)))
	}
	if killErr != nil {
		hostfs.Unclean(&res, killErr.Error())
	}
	return res, nil
}

// settle waits up to grace for the sandbox's cgroup to empty and returns
// the processes still in it.
func (b *box) settle(grace time.Duration) []int {
	deadline := time.Now().Add(grace)
	for {
		left := b.cg.Pids()
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type bwrapStatus struct {
	started  bool
	exitCode *int
}

// readStatus reads bubblewrap's --json-status-fd stream: a document with
// child-pid when the sandbox started, one with exit-code when it ended.
// bubblewrap writes it from outside the sandbox.
func readStatus(f *os.File) bwrapStatus {
	var st bwrapStatus
	dec := json.NewDecoder(&limitedReader{r: f, n: 64 << 10})
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			return st
		}
		if _, ok := m["child-pid"]; ok {
			st.started = true
		}
		if v, ok := m["exit-code"].(float64); ok {
			c := int(v)
			st.exitCode = &c
		}
	}
}

type limitedReader struct {
	r *os.File
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("status stream too long")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// Destroy kills whatever runs and removes the cgroup, the workspace mount
// and the directory.
func (b *box) Destroy(ctx context.Context) error {
	b.mu.Lock()
	if b.destroyed {
		b.mu.Unlock()
		return nil
	}
	b.destroyed = true
	if b.running != nil {
		_ = syscall.Kill(-b.running.Pid, syscall.SIGKILL)
	}
	b.mu.Unlock()
	// Wait for a running Exec to notice.
	b.execMu.Lock()
	defer b.execMu.Unlock()
	err := errors.Join(b.cg.Remove(), b.dir.Remove())
	hostfs.ReleaseIdentity(b.e.uids, b.uid, b.lease, b.id, b.e.o.Logger)
	return err
}

// Leftovers lists what of a destroyed sandbox is still on the host.
func (b *box) Leftovers() []string {
	return hostfs.LeftoversOf(b.id, b.cg.Exists(), b.dir, b.uid)
}
