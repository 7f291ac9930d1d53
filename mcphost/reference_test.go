package mcphost_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/mcphost/referencetest"
	"github.com/agentplane/agentplane/tool"
)

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
	dir := referencetest.Servers(t)
	l := sandboxLauncher(t)
	l.Folder = dir
	reg := &registry{}
	h := loopbackHost(t, reg, mcphost.Options{Launcher: l})
	spec, err := mcphost.ParseSpec([]byte(fmt.Sprintf("name: everything\ntransport: stdio\ncommand: [node, %s/%s, stdio]\n", "/opt/agentplane", referencetest.EverythingJS)))
	if err != nil {
		t.Fatal(err)
	}
	ms := reviewAll(t, h, reg, spec)
	callEcho(t, h, ms)
}

// TestEverythingOverStreamableHTTP runs server-everything over Streamable
// HTTP, forced onto loopback (checked in /proc/net/tcp), and calls it
// through the host's allowlisting dialer.
func TestEverythingOverStreamableHTTP(t *testing.T) {
	url := referencetest.EverythingHTTP(t)
	reg := &registry{}
	h := loopbackHost(t, reg, mcphost.Options{})
	spec := specFor(t, "everything", url)
	ms := reviewAll(t, h, reg, spec)
	callEcho(t, h, ms)
}

// TestFilesystemServerInSandbox runs the reference server-filesystem over
// stdio in a tier-2 sandbox, on the sandbox's own temporary workspace: it
// writes and reads a file there and cannot read outside it.
func TestFilesystemServerInSandbox(t *testing.T) {
	dir := referencetest.Servers(t)
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
