// Command guest is the wrapper that runs inside every agentplane sandbox,
// mounted read-only at /.agentplane/guest. It is built as a static binary
// (CGO_ENABLED=0) so it runs in any root filesystem.
//
//	guest run REQUEST.json   run one command as the request says, then
//	                         write the sidecar report
//	guest child REQUEST.json (internal) apply rlimits and Landlock, then exec
//	guest idle               stay up as a container's init, reaping children
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
		fmt.Fprintln(os.Stderr, "usage: guest run|child REQUEST.json | guest idle")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "run":
		os.Exit(run(arg(2)))
	case "child":
		child(arg(2))
	case "idle":
		idle()
	default:
		fmt.Fprintf(os.Stderr, "guest: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func arg(i int) string {
	if len(os.Args) <= i {
		fmt.Fprintln(os.Stderr, "guest: missing request path")
		os.Exit(2)
	}
	return os.Args[i]
}

func readRequest(p string) *sandbox.GuestRequest {
	f, err := os.Open(p)
	if err != nil {
		fail("read request: %v", err)
	}
	defer f.Close()
	var r sandbox.GuestRequest
	if err := json.NewDecoder(io.LimitReader(f, 4<<20)).Decode(&r); err != nil {
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

// run starts the program through "guest child", waits for it and writes the
// sidecar.
func run(reqPath string) int {
	req := readRequest(reqPath)
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
	cmd := exec.Command(self, "child", reqPath)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = req.Env
	cmd.Dir = req.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	// Signals meant for the sandbox go to the program; the wrapper stays.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGPIPE)
	start := time.Now()
	code, sig := 126, ""
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "agentplane sandbox: start: %v\n", err)
	} else {
		_ = cmd.Wait()
		ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
		switch {
		case ws.Exited():
			code = ws.ExitStatus()
		case ws.Signaled():
			code, sig = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		}
	}
	end := time.Now()
	var peak int64
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && cmd.ProcessState != nil {
		peak = ru.Maxrss * 1024
	}
	if req.KillAll {
		// Everything the program left running in the background dies here;
		// kill(-1) spares only init and the wrapper itself.
		_ = syscall.Kill(-1, syscall.SIGKILL)
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
	writeSidecar(req.Sidecar, &sc)
	return code
}

func writeSidecar(p string, sc *sandbox.Sidecar) {
	if p == "" {
		return
	}
	data, err := json.Marshal(sc)
	if err != nil {
		return
	}
	tmp, err := os.CreateTemp(filepath.Dir(p), ".sidecar-*")
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentplane sandbox: sidecar: %v\n", err)
		return
	}
	_, werr := tmp.Write(data)
	cerr := tmp.Close()
	if werr != nil || cerr != nil || os.Rename(tmp.Name(), p) != nil {
		_ = os.Remove(tmp.Name())
	}
}

// child applies the limits that are set from inside, then becomes the
// program.
func child(reqPath string) {
	req := readRequest(reqPath)
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
	argv0, err := lookPath(req.Argv[0], req.Env)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", req.Argv[0], err)
		os.Exit(127)
	}
	if err := syscall.Exec(argv0, req.Argv, req.Env); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", req.Argv[0], err)
		os.Exit(126)
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
func idle() {
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
