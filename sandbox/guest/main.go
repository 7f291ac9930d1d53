// Command guest is the wrapper that runs inside every agentplane sandbox,
// mounted read-only at /.agentplane/guest. It is built as a static binary
// (CGO_ENABLED=0) so it runs in any root filesystem.
//
//	guest run     run one command: read the request from the host's pipe
//	              (fd 5), run it, write the sidecar report into the host's
//	              pipe (fd 6)
//	guest child   (internal) apply rlimits and Landlock, then exec the
//	              program, or, as the init of the command's own pid
//	              namespace, run it and exit when it exits
//	guest idle    stay up as a container's init, reaping children
//	guest reap    kill every process it may signal (the host's timeout)
//	guest enter KEEP N PROCS... -- ARGV
//	              (on the host) join the N cgroups, close every descriptor
//	              from KEEP up, exec ARGV: the runtime starts with only the
//	              descriptors the sandbox needs
//
// The wrapper runs next to untrusted code and the host treats everything it
// writes as a claim: it only makes the program's life observable (changed
// files, packages, network attempts through its relay, peak memory) and
// adds the limits that must be set from inside.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/sandbox"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: guest run | child | idle | reap | enter KEEP N PROCS... -- ARGV")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(run())
	case "child":
		child()
	case "idle":
		idle()
	case "reap":
		_ = syscall.Kill(-1, syscall.SIGKILL)
	case "enter":
		enter(os.Args[2:])
	default:
		fmt.Fprintf(os.Stderr, "guest: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

// maxRequest bounds the request the host sends.
const maxRequest = 4 << 20

// childRequestFD is where "guest child" finds its copy of the request.
const childRequestFD = 3

// readRequest reads the request from fd (a pipe the host, or the wrapper,
// writes and closes) and closes it.
func readRequest(fd int) *sandbox.GuestRequest {
	f := os.NewFile(uintptr(fd), "request")
	if f == nil {
		fail("no request descriptor %d", fd)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxRequest+1))
	if err != nil {
		fail("read request: %v", err)
	}
	if len(data) > maxRequest {
		fail("request larger than %d bytes", maxRequest)
	}
	var r sandbox.GuestRequest
	if err := json.Unmarshal(data, &r); err != nil {
		fail("parse request: %v", err)
	}
	if len(r.Argv) == 0 {
		fail("empty argv")
	}
	return &r
}

// fail reports a wrapper failure the way a shell reports a command it could
// not run (126).
func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "agentplane sandbox: "+format+"\n", args...)
	os.Exit(126)
}

// keepOnlyStdio marks every descriptor above stderr close-on-exec, so that
// whatever this process inherited (from the runtime, from the host's
// launcher or its supervisor) never reaches the program; the wrapper's own
// pipes to the host stay usable here.
func keepOnlyStdio() { closeOnExecFrom(3) }

// closeOnExecFrom marks every descriptor from first up close-on-exec
// (close_range, or one by one from /proc/self/fd on kernels without it).
func closeOnExecFrom(first int) {
	if err := unix.CloseRange(uint(first), ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return
	}
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		fail("list descriptors: %v", err)
	}
	for _, e := range ents {
		if fd, err := strconv.Atoi(e.Name()); err == nil && fd >= first {
			if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
				fail("close-on-exec %d: %v", fd, err)
			}
		}
	}
}

// guard makes this process not dumpable: the program (same uid) can then
// neither ptrace it nor open its /proc entries (fd, mem, environ).
func guard() {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		fail("not dumpable: %v", err)
	}
}

