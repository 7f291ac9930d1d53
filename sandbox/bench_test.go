package sandbox_test

// Benchmarks of the sandbox executors (scripts/bench-sandboxes.sh prints
// them as the table in docs/PERFORMANCE.md). Each reports p50 and p90 in
// milliseconds beside Go's mean.

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/container"
	"github.com/agentplane/agentplane/sandbox/gvisor"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
)

func report(b *testing.B, ds []time.Duration) {
	b.Helper()
	if len(ds) == 0 {
		return
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	pct := func(p float64) float64 {
		i := int(p*float64(len(ds)-1) + 0.5)
		return float64(ds[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.9), "p90-ms")
}

func executors(b *testing.B) map[string]sandbox.Executor {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("sandbox executors need root")
	}
	out := map[string]sandbox.Executor{}
	guest := sandboxtest.BuildGuest(b)
	if _, err := exec.LookPath("bwrap"); err == nil {
		e := container.New(container.Options{Guest: guest, StateDir: sandboxtest.StateDir(b)})
		if e.Available() == nil {
			out["bubblewrap"] = e
		}
	}
	runsc := os.Getenv("AGENTPLANE_RUNSC")
	if runsc == "" {
		home, _ := os.UserHomeDir()
		runsc = filepath.Join(home, ".cache", "agentplane-tools", "bin", "runsc")
	}
	if _, err := os.Stat(runsc); err == nil {
		e := gvisor.New(gvisor.Options{Runsc: runsc, Guest: guest, StateDir: sandboxtest.StateDir(b)})
		if e.Available() == nil {
			out["gvisor"] = e
			b.Cleanup(func() { e.Close() })
		}
	}
	return out
}

var truecmd = sandbox.Exec{Argv: []string{"/bin/true"}, Timeout: 30 * time.Second}

// BenchmarkColdStart: create a sandbox and run /bin/true in it (until its
// exit), the cost a call pays with no warm sandbox.
func BenchmarkColdStart(b *testing.B) {
	ctx := context.Background()
	for name, e := range executors(b) {
		b.Run(name, func(b *testing.B) {
			var ds []time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				sb, err := e.Create(ctx, sandbox.Spec{})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := sb.Exec(ctx, truecmd); err != nil {
					b.Fatal(err)
				}
				ds = append(ds, time.Since(t0))
				b.StopTimer()
				sb.Destroy(ctx)
				b.StartTimer()
			}
			report(b, ds)
		})
	}
}

// BenchmarkWarmAcquire: a new run takes a sandbox from the warm pool (the
// provision time of its first call) and runs /bin/true.
func BenchmarkWarmAcquire(b *testing.B) {
	ctx := context.Background()
	for name, e := range executors(b) {
		b.Run(name, func(b *testing.B) {
			tier := e.Capabilities().Tier
			m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{tier: e}, Warm: map[int]int{tier: 1}})
			m.Start(ctx)
			defer m.Stop()
			spec := sandbox.Spec{}
			var acquire, first []time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				m.Prewarm(tier, spec)
				wctx, cancel := context.WithTimeout(ctx, time.Minute)
				if err := m.WaitWarm(wctx, tier, spec, 1); err != nil {
					b.Fatal(err)
				}
				cancel()
				run := "bench-" + strconv.Itoa(i)
				b.StartTimer()
				c, err := m.Run(ctx, sandbox.Request{Tier: tier, Tenant: "t", RunID: run, Spec: spec, Exec: truecmd})
				if err != nil {
					b.Fatal(err)
				}
				if c.Boundary.Lifecycle != sandbox.LifecycleWarm {
					b.Fatalf("lifecycle %s", c.Boundary.Lifecycle)
				}
				acquire = append(acquire, c.Boundary.Provision)
				first = append(first, c.Boundary.Provision+c.Boundary.Wall)
				b.StopTimer()
				m.EndRun(ctx, "t", run)
				b.StartTimer()
			}
			report(b, acquire)
			sort.Slice(first, func(i, j int) bool { return first[i] < first[j] })
			b.ReportMetric(float64(first[len(first)/2].Microseconds())/1000, "first-call-p50-ms")
		})
	}
}

