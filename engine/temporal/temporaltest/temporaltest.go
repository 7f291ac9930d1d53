// Package temporaltest starts a real Temporal dev server (`temporal server
// start-dev`, from the CLI that scripts/setup-temporal.sh builds) for the
// tests and benchmarks of the Temporal engine.
//
// Each server listens on 127.0.0.1 only, on ports picked free at start, keeps
// its state in a SQLite file under the test's temporary directory, and runs
// with the dynamic config values measured on this machine to cut the latency
// of a sequential activity from about 100 ms to about 20 ms
// (../shared/notes/temporal-on-this-machine.md). It is stopped by its PID in
// t.Cleanup: SIGTERM, then SIGKILL if it has not exited within a bound.
//
// The CLI is found through AGENTPLANE_TEMPORAL_CLI. When it is missing the
// test is skipped with how to get it, unless AGENTPLANE_TEST_STRICT=1, where
// it fails.
package temporaltest

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
)

// EnvCLI names the environment variable holding the path of the temporal CLI.
const EnvCLI = "AGENTPLANE_TEMPORAL_CLI"

// Namespace is the namespace every dev server creates.
const Namespace = "default"

// TunedDynamicConfig are the dynamic config values the server starts with:
// a faster transfer-queue poll and one task-queue partition (raising the poll
// rate alone left some activities stalled for about 2 s).
var TunedDynamicConfig = []string{
	"history.transferProcessorMaxPollRPS=1000",
	"matching.numTaskqueueReadPartitions=1",
	"matching.numTaskqueueWritePartitions=1",
}

// Options tune a server. The zero value is a good default.
type Options struct {
	// Namespaces are created at start, beside "default".
	Namespaces []string
	// ReadyTimeout bounds the wait for the server to answer (default 90 s:
	// the machine is shared, so start-up can be slow).
	ReadyTimeout time.Duration
}

// Server is a running dev server.
type Server struct {
	// HostPort is the frontend's gRPC address, 127.0.0.1:PORT.
	HostPort string
	// DBFile is the SQLite file holding the server's state.
	DBFile string

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	out     *syncBuffer
}

// CLI returns the path of the temporal CLI, or skips (fails under
// AGENTPLANE_TEST_STRICT=1) the test when it is not installed.
func CLI(t testing.TB) string {
	t.Helper()
	p := os.Getenv(EnvCLI)
	if p == "" {
		missing(t, EnvCLI+" is not set")
		return ""
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		missing(t, fmt.Sprintf("%s=%s is not an executable file", EnvCLI, p))
		return ""
	}
	return p
}

func missing(t testing.TB, why string) {
	t.Helper()
	msg := why + ": run `. scripts/setup-temporal.sh` (it builds the Temporal CLI into the tools cache and exports " + EnvCLI + ")"
	if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// Start starts a dev server and returns once it answers health checks. The
// server is stopped when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	cli := CLI(t)
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 90 * time.Second
	}
	dir := t.TempDir()
	ports, err := freePorts(3)
	if err != nil {
		t.Fatalf("temporal dev server: pick ports: %v", err)
	}
	s := &Server{
		HostPort: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])),
		DBFile:   filepath.Join(dir, "temporal.db"),
		done:     make(chan struct{}),
		out:      &syncBuffer{max: 64 << 10},
	}
	args := []string{
		"server", "start-dev", "--headless", "--ip", "127.0.0.1",
		"--port", strconv.Itoa(ports[0]),
		"--http-port", strconv.Itoa(ports[1]),
		"--metrics-port", strconv.Itoa(ports[2]),
		"--db-filename", s.DBFile,
		"--sqlite-pragma", "journal_mode=wal",
		"--sqlite-pragma", "synchronous=full",
	}
	for _, kv := range TunedDynamicConfig {
		args = append(args, "--dynamic-config-value", kv)
	}
	for _, ns := range o.Namespaces {
		args = append(args, "--namespace", ns)
	}
	s.cmd = exec.Command(cli, args...)
	s.cmd.Dir = dir
	s.cmd.Stdout = s.out
	s.cmd.Stderr = s.out
	// The server dies with the test binary even if the binary is killed
	// before its cleanups run.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("temporal dev server: start %s: %v", cli, err)
	}
	go func() {
		s.waitErr = s.cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() { s.stop(t) })
	if err := s.waitReady(o.ReadyTimeout); err != nil {
		t.Fatalf("temporal dev server (pid %d) not ready: %v\nserver output:\n%s", s.cmd.Process.Pid, err, s.out.String())
	}
	return s
}

// PID returns the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// waitReady polls the frontend's health check until it answers SERVING or
// the bound passes.
func (s *Server) waitReady(bound time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	var last error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("server exited: %v", s.waitErr)
		default:
		}
		c, err := client.DialContext(ctx, client.Options{HostPort: s.HostPort, Namespace: Namespace, Logger: quietLogger()})
		if err == nil {
			_, err = c.CheckHealth(ctx, &client.CheckHealthRequest{})
			c.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("no answer within %v (last error: %v)", bound, last)
		case <-s.done:
			return fmt.Errorf("server exited: %v", s.waitErr)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stop ends the server by its PID: SIGTERM, then SIGKILL after 15 s.
func (s *Server) stop(t testing.TB) {
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return
	case <-time.After(15 * time.Second):
	}
	t.Logf("temporal dev server (pid %d) ignored SIGTERM for 15 s; killing it", s.cmd.Process.Pid)
	_ = s.cmd.Process.Kill()
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Errorf("temporal dev server (pid %d) still running after SIGKILL", s.cmd.Process.Pid)
	}
}

// Client dials the server with o (HostPort, Namespace and a quiet logger are
// filled in when empty) and closes the client when the test ends.
func (s *Server) Client(t testing.TB, o client.Options) client.Client {
	t.Helper()
	if o.HostPort == "" {
		o.HostPort = s.HostPort
	}
	if o.Namespace == "" {
		o.Namespace = Namespace
	}
	if o.Logger == nil {
		o.Logger = quietLogger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, o)
	if err != nil {
		t.Fatalf("dial temporal dev server %s: %v", s.HostPort, err)
	}
	t.Cleanup(c.Close)
	return c
}

// quietLogger keeps the SDK's warnings and errors (on stderr) and drops the
// rest.
func quietLogger() tlog.Logger {
	return tlog.NewStructuredLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
}

// freePorts reserves n distinct loopback ports by listening on port 0, then
// releases them for the server to take.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// syncBuffer keeps the last max bytes of the server's output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
	max int
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.buf.String())
}
