package toolrun_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/sandbox/container"
	"github.com/agentplane/agentplane/sandbox/gvisor"
	"github.com/agentplane/agentplane/sandbox/sandboxtest"
	"github.com/agentplane/agentplane/sandbox/toolrun"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

const pythonManifest = `
name: run_python
description: Run Python 3 code in an isolated sandbox.
tier: 3
timeout_ms: 20000
memory_mb: 256
cpu_ms: 15000
filesystem: ephemeral
network: {allow: []}
side_effects: none
max_output_bytes: 16384
input_schema:
  type: object
  additionalProperties: false
  required: [code]
  properties:
    code: {type: string}
    files: {type: object, additionalProperties: {type: string}}
    outputs: {type: array, items: {type: string}}
`

func manifest(t *testing.T, yaml string) *tool.Manifest {
	t.Helper()
	ms, err := tool.ParseManifests("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return ms[0]
}

func bwrapExecutor(t *testing.T) sandbox.Executor {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("sandbox executors need root; run scripts/test.sh as root")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Skip("bubblewrap is not installed (scripts/test.sh installs it)")
	}
	e := container.New(container.Options{Guest: sandboxtest.BuildGuest(t), StateDir: sandboxtest.StateDir(t)})
	if err := e.Available(); err != nil {
		t.Skipf("bubblewrap unavailable: %v", err)
	}
	return e
}