// run starts the program through "guest child", waits for it and sends
// the sidecar report to the host.
func run() int {
	keepOnlyStdio()
	req := readRequest(sandbox.GuestRequestFD)
	report := os.NewFile(uintptr(sandbox.GuestReportFD), "report")
	if report == nil {
		fail("no report descriptor")
	}
	before := snapshot(req.Workspace)
	var relay *relay
	if req.EgressSocket != "" && req.RelayAddr != "" {
		var err error
		relay, err = startRelay(req.RelayAddr, req.EgressSocket)
		if err != nil {
			fmt.Fprintf(os.Stderr, "agentplane sandbox: egress relay: %v\n", err)
		}
	}
	self, err := os.Executable()
	if err != nil {
		self = sandbox.GuestBinary
	}
	reqR, reqW, err := os.Pipe()
	if err != nil {
		fail("pipe: %v", err)
	}
	cmd := exec.Command(self, "child")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = []*os.File{reqR} // childRequestFD
	cmd.Env = req.Env
	cmd.Dir = req.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if !req.PIDNamespace {
		cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	} else {
		// (Go's Pdeathsig cannot be used here: in the new namespace the
		// child sees no parent and kills itself. The init sets it.)
		// The command's own pid namespace: its init is "guest child",
		// and when that exits (with the program, or killed) the kernel
		// kills everything in it. A user namespace mapping only this
		// uid makes it possible without privilege; the program runs
		// there with no capabilities (a non-root uid loses them at exec).
		uid, gid := os.Getuid(), os.Getgid()
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWPID | syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		cmd.SysProcAttr.GidMappingsEnableSetgroups = false
	}
	// Signals meant for the sandbox go to the program; the wrapper stays.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	start := time.Now()
	code, sig := 126, ""
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "agentplane sandbox: start: %v\n", err)
		reqW.Close()
	} else {
		// Not dumpable from here on (not before: writing the child's uid
		// map needs it). The program does not exist yet: the child waits
		// for the request below.
		guard()
		data, _ := json.Marshal(req)
		go func() {
			_, _ = reqW.Write(data)
			reqW.Close()
		}()
		_ = cmd.Wait()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch {
		case ws.Exited():
			code = ws.ExitStatus()
		case ws.Signaled():
			code, sig = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		}
	}
	reqR.Close()
	end := time.Now()
	var peak int64
	if cmd.ProcessState != nil {
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			peak = ru.Maxrss * 1024
		}
	}
	sc := sandbox.Sidecar{
		Version: sandbox.SidecarVersion, StartedAt: start.UTC(), EndedAt: end.UTC(),
		ExecMS: end.Sub(start).Milliseconds(), ExitCode: code, Signal: sig, PeakMemoryBytes: peak,
		Files: []sandbox.SidecarFile{}, Network: []sandbox.SidecarNet{}, Packages: []sandbox.SidecarPackage{},
	}
	if relay != nil {
		sc.Network = relay.close()
	}
	after := snapshot(req.Workspace)
	sc.Files, sc.FilesTruncated = diff(before, after)
	sc.Packages = newPackages(before, after)
	writeReport(report, &sc)
	return code
}

// writeReport sends the sidecar to the host, dropping the file list if the
// whole would not fit the host's limit.
func writeReport(f *os.File, sc *sandbox.Sidecar) {
	data, err := json.Marshal(sc)
	if err == nil && len(data) > sandbox.MaxSidecarBytes {
		sc.Files, sc.FilesTruncated = []sandbox.SidecarFile{}, true
		data, err = json.Marshal(sc)
	}
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentplane sandbox: report: %v\n", err)
	}
}

// child applies the limits that are set from inside, then becomes the
// program, or (as the init of the command's pid namespace) runs it.
func child() {
	if os.Getpid() == 1 {
		// The init of the command's pid namespace dies with the wrapper,
		// and with it everything in the namespace. Set before the request
		// is read: a wrapper that died before writing it ends this with
		// an empty pipe.
		if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0, 0, 0); err != nil {
			fail("parent-death signal: %v", err)
		}
		guard()
	}
	keepOnlyStdio()
	req := readRequest(childRequestFD)
	initOfCommand := req.PIDNamespace && os.Getpid() == 1
	setLimit := func(res int, v uint64) {
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			fail("setrlimit %d: %v", res, err)
		}
	}
	setLimit(unix.RLIMIT_CORE, 0)
	if req.NProc > 0 {
		setLimit(unix.RLIMIT_NPROC, uint64(req.NProc))
	}
	if req.CPUSeconds > 0 {
		// Soft limit sends SIGXCPU, the hard one a second later SIGKILL.
		if err := unix.Setrlimit(unix.RLIMIT_CPU, &unix.Rlimit{Cur: uint64(req.CPUSeconds), Max: uint64(req.CPUSeconds) + 1}); err != nil {
			fail("setrlimit cpu: %v", err)
		}
	}
	if req.FileSizeBytes > 0 {
		setLimit(unix.RLIMIT_FSIZE, uint64(req.FileSizeBytes))
	}
	if req.NoFile > 0 {
		setLimit(unix.RLIMIT_NOFILE, uint64(req.NoFile))
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("no_new_privs: %v", err)
	}
	if req.Landlock != "off" && req.Landlock != "" {
		if err := landlock(req); err != nil && req.Landlock == "require" {
			fail("landlock: %v", err)
		}
	}
	if req.PIDNamespace && !initOfCommand {
		fail("the command's pid namespace is missing")
	}
	argv0, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", req.Argv[0], err)
		os.Exit(127)
	}
	if initOfCommand {
		os.Exit(initRun(argv0, req))
	}
	if err := syscall.Exec(argv0, req.Argv, req.Env); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", req.Argv[0], err)
		os.Exit(126)
	}
}

// initRun is the command's pid-namespace init: it starts the program,
// reaps whatever is orphaned to it, and returns the program's status (as a
// shell reports it) when the program exits. Its own exit then ends the
// namespace and everything left in it.
func initRun(argv0 string, req *sandbox.GuestRequest) int {
	pid, err := syscall.ForkExec(argv0, req.Argv, &syscall.ProcAttr{Env: req.Env, Files: []uintptr{0, 1, 2}})
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", req.Argv[0], err)
		return 126
	}
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return 126
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

