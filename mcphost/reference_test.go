package mcphost_test

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

	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/tool"
)

// everythingJS is server-everything's entry point inside the npm prefix.
const everythingJS = "node_modules/@modelcontextprotocol/server-everything/dist/index.js"

// referenceServers returns the npm prefix scripts/setup-mcp.sh installs.
func referenceServers(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("AGENTPLANE_MCP_SERVERS")
	if dir == "" {
		need(t, "the MCP reference servers are not installed: source scripts/setup-mcp.sh (scripts/test.sh does)")
	}
	if _, err := os.Stat(filepath.Join(dir, everythingJS)); err != nil {
		need(t, "server-everything is missing from "+dir+": run scripts/setup-mcp.sh")
	}
	if _, err := exec.LookPath("node"); err != nil {
		need(t, "node is not installed (apt-get install nodejs)")
	}
	return dir
}

// reviewAll approves everything a server lists, each tool with a default
// overlay, as a reviewer would after reading the diff.
func reviewAll(t *testing.T, h *mcphost.Host, reg *registry, spec *mcphost.Spec) map[string]*tool.Manifest {
	t.Helper()
	snap, err := h.List(t.Context(), "bank", "", spec)
	if err != nil {
		t.Fatal(err)
	}
	var ov strings.Builder
	for _, d := range snap.Tools {
		fmt.Fprintf(&ov, "---\ntool: %s\nrisk: low\ntier: 2\ntimeout_ms: 20000\nside_effects: none\n", d.Name)
	}
	ovs, err := mcphost.ParseOverlays([]byte(ov.String()))
	if err != nil {
		t.Fatal(err)
	}
	// A server's schema the manifest format refuses (an unknown format,
	// say) keeps that tool out; the rest are reviewed.
	var ms []*tool.Manifest
	for _, d := range snap.Tools {
		one, err := mcphost.Manifests(spec.Name, &mcphost.Snapshot{Tools: []mcphost.ToolDef{d}}, map[string]*mcphost.Overlay{d.Name: ovs[d.Name]})
		if err != nil {
			t.Logf("not reviewable: %v", err)
			continue
		}
		ms = append(ms, one...)
	}
	reg.mu.Lock()
	if reg.cs == nil {
		reg.cs = map[string]*mcphost.Connector{}
	}
	reg.cs[spec.Name] = &mcphost.Connector{Tenant: "bank", Spec: spec, Reviewed: snap, Manifests: ms}
	reg.mu.Unlock()
	out := map[string]*tool.Manifest{}
	for _, m := range ms {
		out[m.Name] = m
	}
	return out
}

func callEcho(t *testing.T, h *mcphost.Host, ms map[string]*tool.Manifest) {
	t.Helper()
	m := ms["echo"]
	if m == nil {
		t.Fatalf("server-everything lists no echo (reviewed: %d tools)", len(ms))
	}
	res, err := h.Call(t.Context(), m, tool.Call{Args: []byte(`{"message":"hello from agentplane"}`), RunID: "run_ref", Tenant: "bank", IdempotencyKey: "run_ref:1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || !strings.Contains(string(res.Output), "hello from agentplane") {
		t.Fatalf("echo: %s", res.Output)
	}
}

// TestEverythingOverStdioInSandbox runs the reference server-everything
// from npm, over stdio, inside a tier-2 sandbox with node and the npm
// folder mounted read-only.
func TestEverythingOverStdioInSandbox(t *testing.T) {
	dir := referenceServers(t)
	l := sandboxLauncher(t)
	l.Folder = dir
	reg := &registry{}
	h := loopbackHost(t, reg, mcphost.Options{Launcher: l})
	spec, err := mcphost.ParseSpec([]byte(fmt.Sprintf("name: everything\ntransport: stdio\ncommand: [node, %s/%s, stdio]\n", "/opt/agentplane", everythingJS)))
	if err != nil {
		t.Fatal(err)
	}
	ms := reviewAll(t, h, reg, spec)
	callEcho(t, h, ms)
}

// loopbackJS makes a node server listen on 127.0.0.1 whatever address it
// asks for (server-everything listens on every interface).
const loopbackJS = `const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...a) {
  if (typeof a[0] === 'number' || (typeof a[0] === 'string' && /^\d+$/.test(a[0]))) {
    if (typeof a[1] === 'string') a[1] = '127.0.0.1'; else a.splice(1, 0, '127.0.0.1');
  } else if (a[0] && typeof a[0] === 'object') { a[0] = Object.assign({}, a[0], {host: '127.0.0.1'}); }
  return listen.apply(this, a);
};
`

// TestEverythingOverStreamableHTTP runs server-everything over Streamable
// HTTP, forced onto loopback (checked in /proc/net/tcp), and calls it
// through the host's allowlisting dialer.
func TestEverythingOverStreamableHTTP(t *testing.T) {
	dir := referenceServers(t)
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
	cmd := exec.CommandContext(ctx, "node", "-r", pre, filepath.Join(dir, everythingJS), "streamableHttp")
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port))
	stderr, _ := cmd.StderrPipe()
	cmd.Stdout = nil
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
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
	if !onlyLoopback(t, port) {
		t.Fatalf("server-everything listens beyond loopback on port %d", port)
	}
	reg := &registry{}
	h := loopbackHost(t, reg, mcphost.Options{})
	spec := specFor(t, "everything", "http://"+addr+"/mcp")
	ms := reviewAll(t, h, reg, spec)
	callEcho(t, h, ms)
}

// onlyLoopback reports whether every listener on port is bound to a
// loopback address (from /proc/net/tcp and tcp6).
func onlyLoopback(t *testing.T, port int) bool {
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

// TestFilesystemServerInSandbox runs the reference server-filesystem over
// stdio in a tier-2 sandbox, on the sandbox's own temporary workspace: it
// writes and reads a file there and cannot read outside it.
func TestFilesystemServerInSandbox(t *testing.T) {
	dir := referenceServers(t)
	l := sandboxLauncher(t)
	l.Folder = dir
	reg := &registry{}
	h := loopbackHost(t, reg, mcphost.Options{Launcher: l})
	spec, err := mcphost.ParseSpec([]byte("name: files\ntransport: stdio\ncommand: [node, /opt/agentplane/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js, /workspace]\n"))
	if err != nil {
		t.Fatal(err)
	}
	ms := reviewAll(t, h, reg, spec)
	call := func(name, args string, idx int) string {
		t.Helper()
		m := ms[name]
		if m == nil {
			t.Fatalf("server-filesystem lists no %s", name)
		}
		res, err := h.Call(t.Context(), m, tool.Call{Args: []byte(args), RunID: "run_fs", Tenant: "bank", IdempotencyKey: fmt.Sprintf("run_fs:%d:0", idx)})
		if err != nil {
			t.Fatal(err)
		}
		return string(res.Output)
	}
	if out := call("write_file", `{"path":"/workspace/note.txt","content":"kept in the sandbox"}`, 1); strings.Contains(out, `"is_error":true`) {
		t.Fatalf("write_file: %s", out)
	}
	if out := call("read_text_file", `{"path":"/workspace/note.txt"}`, 2); !strings.Contains(out, "kept in the sandbox") {
		t.Fatalf("read_text_file: %s", out)
	}
	if out := call("read_text_file", `{"path":"/etc/passwd"}`, 3); !strings.Contains(out, `"is_error":true`) {
		t.Fatalf("read outside the allowed folder: %s", out)
	}
}