func gvisorExecutor(t *testing.T) sandbox.Executor {
	t.Helper()
	p := sandboxtest.Runsc(t)
	e := gvisor.New(gvisor.Options{Runsc: p, Guest: sandboxtest.BuildGuest(t), StateDir: sandboxtest.StateDir(t)})
	if err := e.Available(); err != nil {
		t.Skipf("gVisor unavailable: %v", err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

type teardowns struct {
	mu  sync.Mutex
	all []sandbox.Teardown
}

func (td *teardowns) add(x sandbox.Teardown) {
	td.mu.Lock()
	td.all = append(td.all, x)
	td.mu.Unlock()
}
func (td *teardowns) by(who string) int {
	td.mu.Lock()
	defer td.mu.Unlock()
	n := 0
	for _, x := range td.all {
		if x.By == who {
			n++
		}
	}
	return n
}

// execution is what the broker makes of a runner's answer.
type execution struct {
	Status   string
	Output   []byte
	Boundary *trace.SandboxInfo
}

// runners stands in for the broker's tier dispatch: a tier without a
// runner fails closed with the broker's own message.
type runners map[int]*toolrun.Runner

func newBroker(t *testing.T, m *sandbox.Manager) runners {
	t.Helper()
	return runners(toolrun.Executors(m))
}

func (r runners) Execute(ctx context.Context, m *tool.Manifest, c tool.Call) (execution, error) {
	run := r[m.Tier]
	if run == nil {
		return execution{Status: trace.StatusError, Output: []byte(`{"error":"tool needs an isolation tier 3 executor, and none is available on this host"}`)}, nil
	}
	res, info, err := run.Execute(ctx, m, c)
	if err != nil {
		return execution{}, err
	}
	st := trace.StatusOK
	switch {
	case info != nil && info.Outcome == sandbox.OutcomeTimeout:
		st = trace.StatusTimeout
	case res.IsError:
		st = trace.StatusError
	}
	return execution{Status: st, Output: res.Output, Boundary: info}, nil
}

func call(run string, args any) tool.Call {
	raw, _ := json.Marshal(args)
	return tool.Call{Tool: "run_python", Args: raw, IdempotencyKey: run + ":1:0", RunID: run, Tenant: "acme", User: "u"}
}

// TestRunPythonThroughBroker runs run_python (tier 3) on gVisor as the
// broker does: result, boundary record, session reuse, files in and out.
func TestRunPythonThroughBroker(t *testing.T) {
	e3 := gvisorExecutor(t)
	var td teardowns
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{3: e3}, Warm: map[int]int{3: -1}, OnTeardown: td.add})
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	b := newBroker(t, m)
	mf := manifest(t, pythonManifest)
	ctx := context.Background()

	ex, err := b.Execute(ctx, mf, call("run_a", map[string]any{
		"code":    "import csv\nrows = list(csv.reader(open('in.csv')))\nopen('out.txt','w').write(str(len(rows)))\nprint('rows', len(rows))\nprint('\\x1b[31mkey sk-ant-api03-' + 'x'*30)",
		"files":   map[string]string{"in.csv": "a,b\n1,2\n3,4\n"},
		"outputs": []string{"out.txt", "absent.txt"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Status != trace.StatusOK {
		t.Fatalf("status %s: %s", ex.Status, ex.Output)
	}
	var pr toolrun.PythonResult
	if err := json.Unmarshal(ex.Output, &pr); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(pr.Stdout, "rows 3") || pr.Files["out.txt"] != "3" || len(pr.Missing) != 1 {
		t.Fatalf("result %+v", pr)
	}
	if strings.Contains(pr.Stdout, "\x1b") || strings.Contains(pr.Stdout, "sk-ant-api03-xxxx") {
		t.Fatalf("stdout not sanitised: %q", pr.Stdout)
	}
	bd := ex.Boundary
	if bd == nil || bd.Executor != "gvisor" || bd.Tier != 3 || bd.Lifecycle != sandbox.LifecycleCreated || bd.ID == "" || bd.Host == "" ||
		bd.Outcome != "ok" || bd.ExitCode != 0 || bd.ProvisionMS <= 0 || bd.WallMS <= 0 || bd.BytesIn == 0 || bd.StdoutBytes == 0 ||
		!sandbox.ValidTraceparent(bd.Traceparent) || bd.Claim == nil || len(bd.Claim.Report) == 0 || len(bd.Claim.Disputed) != 0 || bd.Teardown != "" {
		j, _ := json.Marshal(bd)
		t.Fatalf("boundary %s", j)
	}
	// The same run reuses its sandbox and sees its workspace.
	ex2, err := b.Execute(ctx, mf, call("run_a", map[string]any{"code": "print(open('out.txt').read())\nraise SystemExit(4)"}))
	if err != nil {
		t.Fatal(err)
	}
	if ex2.Status != trace.StatusError || ex2.Boundary.Lifecycle != sandbox.LifecycleReused || ex2.Boundary.ID != bd.ID || ex2.Boundary.ExitCode != 4 || ex2.Boundary.Outcome != "exit" {
		j, _ := json.Marshal(ex2.Boundary)
		t.Fatalf("second call: %s %s", ex2.Status, j)
	}
	// Another run never gets that sandbox.
	ex3, err := b.Execute(ctx, mf, call("run_b", map[string]any{"code": "import os; print(os.path.exists('out.txt'))"}))
	if err != nil {
		t.Fatal(err)
	}
	if ex3.Boundary.ID == bd.ID || !strings.Contains(string(ex3.Output), "False") {
		t.Fatalf("run_b got %s: %s", ex3.Boundary.ID, ex3.Output)
	}
	// A timeout is a timeout.
	ex4, err := b.Execute(ctx, manifest(t, strings.Replace(pythonManifest, "timeout_ms: 20000", "timeout_ms: 1000", 1)), call("run_c", map[string]any{"code": "while True: pass"}))
	if err != nil {
		t.Fatal(err)
	}
	if ex4.Status != trace.StatusTimeout || ex4.Boundary.Outcome != "timeout" || ex4.Boundary.Teardown != sandbox.TeardownCaller ||
		!strings.Contains(string(ex4.Output), "fresh, empty workspace") {
		t.Fatalf("timeout: %s %+v %s", ex4.Status, ex4.Boundary, ex4.Output)
	}
	m.EndRun(ctx, "acme", "run_a")
	if td.by(sandbox.TeardownCaller) < 1 {
		t.Fatalf("EndRun recorded no teardown")
	}
}

// TestFailClosedAndDowngrade: a tier-3 tool without a tier-3 executor fails
// closed, unless the operator allowed tier 2, which every call records.
func TestFailClosedAndDowngrade(t *testing.T) {
	e2 := bwrapExecutor(t)
	mf := manifest(t, pythonManifest)
	ctx := context.Background()

	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e2}, Warm: map[int]int{2: -1}})
	m.Start(ctx)
	b := newBroker(t, m)
	ex, err := b.Execute(ctx, mf, call("run_x", map[string]any{"code": "print(1)"}))
	m.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if ex.Status != trace.StatusError || !strings.Contains(string(ex.Output), "tier 3") || ex.Boundary != nil {
		t.Fatalf("without downgrade: %s %s", ex.Status, ex.Output)
	}

	m = sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e2}, DowngradeTier3: true, Warm: map[int]int{2: -1}})
	m.Start(ctx)
	defer m.Stop()
	b = newBroker(t, m)
	ex, err = b.Execute(ctx, mf, call("run_y", map[string]any{"code": "print(6*7)"}))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Status != trace.StatusOK || !strings.Contains(string(ex.Output), "42") || ex.Boundary == nil ||
		!ex.Boundary.Downgraded || ex.Boundary.RequestedTier != 3 || ex.Boundary.Tier != 2 || ex.Boundary.Executor != "bubblewrap" {
		t.Fatalf("downgraded: %s %s %+v", ex.Status, ex.Output, ex.Boundary)
	}
}

