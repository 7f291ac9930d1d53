// Package referencetest runs the official MCP reference servers from npm
// (installed by scripts/setup-mcp.sh into AGENTPLANE_MCP_SERVERS) for the
// tests of the MCP host and of the platform: where they are, and
// server-everything over Streamable HTTP forced onto loopback (it listens
// on every interface by itself).
package referencetest

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// EverythingJS is server-everything's entry point inside the npm prefix.
const EverythingJS = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"

// Need skips the test for why, or fails it under AGENTPLANE_TEST_STRICT=1.
func Need(t testing.TB, why string) {
	t.Helper()
	if os.Getenv("AGENTPLANE_TEST_STRICT") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// Servers returns the npm prefix the reference servers are installed in.
func Servers(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("AGENTPLANE_MCP_SERVERS")
	if dir == "" {
		Need(t, "the MCP reference servers are not installed: source scripts/setup-mcp.sh (scripts/test.sh does)")
	}
	if _, err := os.Stat(filepath.Join(dir, EverythingJS)); err != nil {
		Need(t, "server-everything is missing from "+dir+": run scripts/setup-mcp.sh")
	}
	if _, err := exec.LookPath("node"); err != nil {
		Need(t, "node is not installed (apt-get install nodejs)")
	}
	return dir
}

// loopbackJS makes a node server listen on 127.0.0.1 whatever address it
// asks for.
const loopbackJS = `const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if (typeof a[0] === 'number' || (typeof a[0] === 'string' && /^\d+$/.test(a[0]))) {
    if (typeof a[1] === 'string') a[1] = '127.0.0.1'; else a.splice(1, 0, '127.0.0.1');
  } else if (a[0] && typeof a[0] === 'object') { a[0] = Object.assign({}, a[0], {host: '127.0.0.1'}); }
  return listen.apply(this, a);
};
`

// EverythingHTTP starts server-everything over Streamable HTTP on a free
// loopback port, checks in /proc/net that it listens on loopback only, and
// returns its endpoint (http://127.0.0.1:PORT/mcp). It is stopped when the
// test ends.
func EverythingHTTP(t testing.TB) string {
	t.Helper()
	dir := Servers(t)
	pre := filepath.Join(t.TempDir(), "loopback.js")
	if err := os.WriteFile(pre, []byte(loopbackJS), 0o644); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "node", "-r", pre, filepath.Join(dir, EverythingJS), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	stderr, _ := cmd.StderrPipe()
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = cmd.Wait() })
	go func() { // drain
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
		}
	}()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(20 * time.Second); ; {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("server-everything did not listen on %s", addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !OnlyLoopback(t, port) {
		t.Fatalf("server-everything listens beyond loopback on port %d", port)
	}
	return "http://" + addr + "/mcp"
}

// OnlyLoopback reports whether every listener on port is bound to a
// loopback address (from /proc/net/tcp and tcp6), and that there is one.
func OnlyLoopback(t testing.TB, port int) bool {
	t.Helper()
	hexPort := fmt.Sprintf(":%04X", port)
	found := false
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 4 || fs[3] != "0A" || !strings.HasSuffix(fs[1], hexPort) {
				continue
			}
			found = true
			local := strings.TrimSuffix(fs[1], hexPort)
			if local != "0100007F" && local != "00000000000000000000000001000000" {
				return false
			}
		}
	}
	return found
}