// BenchmarkPythonPrint: python3 -c 'print(1)' run directly on the host and
// in a ready sandbox of each executor.
func BenchmarkPythonPrint(b *testing.B) {
	ctx := context.Background()
	b.Run("direct", func(b *testing.B) {
		var ds []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if out, err := exec.Command("/usr/bin/python3", "-c", "print(1)").Output(); err != nil || string(out) != "1\n" {
				b.Fatal(err)
			}
			ds = append(ds, time.Since(t0))
		}
		report(b, ds)
	})
	for name, e := range executors(b) {
		b.Run(name, func(b *testing.B) {
			sb, err := e.Create(ctx, sandbox.Spec{})
			if err != nil {
				b.Fatal(err)
			}
			defer sb.Destroy(ctx)
			py := sandbox.Exec{Argv: []string{"python3", "-c", "print(1)"}, Timeout: 30 * time.Second}
			var ds []time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				r, err := sb.Exec(ctx, py)
				if err != nil || string(r.Stdout.Tail) != "1\n" {
					b.Fatal(err, r.Outcome)
				}
				ds = append(ds, time.Since(t0))
			}
			report(b, ds)
		})
	}
}

// BenchmarkRuntimeStart compares the bare start of the two tier-2
// candidates on this host, each running /bin/true with namespaces, a
// read-only root and no network: bubblewrap and runc (the measurement
// behind the choice in docs/design/sandboxes.md).
func BenchmarkRuntimeStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
	if bw, err := exec.LookPath("bwrap"); err == nil {
		b.Run("bubblewrap", func(b *testing.B) {
			var ds []time.Duration
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				cmd := exec.Command(bw, "--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
					"--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64", "--symlink", "usr/bin", "/bin",
					"--proc", "/proc", "--dev", "/dev", "--cap-drop", "ALL", "--remount-ro", "/", "/bin/true")
				if out, err := cmd.CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
				ds = append(ds, time.Since(t0))
			}
			report(b, ds)
		})
	}
	rc, err := exec.LookPath("runc")
	if err != nil {
		return
	}
	b.Run("runc", func(b *testing.B) {
		dir := b.TempDir()
		root := filepath.Join(dir, "rootfs")
		for _, d := range []string{"usr", "proc", "dev", "tmp"} {
			os.MkdirAll(filepath.Join(root, d), 0o755)
		}
		for _, l := range []string{"lib", "lib64", "bin"} {
			os.Symlink("usr/"+l, filepath.Join(root, l))
		}
		spec := map[string]any{
			"ociVersion": "1.0.2",
			"process":    map[string]any{"user": map[string]any{"uid": 0, "gid": 0}, "args": []string{"/bin/true"}, "cwd": "/", "env": []string{"PATH=/usr/bin"}, "noNewPrivileges": true},
			"root":       map[string]any{"path": "rootfs", "readonly": true},
			"mounts": []any{
				map[string]any{"destination": "/usr", "type": "bind", "source": "/usr", "options": []string{"rbind", "ro"}},
				map[string]any{"destination": "/proc", "type": "proc", "source": "proc"},
				map[string]any{"destination": "/dev", "type": "tmpfs", "source": "tmpfs"},
			},
			"linux": map[string]any{"namespaces": []any{map[string]string{"type": "pid"}, map[string]string{"type": "network"}, map[string]string{"type": "ipc"}, map[string]string{"type": "uts"}, map[string]string{"type": "mount"}}},
		}
		data, _ := json.Marshal(spec)
		os.WriteFile(filepath.Join(dir, "config.json"), data, 0o644)
		state := filepath.Join(dir, "state")
		var ds []time.Duration
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			cmd := exec.Command(rc, "--root", state, "run", "--bundle", dir, "b"+strconv.Itoa(i))
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("%v: %s", err, out)
			}
			ds = append(ds, time.Since(t0))
		}
		report(b, ds)
	})
}