// TestPoolAndReaper: a warm sandbox is taken from the pool; the reaper
// destroys idle sessions and records it.
func TestPoolAndReaper(t *testing.T) {
	e2 := bwrapExecutor(t)
	var td teardowns
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e2}, Warm: map[int]int{2: 1},
		OnTeardown: td.add, IdleTTL: time.Minute, ReapEvery: time.Hour, Clock: clock})
	ctx := context.Background()
	m.Start(ctx)
	defer m.Stop()
	spec := sandbox.Spec{MemoryMB: 128}
	if err := m.Prewarm(2, spec); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := m.WaitWarm(wctx, 2, spec, 1); err != nil {
		t.Fatal(err)
	}
	c, err := m.Run(ctx, sandbox.Request{Tier: 2, Tenant: "acme", RunID: "r1", Spec: spec, Exec: sandbox.Exec{Argv: []string{"true"}}})
	if err != nil || c.Boundary.Lifecycle != sandbox.LifecycleWarm {
		t.Fatalf("lifecycle %q err %v", c.Boundary.Lifecycle, err)
	}
	if len(m.Sessions()) != 1 {
		t.Fatalf("sessions %v: %+v", m.Sessions(), c.Result)
	}
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	m.Reap()
	if len(m.Sessions()) != 0 || td.by(sandbox.TeardownReaper) != 1 {
		t.Fatalf("after reap: sessions %v, reaper teardowns %d", m.Sessions(), td.by(sandbox.TeardownReaper))
	}
	// When the run ends, its record includes what the reaper did meanwhile,
	// once.
	got := m.EndRun(ctx, "acme", "r1")
	if len(got) != 1 || got[0].By != sandbox.TeardownReaper || got[0].ID != c.Boundary.ID {
		t.Fatalf("EndRun records %+v, want the reaper's teardown of %s", got, c.Boundary.ID)
	}
	if again := m.EndRun(ctx, "acme", "r1"); len(again) != 0 {
		t.Fatalf("EndRun reported %+v a second time", again)
	}
}

// TestExampleManifest: the card-dispute example's run_python manifest loads
// and is one this runner serves.
func TestExampleManifest(t *testing.T) {
	ms, err := tool.LoadManifestFile("../../examples/carddispute/analysis/run_python.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	if m.Name != toolrun.RunPythonName || m.Tier != 3 || m.Connector != "python-analysis" || len(m.Network.Allow) != 0 || m.SideEffects != tool.SideEffectsNone {
		t.Fatalf("manifest %+v", m)
	}
	if err := toolrun.Check(m); err != nil {
		t.Fatal(err)
	}
	if err := m.ValidateArgs(json.RawMessage(`{"code":"print(1)","files":{"txns.csv":"a,b\n"},"outputs":["out.csv"]}`)); err != nil {
		t.Fatal(err)
	}
}

// TestThirtyThousandTransactions is the card-dispute analysis step: the
// model's code compares 30,000 card transactions in a gVisor sandbox and
// finds the duplicate charge.
func TestThirtyThousandTransactions(t *testing.T) {
	e3 := gvisorExecutor(t)
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{3: e3}, Warm: map[int]int{3: -1}})
	m.Start(context.Background())
	defer m.Stop()
	ms, err := tool.LoadManifestFile("../../examples/carddispute/analysis/run_python.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var csv strings.Builder
	csv.WriteString("id,date,merchant,amount_inr\n")
	for i := 0; i < 30000; i++ {
		fmt.Fprintf(&csv, "txn_%d,2026-%02d-%02d,merchant_%d,%d.%02d\n", 10000+i, 1+i%9, 1+i%28, i%997, 100+i%5000, i%100)
	}
	csv.WriteString("txn_1001,2026-10-03,Skyline Airways,12499.00\ntxn_1002,2026-10-03,Skyline Airways,12499.00\n")
	code := `
import csv, collections
rows = list(csv.DictReader(open("txns.csv")))
seen = collections.defaultdict(list)
for r in rows:
    seen[(r["date"], r["merchant"], r["amount_inr"])].append(r["id"])
dups = [ids for ids in seen.values() if len(ids) > 1 and any(i.startswith("txn_100") and len(i) == 8 for i in ids)]
with open("duplicates.txt", "w") as f:
    for ids in dups:
        f.write(",".join(ids) + "\n")
print(len(rows), "transactions;", len(dups), "duplicate group(s) with the disputed ids")
`
	raw, _ := json.Marshal(map[string]any{"code": code, "files": map[string]string{"txns.csv": csv.String()}, "outputs": []string{"duplicates.txt"}})
	res, info, err := toolrun.New(m, 3).Execute(context.Background(), ms[0], tool.Call{Tool: "run_python", Args: raw, RunID: "run_dispute", Tenant: "bank", User: "priya", IdempotencyKey: "run_dispute:4:0"})
	if err != nil {
		t.Fatal(err)
	}
	var pr toolrun.PythonResult
	json.Unmarshal(res.Output, &pr)
	if res.IsError || !strings.Contains(pr.Stdout, "30002 transactions") || !strings.Contains(pr.Files["duplicates.txt"], "txn_1001,txn_1002") {
		t.Fatalf("result %s", res.Output)
	}
	if info.BytesIn < int64(csv.Len()) || info.Executor != "gvisor" {
		t.Fatalf("boundary %+v", info)
	}
	t.Logf("30,002 transactions: provision %d ms, wall %d ms, exec (claimed) %d ms, peak %d MiB", info.ProvisionMS, info.WallMS, info.Claim.ExecMS, info.PeakMemoryBytes>>20)
}