// enter is the host-side trampoline between the platform and a runtime
// (bwrap, runsc): it joins the sandbox's cgroups before anything runs,
// closes every descriptor from keep up (what the platform's process holds
// without close-on-exec, from its supervisor or a shell, stays behind),
// and execs the runtime.
func enter(args []string) {
	if len(args) < 2 {
		fail("enter: want KEEP N PROCS... -- ARGV")
	}
	keep, err1 := strconv.Atoi(args[0])
	n, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || keep < 3 || n < 0 || len(args) < 2+n+2 || args[2+n] != "--" {
		fail("enter: want KEEP N PROCS... -- ARGV")
	}
	for _, procs := range args[2 : 2+n] {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			fmt.Fprintf(os.Stderr, "agentplane sandbox: join cgroup %s: %v\n", procs, err)
			os.Exit(125)
		}
	}
	argv := args[2+n+1:]
	// Close-on-exec rather than closed: the Go runtime may still use its
	// own descriptors until the exec.
	closeOnExecFrom(keep)
	if err := syscall.Exec(argv[0], argv, os.Environ()); err != nil {
		fail("enter: exec %s: %v", argv[0], err)
	}
}

func lookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := "/usr/bin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("command not found")
}

// idle is a container's init: it reaps orphans until it is told to stop.
// Commands never see what it holds: it is not dumpable (no /proc/1/fd, mem
// or environ for them) and its stdio is /dev/null.
func idle() {
	guard()
	if null, err := os.OpenFile("/dev/null", os.O_RDWR, 0); err == nil {
		for fd := 0; fd <= 2; fd++ {
			_ = unix.Dup3(int(null.Fd()), fd, 0)
		}
		null.Close()
	}
	keepOnlyStdio()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, syscall.SIGCHLD)
	for {
		select {
		case <-sigs:
			os.Exit(0)
		case <-chld:
			for {
				var ws syscall.WaitStatus
				pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}

// --- Landlock ---

// landlock restricts the program to reading the file system, writing only
// the writable paths, and (kernel ABI 4 and later) connecting over TCP only
// to the egress relay; with ABI 6 it also may not signal processes outside
// its domain (the wrapper).
func landlock(req *sandbox.GuestRequest) error {
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return fmt.Errorf("not available: %v", e)
	}
	read := uint64(unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR)
	all := uint64(0x1fff)
	if abi >= 2 {
		all |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		all |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 5 {
		all |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	attr := struct{ fs, net, scoped uint64 }{fs: all}
	size := uintptr(8)
	var port uint64
	if abi >= 4 {
		attr.net = unix.LANDLOCK_ACCESS_NET_BIND_TCP | unix.LANDLOCK_ACCESS_NET_CONNECT_TCP
		size = 16
		if req.RelayAddr != "" {
			if _, p, err := net.SplitHostPort(req.RelayAddr); err == nil {
				port, _ = strconv.ParseUint(p, 10, 16)
			}
		}
	}
	if abi >= 6 {
		attr.scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		size = 24
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptrOf(&attr), size, 0)
	if e != 0 {
		return fmt.Errorf("create ruleset: %v", e)
	}
	defer unix.Close(int(fd))
	addPath := func(p string, access uint64) error {
		f, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // absent paths need no rule
		}
		defer unix.Close(f)
		var st unix.Stat_t
		if unix.Fstat(f, &st) == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			access &= unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
		}
		rule := unix.LandlockPathBeneathAttr{Allowed_access: access & all, Parent_fd: int32(f)}
		if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, unix.LANDLOCK_RULE_PATH_BENEATH, uintptrOf(&rule), 0, 0, 0); e != 0 {
			return fmt.Errorf("rule %s: %v", p, e)
		}
		return nil
	}
	if err := addPath("/", read); err != nil {
		return err
	}
	for _, dev := range []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/tty"} {
		if err := addPath(dev, read|unix.LANDLOCK_ACCESS_FS_WRITE_FILE|unix.LANDLOCK_ACCESS_FS_TRUNCATE); err != nil {
			return err
		}
	}
	for _, p := range req.Writable {
		if err := addPath(p, all); err != nil {
			return err
		}
	}
	if port != 0 {
		rule := struct {
			access uint64
			port   uint64
		}{unix.LANDLOCK_ACCESS_NET_CONNECT_TCP, port}
		if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, fd, landlockRuleNetPort, uintptrOf(&rule), 0, 0, 0); e != 0 {
			return fmt.Errorf("net rule: %v", e)
		}
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); e != 0 {
		return fmt.Errorf("restrict self: %v", e)
	}
	return nil
}

