// Package gvisor is the tier-3 executor, for code a model wrote: a gVisor
// sandbox (runsc) per sandbox. The program's system calls are served by
// gVisor's user-space kernel, so only a small, filtered set reaches the
// host kernel. Each sandbox is a minimal read-only OCI bundle (the host's
// /usr or the tool's own root filesystem, a tmpfs workspace, no network but
// loopback: --network=none), started once with the wrapper as its init and
// then given one `runsc exec` per command, so a warm sandbox runs a command
// in tens of milliseconds instead of the half-second boot. Each command
// runs in a pid namespace of its own, so nothing it starts outlives it, and
// the host checks with runsc ps that nothing did.
//
// runsc must be a static build (CGO_ENABLED=0): the sandbox re-executes
// itself inside an empty root where a dynamic loader is missing. runsc
// ignores SIGTERM, so everything here is stopped with SIGKILL.
package gvisor

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
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/internal/cgroup"
	"github.com/agentplane/agentplane/sandbox/internal/hostfs"
	"github.com/agentplane/agentplane/sandbox/internal/image"
)

// Options configure the executor.
type Options struct {
	// Runsc is the path of a static runsc (default: runsc on PATH).
	Runsc string
	// Guest is the static wrapper binary (sandbox/guest).
	Guest string
	// StateDir holds bundles, workspaces and runsc's state (default
	// /run/agentplane/gvisor).
	StateDir string
	// Platform is runsc's platform: systrap (default), ptrace or kvm.
	Platform string
	// UIDBase is the first of 4096 uids given to sandboxes (default
	// 1_200_000).
	UIDBase    int
	CgroupName string // default "agentplane-gvisor"
	// OverheadMB is added to a sandbox's memory for gVisor's own kernel
	// in the host cgroup (default 192); the program's limit is in the spec.
	OverheadMB int
	Logger     *slog.Logger
}

// Executor runs tier-3 sandboxes with gVisor.
type Executor struct {
	o      Options
	guest  string
	cg     *cgroup.Parent
	uids   *hostfs.UIDs
	images *image.Cache
	err    error

	rootsMu sync.Mutex
	roots   map[string]string // image -> skeleton root dir
}