// TestBrokerDispatch: the broker sends a tier-3 call to its runner and
// returns the boundary record with the result; a tier without a runner
// fails closed.
func TestBrokerDispatch(t *testing.T) {
	e2 := bwrapExecutor(t)
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e2}, DowngradeTier3: true, Warm: map[int]int{2: -1}})
	m.Start(context.Background())
	defer m.Stop()
	execs := map[int]broker.Executor{}
	for tier, r := range toolrun.Executors(m) {
		execs[tier] = r
	}
	b, err := broker.New(broker.Options{Catalog: tool.NewCatalog(), Executors: execs})
	if err != nil {
		t.Fatal(err)
	}
	mf := manifest(t, pythonManifest)
	ex, err := b.Execute(context.Background(), mf, call("run_broker", map[string]any{"code": "print('hi')"}))
	if err != nil {
		t.Fatal(err)
	}
	if ex.Status != trace.StatusOK || ex.Boundary == nil || !ex.Boundary.Downgraded || ex.Boundary.Outcome != "ok" || !strings.Contains(string(ex.Output), "hi") {
		t.Fatalf("execution %s %s %+v", ex.Status, ex.Output, ex.Boundary)
	}
	b2, _ := broker.New(broker.Options{Catalog: tool.NewCatalog()})
	ex, err = b2.Execute(context.Background(), mf, call("run_broker", map[string]any{"code": "print('hi')"}))
	if err != nil || ex.Status == trace.StatusOK || ex.Boundary != nil {
		t.Fatalf("without executors: %v %s %s", err, ex.Status, ex.Output)
	}
}

// envTool is a generic tier-2 tool's program: it reports the credential it
// was given, whether the call's request file (which holds the environment)
// mentions an earlier call's credential, and what an earlier call left in
// the workspace, then leaves its own credential there.
const envTool = `package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func main() {
	// Everywhere an earlier call's request could linger: the run
	// directory, and every process's environment and command line.
	var seen []byte
	paths, _ := filepath.Glob("/run/agentplane/*")
	for _, pat := range []string{"/proc/[0-9]*/environ", "/proc/[0-9]*/cmdline"} {
		m, _ := filepath.Glob(pat)
		paths = append(paths, m...)
	}
	for _, p := range paths {
		if strings.HasPrefix(p, "/proc/self/") || strings.HasPrefix(p, "/proc/"+strconv.Itoa(os.Getpid())+"/") {
			continue
		}
		data, _ := os.ReadFile(p)
		seen = append(seen, data...)
	}
	left, _ := os.ReadFile("/workspace/cred.txt")
	cred := os.Getenv("AGENTPLANE_CREDENTIAL")
	_ = os.WriteFile("/workspace/cred.txt", []byte(cred), 0o600)
	json.NewEncoder(os.Stdout).Encode(map[string]any{
		"cred": cred, "left": string(left), "request_has_first": strings.Contains(string(seen), "tok-FIRST"),
	})
}
`