// --- workspace watching ---

type fileState struct {
	size  int64
	mtime int64
	ino   uint64
	dir   bool
}

const maxSnapshot = 20000

func snapshot(root string) map[string]fileState {
	out := map[string]fileState{}
	if root == "" {
		return out
	}
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || len(out) >= maxSnapshot {
			return fs.SkipDir
		}
		rel, rerr := filepath.Rel(root, p)
		if rerr != nil || rel == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return nil
		}
		st := fileState{size: info.Size(), mtime: info.ModTime().UnixNano(), dir: d.IsDir()}
		if s, ok := info.Sys().(*syscall.Stat_t); ok {
			st.ino = s.Ino
		}
		if d.Type().IsRegular() || d.IsDir() {
			out[rel] = st
		}
		return nil
	})
	return out
}

func diff(before, after map[string]fileState) ([]sandbox.SidecarFile, bool) {
	var out []sandbox.SidecarFile
	for p, a := range after {
		if a.dir {
			continue
		}
		b, ok := before[p]
		switch {
		case !ok || b.dir:
			out = append(out, sandbox.SidecarFile{Path: p, Size: a.size, Change: "created"})
		case b.size != a.size || b.mtime != a.mtime || b.ino != a.ino:
			out = append(out, sandbox.SidecarFile{Path: p, Size: a.size, Change: "modified"})
		}
	}
	for p, b := range before {
		if _, ok := after[p]; !ok && !b.dir {
			out = append(out, sandbox.SidecarFile{Path: p, Size: 0, Change: "deleted"})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	trunc := false
	if len(out) > 1000 {
		out, trunc = out[:1000], true
	}
	if out == nil {
		out = []sandbox.SidecarFile{}
	}
	return out, trunc
}

// newPackages finds Python (*.dist-info) and npm (node_modules/NAME)
// packages that appeared in the workspace.
func newPackages(before, after map[string]fileState) []sandbox.SidecarPackage {
	out := []sandbox.SidecarPackage{}
	for p, st := range after {
		if !st.dir {
			continue
		}
		if _, had := before[p]; had {
			continue
		}
		base := filepath.Base(p)
		switch {
		case strings.HasSuffix(base, ".dist-info"):
			nv := strings.TrimSuffix(base, ".dist-info")
			name, ver, _ := strings.Cut(nv, "-")
			out = append(out, sandbox.SidecarPackage{Manager: "pip", Name: name, Version: ver})
		case filepath.Base(filepath.Dir(p)) == "node_modules" && !strings.HasPrefix(base, "."):
			out = append(out, sandbox.SidecarPackage{Manager: "npm", Name: base})
		}
		if len(out) >= 500 {
			break
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// --- egress relay ---

// relay listens on a TCP address inside the sandbox and forwards each
// connection to the host's egress proxy socket, noting the CONNECT target
// and the proxy's answer for the sidecar.
type relay struct {
	ln   net.Listener
	sock string
	mu   sync.Mutex
	seen []sandbox.SidecarNet
	wg   sync.WaitGroup
}

func startRelay(addr, sock string) (*relay, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	r := &relay{ln: ln, sock: sock}
	go r.serve()
	return r, nil
}

func (r *relay) serve() {
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.handle(c)
		}()
	}
}

func (r *relay) note(n sandbox.SidecarNet) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) < 1000 {
		r.seen = append(r.seen, n)
	}
}

func (r *relay) handle(c net.Conn) {
	defer c.Close()
	br := bufio.NewReaderSize(c, 8192)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := br.ReadString('\n')
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	var n sandbox.SidecarNet
	if f := strings.Fields(line); len(f) >= 2 && f[0] == "CONNECT" {
		if h, p, err := net.SplitHostPort(f[1]); err == nil {
			n.Host = h
			n.Port, _ = strconv.Atoi(p)
		}
	}
	up, err := net.Dial("unix", r.sock)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\n\r\n")
		return
	}
	defer up.Close()
	if _, err := io.WriteString(up, line); err != nil {
		return
	}
	ub := bufio.NewReader(up)
	go func() {
		_, _ = io.Copy(up, br)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	status, err := ub.ReadString('\n')
	if err == nil {
		if f := strings.Fields(status); len(f) >= 2 {
			n.Status, _ = strconv.Atoi(f[1])
		}
		n.Allowed = n.Status == 200
		_, _ = io.WriteString(c, status)
	}
	if n.Host != "" && n.Port > 0 {
		r.note(n)
	}
	_, _ = io.Copy(c, ub)
}

func (r *relay) close() []sandbox.SidecarNet {
	_ = r.ln.Close()
	r.mu.Lock()
	defer r.mu.Unlock()
	out := append([]sandbox.SidecarNet{}, r.seen...)
	return out
}
