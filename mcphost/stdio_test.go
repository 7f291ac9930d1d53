package mcphost_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/mcphost/referencetest"
	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/container"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
	"github.com/agentplane/agentplane/tool"
)

// need skips, or under AGENTPLANE_TEST_STRICT=1 fails, naming what is
// missing and how to get it.
func need(t testing.TB, why string) {
	t.Helper()
	referencetest.Need(t, why)
}

// sandboxLauncher returns a launcher over a bubblewrap manager whose
// mounted folder holds the test's stdio server, built static.
func sandboxLauncher(t testing.TB) *mcphost.SandboxLauncher {
	t.Helper()
	if os.Geteuid() != 0 {
		need(t, "the tier-2 sandbox needs root (cgroups, uids); run scripts/test.sh as root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		need(t, "bubblewrap is not installed (scripts/sandboxes.sh installs it)")
	}
	e := container.New(container.Options{Guest: sandboxtest.BuildGuest(t), StateDir: sandboxtest.StateDir(t)})
	if err := e.Available(); err != nil {
		need(t, "bubblewrap executor unavailable: "+err.Error())
	}
	// The sandbox's uid must be able to reach the folder.
	folder, err := os.MkdirTemp("", "agentplane-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(folder) })
	if err := os.Chmod(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(folder, "server"), "./testdata/stdioserver")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the stdio server: %v\n%s", err, out)
	}
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e}})
	if err := m.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Stop)
	return &mcphost.SandboxLauncher{Manager: m, Folder: folder}
}

// TestStdioInSandbox runs a stdio server only inside a tier-2 sandbox: it
// lists and calls, cannot reach the network or the host's files, gets no
// host environment, speaks the previous revision when pinned to it, and
// is stopped within a bound when the host closes.
func TestStdioInSandbox(t *testing.T) {
	l := sandboxLauncher(t)
	for _, tc := range []struct {
		name string
		argv string
	}{{"latest", `["/opt/agentplane/server"]`}, {"previous revision only", `["/opt/agentplane/server", "-old"]`}} {
		t.Run(tc.name, func(t *testing.T) {
			reg := &registry{}
			h := loopbackHost(t, reg, mcphost.Options{Launcher: l})
			spec, err := mcphost.ParseSpec([]byte("name: local\ntransport: stdio\ncommand: " + tc.argv + "\n"))
			if err != nil {
				t.Fatal(err)
			}
			snap, err := h.List(t.Context(), "bank", "", spec)
			if err != nil {
				t.Fatal(err)
			}
			ov, _ := mcphost.ParseOverlays([]byte("tool: probe\nrisk: low\ntier: 2\ntimeout_ms: 10000\nside_effects: none\n---\ntool: echo\nrisk: low\ntier: 2\ntimeout_ms: 10000\nside_effects: external\n"))
			ms, err := mcphost.Manifests("local", snap, ov)
			if err != nil {
				t.Fatal(err)
			}
			reg.cs = map[string]*mcphost.Connector{"local": {Tenant: "bank", Spec: spec, Reviewed: snap, Manifests: ms}}
			byName := map[string]*tool.Manifest{}
			for _, m := range ms {
				byName[m.Name] = m
			}
			res, err := h.Call(t.Context(), byName["probe"], tool.Call{Args: []byte(`{}`), RunID: "run_s", Tenant: "bank", IdempotencyKey: "run_s:1:0"})
			if err != nil {
				t.Fatal(err)
			}
			var out struct {
				Structured struct {
					Dial     string   `json:"dial"`
					RootRead string   `json:"root_read"`
					Env      []string `json:"env"`
					UID      int      `json:"uid"`
				} `json:"structured"`
			}
			if err := json.Unmarshal(res.Output, &out); err != nil {
				t.Fatal(err)
			}
			p := out.Structured
			if p.Dial == "connected" || p.RootRead == "readable" || p.UID == 0 {
				t.Fatalf("the server escaped its sandbox: %+v", p)
			}
			for _, kv := range p.Env {
				if strings.HasPrefix(kv, "AGENTPLANE") || strings.HasPrefix(kv, "GOPATH") || strings.HasPrefix(kv, "USER=") {
					t.Fatalf("the host's environment reached the server: %q", kv)
				}
			}
			res, err = h.Call(t.Context(), byName["echo"], tool.Call{Args: []byte(`{"text":"hi"}`), RunID: "run_s", Tenant: "bank", IdempotencyKey: "run_s:2:0"})
			if err != nil || !strings.Contains(string(res.Output), "hi @run_s:2:0") {
				t.Fatalf("echo: %s %v", res.Output, err)
			}
			start := time.Now()
			if err := h.Close(); err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 30*time.Second {
				t.Fatalf("stopping the server took %s", d)
			}
		})
	}
}