// buildToolImage builds a directory image whose /tool/run is envTool.
func buildToolImage(t *testing.T) string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(envTool), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module envtool\n\ngo 1.22\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Sandbox uids must be able to traverse to the image: not t.TempDir(),
	// whose parent only root may enter.
	root, err := os.MkdirTemp("", "agentplane-image-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.MkdirAll(filepath.Join(root, "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(root, "tool", "run"), ".")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the tool: %v\n%s", err, out)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// TestCredentialReachesOnlyItsCall: a call's credential reaches the tool's
// program through its environment; the tool's next call, in the same
// sandbox, does not find it in its environment or request file; another
// tool, even of the same connector, runs in another sandbox and cannot read
// what the first left in its workspace.
func TestCredentialReachesOnlyItsCall(t *testing.T) {
	e2 := bwrapExecutor(t)
	m := sandbox.NewManager(sandbox.ManagerOptions{Executors: map[int]sandbox.Executor{2: e2}, Warm: map[int]int{2: -1}})
	m.Start(context.Background())
	defer m.Stop()
	img := buildToolImage(t)
	mf := func(name, connector string) *tool.Manifest {
		return manifest(t, fmt.Sprintf("name: %s\ndescription: d\nconnector: %s\ntier: 2\ntimeout_ms: 20000\nimage: %s\ninput_schema: {type: object}\nside_effects: none\n", name, connector, img))
	}
	crmA, crmB := mf("crm_lookup", "crm"), mf("crm_notes", "crm")
	r := toolrun.New(m, 2)
	type report struct {
		Cred            string `json:"cred"`
		Left            string `json:"left"`
		RequestHasFirst bool   `json:"request_has_first"`
	}
	do := func(mf *tool.Manifest, cred string) (report, *trace.SandboxInfo) {
		t.Helper()
		c := tool.Call{Tool: mf.Name, Args: json.RawMessage(`{}`), IdempotencyKey: "run_c:1:0", RunID: "run_c", Tenant: "acme", User: "u", Credential: cred}
		res, info, err := r.Execute(context.Background(), mf, c)
		if err != nil || res.IsError || info == nil {
			t.Fatalf("%s: %v %s %+v", mf.Name, err, res.Output, info)
		}
		var rep report
		if err := json.Unmarshal(res.Output, &rep); err != nil {
			t.Fatalf("%s: %v: %s", mf.Name, err, res.Output)
		}
		return rep, info
	}
	first, i1 := do(crmA, "tok-FIRST")
	if first.Cred != "tok-FIRST" {
		t.Fatalf("the tool did not get its credential: %+v", first)
	}
	again, i2 := do(crmA, "")
	if again.Cred != "" || again.RequestHasFirst {
		t.Fatalf("the tool's next call sees the first call's credential: %+v", again)
	}
	if i2.ID != i1.ID || again.Left != "tok-FIRST" {
		j, _ := json.Marshal(i1)
		t.Fatalf("one tool's calls in one run should share its session (ids %s %s, left %q); first call %s", i1.ID, i2.ID, again.Left, j)
	}
	other, i3 := do(crmB, "tok-NOTES")
	if i3.ID == i1.ID || other.Left != "" || other.Cred != "tok-NOTES" {
		t.Fatalf("another tool shares crm_lookup's sandbox (ids %s %s) or reads its workspace: %+v", i1.ID, i3.ID, other)
	}
}

// Bad workspace file names are the model's error to read, refused before any
// sandbox or handle is touched.
func TestRunPythonRefusesBadFileNames(t *testing.T) {
	m := sandbox.NewManager(sandbox.ManagerOptions{})
	r := toolrun.New(m, 3)
	mf := manifest(t, pythonManifest)
	for _, args := range []map[string]any{
		{"code": "1", "files": map[string]string{"../x": "a"}},
		{"code": "1", "files": map[string]string{"/etc/passwd": "a"}},
		{"code": "1", "files": map[string]string{"main.py": "import os"}},
		{"code": "1", "files": map[string]string{"a/./b": "a"}},
		{"code": "1", "files": map[string]string{"t.json": "a"}, "inputs": map[string]string{"t.json": "blob:" + strings.Repeat("a", 64)}},
		{"code": "1", "inputs": map[string]string{"x\n\x1b[31m": "blob:" + strings.Repeat("a", 64)}},
	} {
		res, info, err := r.Execute(context.Background(), mf, call("run_names", args))
		if err != nil || !res.IsError || info != nil || !strings.Contains(string(res.Output), "name") {
			t.Errorf("%v: %v %s %v, want a name error before any sandbox", args, err, res.Output, info)
		}
		if strings.Contains(string(res.Output), "\x1b") {
			t.Errorf("the error echoes an escape sequence: %q", res.Output)
		}
	}
}