// New prepares the executor; Available says why it cannot run, if so.
func New(o Options) *Executor {
	if o.StateDir == "" {
		o.StateDir = "/run/agentplane/gvisor"
	}
	if o.Platform == "" {
		o.Platform = "systrap"
	}
	if o.UIDBase == 0 {
		o.UIDBase = 1_200_000
	}
	if o.CgroupName == "" {
		o.CgroupName = "agentplane-gvisor"
	}
	if o.OverheadMB == 0 {
		o.OverheadMB = 192
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Executor{o: o, uids: hostfs.NewUIDs(o.UIDBase, 4096), roots: map[string]string{}}
	e.err = e.init()
	return e
}

func (e *Executor) init() error {
	var err error
	if e.o.Runsc == "" {
		if e.o.Runsc, err = exec.LookPath("runsc"); err != nil {
			return fmt.Errorf("%w: runsc is not installed (build it static: CGO_ENABLED=0 go install gvisor.dev/gvisor/runsc@VERSION; scripts/test.sh does)", sandbox.ErrUnavailable)
		}
	}
	if err := checkStatic(e.o.Runsc); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if e.o.Guest == "" {
		return fmt.Errorf("%w: no sandbox wrapper binary configured (build sandbox/guest with CGO_ENABLED=0)", sandbox.ErrUnavailable)
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: runsc needs root here (rootless runsc cannot set limits)", sandbox.ErrUnavailable)
	}
	if e.o.Platform == "kvm" {
		if _, err := os.Stat("/dev/kvm"); err != nil {
			return fmt.Errorf("%w: platform kvm needs /dev/kvm", sandbox.ErrUnavailable)
		}
	}
	if err := hostfs.PrepareState(e.o.StateDir); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if e.guest, err = hostfs.InstallGuest(e.o.StateDir, e.o.Guest); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if e.cg, err = cgroup.Open(e.o.CgroupName); err != nil {
		return fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	e.images = image.NewCache(filepath.Join(e.o.StateDir, "images"))
	e.o.Logger.Info("tier-3 executor ready", "runtime", "gvisor", "platform", e.o.Platform, "cgroup", e.cg.String())
	return nil
}

// checkStatic refuses a dynamically linked runsc: it fails inside its own
// sandbox with "cannot read client sync file".
func checkStatic(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	n, _ := f.Read(buf)
	if bytes.Contains(buf[:n], []byte("/lib64/ld-linux")) || bytes.Contains(buf[:n], []byte("/lib/ld-linux")) {
		return fmt.Errorf("%s is dynamically linked; rebuild it with CGO_ENABLED=0", p)
	}
	return nil
}

// Available reports why the executor cannot run here, or nil.
func (e *Executor) Available() error { return e.err }

// Close removes what the executor keeps on the host beyond its sandboxes:
// the network-namespace bind mount runsc makes for --network=none under its
// state. Call it after the last sandbox is destroyed.
func (e *Executor) Close() error {
	if e.err != nil {
		return nil
	}
	p := filepath.Join(e.runscRoot(), "null-netns")
	// Sandboxes created at the same moment can each bind it, stacking
	// mounts on one path: unmount until nothing is left.
	for i := 0; i < 64; i++ {
		err := syscall.Unmount(p, syscall.MNT_DETACH)
		if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Capabilities declares what a gVisor sandbox enforces.
func (e *Executor) Capabilities() sandbox.Capabilities {
	return sandbox.Capabilities{
		Name: "gvisor", Tier: 3, Kernel: "gvisor",
		ReadOnlyRoot: true, OwnRootfs: true,
		Network: "none", Egress: true,
		PIDNamespace: true, Unprivileged: true, Seccomp: true, Landlock: false,
		Memory: true, Pids: true, CPUTime: true, WallTime: true,
	}
}

const idPrefix = "apg-"

func (e *Executor) runscRoot() string { return filepath.Join(e.o.StateDir, "runsc") }

// runsc runs one runsc command with a deadline, killing it with SIGKILL.
func (e *Executor) runsc(ctx context.Context, timeout time.Duration, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.o.Runsc, append(e.globalFlags(), args...)...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	return cmd.CombinedOutput()
}

func (e *Executor) globalFlags() []string {
	return []string{"--root", e.runscRoot(), "--platform", e.o.Platform, "--network=none", "--host-uds=open",
		"--overlay2=none", "--ignore-cgroups", "--file-access=shared"}
}

// Sweep removes sandboxes a crashed process left behind.
func (e *Executor) Sweep(ctx context.Context) ([]string, error) {
	if e.err != nil {
		return nil, nil
	}
	seen := map[string]bool{}
	var errs []error
	ents, _ := os.ReadDir(e.runscRoot())
	for _, ent := range ents {
		if !strings.HasPrefix(ent.Name(), idPrefix) {
			continue
		}
		if owned, err := hostfs.Owned(ent.Name()); owned {
			errs = append(errs, err)
		} else {
			seen[ent.Name()] = true
			_, _ = e.runsc(ctx, 10*time.Second, "kill", "--all", ent.Name(), "KILL")
			_, _ = e.runsc(ctx, 10*time.Second, "delete", "--force", ent.Name())
		}
	}
	errs = append(errs, hostfs.SweepDead(e.cg, e.o.StateDir, idPrefix, seen))
	return hostfs.SortedKeys(seen), errors.Join(errs...)
}

// skeleton returns a read-only root directory for img holding the image's
// top-level symlinks and empty mount points; the image's directories are
// bind-mounted over them, and the sandbox's own mounts find their points.
func (e *Executor) skeleton(ctx context.Context, img string) (string, []image.Entry, error) {
	src, host := "/", true
	if img != "" {
		var err error
		if src, err = e.images.Rootfs(ctx, img); err != nil {
			return "", nil, err
		}
		host = false
	}
	ents, err := image.TopLevel(src, host)
	if err != nil {
		return "", nil, err
	}
	e.rootsMu.Lock()
	defer e.rootsMu.Unlock()
	if dir, ok := e.roots[img]; ok {
		return dir, ents, nil
	}
	dir := filepath.Join(e.o.StateDir, "roots", hostfs.NewID("root-"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", nil, err
	}
	_ = os.Chmod(filepath.Dir(dir), 0o711)
	for _, ent := range ents {
		p := filepath.Join(dir, ent.Name)
		if ent.Source == "" {
			err = os.Symlink(ent.Target, p)
		} else {
			err = os.Mkdir(p, 0o755)
		}
		if err != nil {
			return "", nil, err
		}
	}
	for _, mp := range []string{"proc", "dev", "sys", "tmp", "etc", "workspace", "run/agentplane", ".agentplane/guest"} {
		p := filepath.Join(dir, mp)
		if _, err := os.Lstat(p); err == nil {
			continue
		}
		if mp == ".agentplane/guest" {
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			if err := os.WriteFile(p, nil, 0o755); err != nil {
				return "", nil, err
			}
			continue
		}
		if err := os.MkdirAll(p, 0o755); err != nil {
			return "", nil, err
		}
	}
	for _, f := range []string{"passwd", "group", "hosts", "nsswitch.conf"} {
		if err := os.WriteFile(filepath.Join(dir, "etc", f), nil, 0o644); err != nil && !errors.Is(err, os.ErrExist) {
			return "", nil, err
		}
	}
	e.roots[img] = dir
	return dir, ents, nil
}

// ociSpec is the subset of the OCI runtime spec written here.
type ociSpec struct {
	OCIVersion string      `json:"ociVersion"`
	Process    ociProcess  `json:"process"`
	Root       ociRoot     `json:"root"`
	Hostname   string      `json:"hostname"`
	Mounts     []ociMount  `json:"mounts"`
	Linux      ociLinux    `json:"linux"`
	Annots     interface{} `json:"annotations,omitempty"`
}

type ociProcess struct {
	User            ociUser     `json:"user"`
	Args            []string    `json:"args"`
	Env             []string    `json:"env"`
	Cwd             string      `json:"cwd"`
	Rlimits         []ociRlimit `json:"rlimits"`
	NoNewPrivileges bool        `json:"noNewPrivileges"`
	Capabilities    *ociCapSet  `json:"capabilities"`
	Terminal        bool        `json:"terminal"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociRlimit struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociCapSet struct {
	Bounding    []string `json:"bounding"`
	Effective   []string `json:"effective"`
	Inheritable []string `json:"inheritable"`
	Permitted   []string `json:"permitted"`
	Ambient     []string `json:"ambient"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinux struct {
	Namespaces []ociNamespace `json:"namespaces"`
	Resources  ociResources   `json:"resources"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

type ociResources struct {
	Memory struct {
		Limit int64 `json:"limit"`
	} `json:"memory"`
	Pids struct {
		Limit int64 `json:"limit"`
	} `json:"pids"`
}

func noCaps() *ociCapSet {
	return &ociCapSet{Bounding: []string{}, Effective: []string{}, Inheritable: []string{}, Permitted: []string{}, Ambient: []string{}}
}

// Create boots a sandbox: bundle, workspace, cgroup, `runsc run` of the
// wrapper's idle init. This is the cold start.
func (e *Executor) Create(ctx context.Context, s sandbox.Spec) (sandbox.Sandbox, error) {
	if e.err != nil {
		return nil, e.err
	}
	if s.Mount != "" || s.State != "" {
		return nil, errors.New("gvisor: host mounts are not supported; refusing a spec with Mount or State")
	}
	s = s.Normalize()
	root, ents, err := e.skeleton(ctx, s.Image)
	if err != nil {
		return nil, err
	}
	// The host cgroup holds gVisor's own kernel too: the program's memory
	// limit is in the spec, the cgroup's adds the overhead. The sentry
	// needs threads of its own, so pids are counted inside by RLIMIT_NPROC.
	// The workspace belongs to the sandbox's own uid (guest uid 0: the same).
	h, err := hostfs.NewHost(e.uids, e.cg, e.o.StateDir, idPrefix, 0, s.WorkspaceMB,
		cgroup.Limits{MemoryBytes: int64(s.MemoryMB+e.o.OverheadMB) << 20, Pids: 1024, CPUQuota: 100})
	if err != nil {
		return nil, err
	}
	b := &box{e: e, id: h.ID, spec: s, dir: h.Dir, cg: h.CG, uid: h.UID, lease: h.Lease}
	if err := b.boot(ctx, root, ents); err != nil {
		_ = b.Destroy(context.Background())
		return nil, err
	}
	return b, nil
}

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

	execMu sync.Mutex

	mu        sync.Mutex
	destroyed bool
	running   *os.Process
}

func (b *box) bundle() string { return filepath.Join(b.dir.Path, "bundle") }

func (b *box) boot(ctx context.Context, root string, ents []image.Entry) error {
	nproc := uint64(b.spec.Pids)
	spec := ociSpec{
		OCIVersion: "1.0.2",
		Process: ociProcess{
			User: ociUser{UID: uint32(b.uid), GID: uint32(b.uid)},
			Args: []string{sandbox.GuestBinary, "idle"},
			Env:  []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			Cwd:  sandbox.GuestWorkspace,
			Rlimits: []ociRlimit{
				{Type: "RLIMIT_NPROC", Hard: nproc, Soft: nproc},
				{Type: "RLIMIT_NOFILE", Hard: 1024, Soft: 1024},
				{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
			},
			NoNewPrivileges: true,
			Capabilities:    noCaps(),
		},
		Root:     ociRoot{Path: root, Readonly: true},
		Hostname: "sandbox",
		Linux:    ociLinux{Namespaces: []ociNamespace{{"pid"}, {"network"}, {"ipc"}, {"uts"}, {"mount"}}},
	}
	spec.Linux.Resources.Memory.Limit = int64(b.spec.MemoryMB) << 20
	spec.Linux.Resources.Pids.Limit = int64(b.spec.Pids)
	for _, ent := range ents {
		if ent.Source != "" {
			spec.Mounts = append(spec.Mounts, ociMount{Destination: "/" + ent.Name, Type: "bind", Source: ent.Source, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
		}
	}
	spec.Mounts = append(spec.Mounts,
		ociMount{Destination: "/proc", Type: "proc", Source: "proc"},
		ociMount{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=64m"}},
		ociMount{Destination: "/workspace", Type: "bind", Source: b.dir.Workspace(), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		ociMount{Destination: sandbox.GuestRunDir, Type: "bind", Source: b.dir.Run(), Options: []string{"rbind", "ro", "nosuid", "nodev"}},
		ociMount{Destination: sandbox.GuestBinary, Type: "bind", Source: b.e.guest, Options: []string{"bind", "ro"}},
	)
	for _, f := range []string{"passwd", "group", "hosts", "nsswitch.conf"} {
		spec.Mounts = append(spec.Mounts, ociMount{Destination: "/etc/" + f, Type: "bind", Source: filepath.Join(b.dir.Etc(), f), Options: []string{"bind", "ro"}})
	}
	if err := os.Mkdir(b.bundle(), 0o700); err != nil {
		return err
	}
	data, err := json.MarshalIndent(spec, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(b.bundle(), "config.json"), data, 0o600); err != nil {
		return err
	}
	// Start runsc inside the sandbox's cgroup (joined before exec), so the
	// sentry and gofer it forks are limited and accounted there, with no
	// descriptor of the platform's process but stdio.
	procs := b.cg.ProcsFiles()
	args := []string{"enter", "3", strconv.Itoa(len(procs))}
	args = append(args, procs...)
	args = append(args, "--", b.e.o.Runsc)
	args = append(args, b.e.globalFlags()...)
	args = append(args, "run", "--bundle", b.bundle(), "--detach", b.id)
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, b.e.guest, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	// A file, not a pipe: the detached sandbox keeps runsc's stdio open.
	logf, err := os.Create(filepath.Join(b.bundle(), "run.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Run(); err != nil {
		log, _ := os.ReadFile(logf.Name())
		return fmt.Errorf("runsc run: %v: %s", err, sandbox.Sanitize(log, 2048, false, false).Text)
	}
	return nil
}

func (b *box) ID() string           { return b.id }
func (b *box) EgressSocket() string { return filepath.Join(b.dir.Run(), "egress.sock") }

func (b *box) isDestroyed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.destroyed
}

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

// Exec runs one command with `runsc exec` through the wrapper, in a pid
// namespace of the command's own, and then checks from the host (runsc ps)
// that nothing of it is left.
func (b *box) Exec(ctx context.Context, x sandbox.Exec) (sandbox.Result, error) {
	if x.StdinFile != nil || x.StdoutFile != nil {
		return sandbox.Result{}, errors.New("gvisor: streamed standard input and output are not supported")
	}
	b.execMu.Lock()
	defer b.execMu.Unlock()
	if b.isDestroyed() {
		return sandbox.Result{}, errors.New("sandbox destroyed")
	}
	ch, err := b.dir.PrepareExec(&x, b.spec, func(req *sandbox.GuestRequest) { req.PIDNamespace = true })
	if err != nil {
		return sandbox.Result{}, err
	}
	// The channel's pipes are descriptors 3 and 4 of runsc exec, which
	// passes them to the wrapper alone as 5 and 6; enter closes every
	// other descriptor the platform's process holds.
	reqR, repW := ch.GuestEnds()
	args := []string{"enter", "5", "0", "--", b.e.o.Runsc}
	args = append(args, b.e.globalFlags()...)
	args = append(args, "exec", "--user", fmt.Sprintf("%d:%d", b.uid, b.uid), "--cwd", sandbox.GuestWorkspace,
		"--pass-fd", fmt.Sprintf("3:%d", sandbox.GuestRequestFD), "--pass-fd", fmt.Sprintf("4:%d", sandbox.GuestReportFD),
		b.id, sandbox.GuestBinary, "run")
	cmd := exec.Command(b.e.guest, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	stdout, stderr := sandbox.NewTailWriter(x.TailBytes), sandbox.NewTailWriter(x.TailBytes)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Stdin = bytes.NewReader(x.Stdin)
	cmd.ExtraFiles = []*os.File{reqR, repW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second

	b.cg.ResetPeak()
	oomBefore := b.cg.OOMKills()
	start := time.Now()
	if err := cmd.Start(); err != nil {
		ch.Close()
		return sandbox.Result{}, fmt.Errorf("runsc exec: %w", err)
	}
	ch.Started()
	b.mu.Lock()
	b.running = cmd.Process
	b.mu.Unlock()
	waitCh := make(chan error, 1)
	go func() { waitCh <- cmd.Wait() }()
	timer := time.NewTimer(x.Timeout)
	defer timer.Stop()
	timedOut, cancelled := false, false
	select {
	case <-waitCh:
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		cancelled = true
	}
	if timedOut || cancelled {
		// Kill the program and everything it started, but not the init:
		// the sandbox's state is checked below.
		b.reap()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-waitCh
	}
	elapsed := time.Since(start)
	b.mu.Lock()
	b.running = nil
	b.mu.Unlock()
	var res sandbox.Result
	ch.Finish(&res)
	if cancelled {
		return sandbox.Result{}, ctx.Err()
	}
	exit := hostfs.ExitCode(cmd.ProcessState)
	oom := b.cg.OOMKills() > oomBefore
	left, psErr := b.remaining()
	if psErr != nil && !oom && !timedOut && !b.alive() {
		return sandbox.Result{}, fmt.Errorf("gVisor sandbox %s died (runsc exec exit %d): %s", b.id, exit,
			sandbox.Sanitize(stderr.Output().Tail, 2048, false, false).Text)
	}
	if oom && exit != 137 {
		exit = 137
	}
	res.ExitCode, res.Stdout, res.Stderr = exit, stdout.Output(), stderr.Output()
	res.ExecMS, res.PeakMemoryBytes = elapsed.Milliseconds(), b.cg.PeakMemory()
	res.Outcome, res.Signal = sandbox.Classify(exit, timedOut, oom)
	if timedOut && exit < 0 {
		res.ExitCode, res.Signal = 137, "SIGKILL"
	}
	if !timedOut && !oom && lostControl(exit, stderr.Output().Tail) {
		// runsc exec lost its control connection to the sandbox: what the
		// program did is unknown, and so is the sandbox's state. It is not
		// an exit status of the program; the manager does not reuse it.
		res.Outcome, res.Signal = sandbox.OutcomeCrashed, ""
		hostfs.Unclean(&res, "runsc exec lost its connection to the sandbox")
	}
	if timedOut {
		hostfs.Unclean(&res, "the host's timer fired")
	}
	switch {
	case psErr != nil:
		hostfs.Unclean(&res, "the host could not list the sandbox's processes: "+psErr.Error())
	case len(left) > 0:
		b.reap()
		hostfs.Unclean(&res, fmt.Sprintf("%d processes outlived the command (killed by the host)", len(left)))
	}
	return res, nil
}

// remaining asks gVisor's kernel (runsc ps, from the host) which processes
// the sandbox still runs besides its init, allowing a moment for the
// processes of a finished command's pid namespace to be reaped.
func (b *box) remaining() ([]int, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		out, err := b.e.runsc(context.Background(), 10*time.Second, "ps", "--format", "json", b.id)
		if err != nil {
			return nil, fmt.Errorf("runsc ps: %v", err)
		}
		var pids []int
		if err := json.Unmarshal(bytes.TrimSpace(out), &pids); err != nil {
			return nil, fmt.Errorf("runsc ps: %v", err)
		}
		var left []int
		for _, p := range pids {
			if p != 1 {
				left = append(left, p)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lostControl recognises runsc exec's own failure to reach the sandbox
// (it exits 128 and names the urpc method that failed), seen when the host
// is saturated.
func lostControl(exit int, stderrTail []byte) bool {
	return exit == 128 && bytes.Contains(stderrTail, []byte("urpc method"))
}

// reap kills every process of the sandbox but its init, from inside (the
// wrapper's reap, so the image needs no shell).
func (b *box) reap() {
	_, _ = b.e.runsc(context.Background(), 10*time.Second, "exec", "--user", fmt.Sprintf("%d:%d", b.uid, b.uid),
		b.id, sandbox.GuestBinary, "reap")
}

// alive reports whether the sandbox's init still runs.
func (b *box) alive() bool {
	out, err := b.e.runsc(context.Background(), 10*time.Second, "state", b.id)
	if err != nil {
		return false
	}
	var st struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(out, &st) != nil {
		return false
	}
	return st.Status == "running"
}

// Destroy stops the sandbox (SIGKILL: runsc ignores SIGTERM), deletes it
// and removes its cgroup, workspace and directory.
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
	_, _ = b.e.runsc(ctx, 10*time.Second, "kill", "--all", b.id, "KILL")
	b.execMu.Lock()
	defer b.execMu.Unlock()
	var errs []error
	if out, err := b.e.runsc(ctx, 20*time.Second, "delete", "--force", b.id); err != nil && !strings.Contains(string(out), "does not exist") && !strings.Contains(string(out), "not found") {
		errs = append(errs, fmt.Errorf("runsc delete: %v: %s", err, bytes.TrimSpace(out)))
	}
	errs = append(errs, b.cg.Remove(), b.dir.Remove())
	_ = os.RemoveAll(filepath.Join(b.e.runscRoot(), b.id))
	hostfs.ReleaseIdentity(b.e.uids, b.uid, b.lease, b.id, b.e.o.Logger)
	return errors.Join(errs...)
}

// Leftovers lists what of a destroyed sandbox is still on the host.
func (b *box) Leftovers() []string {
	out := hostfs.LeftoversOf(b.id, b.cg.Exists(), b.dir, b.uid)
	if state, err := b.e.runsc(context.Background(), 10*time.Second, "state", b.id); err == nil {
		out = append(out, "runsc container "+b.id+": "+string(bytes.TrimSpace(state)))
	}
	return out
}
