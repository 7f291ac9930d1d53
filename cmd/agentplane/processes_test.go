package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/catalog"
	"github.com/agentplane/agentplane/internal/cli"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/store/postgres/pgtest"
	"github.com/agentplane/agentplane/store/s3blob/s3test"
)

var processRunsFlag = flag.Int("processes.runs", 0,
	"card-dispute runs of the many-process tests (default: env AGENTPLANE_PROCESS_RUNS, else each test's own count)")

// processRuns is how many runs a many-process test sends: the flag, else
// AGENTPLANE_PROCESS_RUNS, else def.
func processRuns(t *testing.T, def int) int {
	t.Helper()
	if *processRunsFlag > 0 {
		return *processRunsFlag
	}
	return envCount(t, "AGENTPLANE_PROCESS_RUNS", def, 1)
}

// envCount is the number from lo to 100000 in the environment variable
// name, else def.
func envCount(t *testing.T, name string, def, lo int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > 100_000 {
		t.Fatalf("%s=%q: want a number from %d to 100000", name, v, lo)
	}
	return n
}

// TestThreeProcessesPostgres runs three `agentplane serve` processes on one
// PostgreSQL database, with blobs in one S3-compatible server (versitygw on
// loopback), and drives card-dispute runs through them round-robin while
// one process at a time is SIGKILLed at random moments and restarted
// (exerciseCluster says what is checked). 300 runs by default (the issue's
// count); -processes.runs or AGENTPLANE_PROCESS_RUNS changes it.
func TestThreeProcessesPostgres(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs three servers; skipped with -short")
	}
	dsn := pgtest.DSN(t)
	s3 := s3test.Start(t)
	for _, kv := range s3.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // the checks below open the same bucket in this process
	}
	exerciseCluster(t, clusterOptions{nodes: 3, store: dsn, blobs: s3.URL("threeproc"), env: s3.Env(), runs: processRuns(t, 300)})
}

// TestTwoProcessesSQLite is the same with two `agentplane serve` processes
// on one SQLite data directory (its store file and its blob folder): the
// embedded store takes its claims, idempotency keys and approval decisions
// in the database file, so two processes on it behave as one.
func TestTwoProcessesSQLite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs two servers; skipped with -short")
	}
	exerciseCluster(t, clusterOptions{nodes: 2, runs: processRuns(t, 100)})
}

// BenchmarkProcesses measures card-dispute runs per second through 1 and
// through 3 serve processes on one PostgreSQL database (a fresh one each),
// on one machine: AGENTPLANE_BENCH_RUNS runs (default 150) started
// round-robin, each of their two approvals decided by a client polling
// every 50 ms, timed from the first start to the last run's end; and the
// CPU time the serve processes used per run. No process is killed. scripts/bench-processes.sh prints the table and the
// ratio.
func BenchmarkProcesses(b *testing.B) {
	n := 150
	if v := os.Getenv("AGENTPLANE_BENCH_RUNS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 1 || n > 100_000 {
			b.Fatalf("AGENTPLANE_BENCH_RUNS=%q: want a number of runs from 1 to 100000", v)
		}
	}
	bin := buildBinary(b)
	for _, procs := range []int{1, 3} {
		b.Run(fmt.Sprintf("procs=%d", procs), func(b *testing.B) {
			var total, cpu time.Duration
			for range b.N {
				b.StopTimer()
				cl := setupCluster(b, bin, clusterOptions{nodes: procs, store: pgtest.DSN(b)})
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
				d := newDriver(ctx, cl.c, cl.keys, true)
				b.StartTimer()
				began := time.Now()
				startsDone := make(chan struct{})
				go func() {
					defer close(startsDone)
					d.startAll(n)
				}()
				statuses := d.decideUntilEnded(n, startsDone)
				<-startsDone
				total += time.Since(began)
				b.StopTimer()
				cancel()
				cl.c.stopAll()
				for _, nd := range cl.c.nodes {
					cpu += time.Duration(nd.cpu.Load()) // setup included: one start per process
				}
				if len(d.errs) > 0 || statuses[store.StatusCompleted] != n {
					b.Fatalf("runs by status %v, want %d completed; %v", statuses, n, d.errs)
				}
			}
			b.ReportMetric(float64(n*b.N)/total.Seconds(), "runs/s")
			// What the serve processes themselves spent (PostgreSQL's own
			// CPU is not in it): unlike runs/s, little moved by the other
			// work on a shared machine.
			b.ReportMetric(float64(cpu.Milliseconds())/float64(n*b.N), "serve-cpu-ms/run")
			b.ReportMetric(0, "ns/op")
		})
	}
}

type clusterOptions struct {
	nodes        int
	store, blobs string   // --store and --blobs ("" the data directory's)
	env          []string // added to every process's environment
	runs         int
}

// exerciseCluster starts o.nodes serve processes on one store and one data
// directory (the demo's files, secrets and simulated bank, a SQLite file
// they all share), then:
//
//   - starts o.runs card-dispute runs, each sent twice at once, to two
//     different processes, with one Idempotency-Key (and retried on another
//     process when one dies under it);
//   - decides every approval (the refund, then the e-mail of a tainted run)
//     through processes other than the one the run was started on, the
//     same decision sent twice at once;
//   - follows every tenth run's event stream from a process other than its
//     starter, resuming with Last-Event-ID on the next process whenever the
//     stream breaks;
//   - SIGKILLs a random process every 0.3 to 1.5 s and restarts it, until
//     every run has ended.
//
// Then it checks: every answer to an Idempotency-Key named the same run,
// also asked once more at the end; no approval was accepted twice; every
// stream delivered each event of its run's log exactly once, in order,
// byte-identical (its hash) to the stored one, and at least one of them
// resumed on another process after its own was killed; and, in a
// platform opened on the same store, checkRecorded: every run completed
// once, every chain verifies, re-running each log reproduces it, and the
// bank holds exactly one dispute, one refund and one e-mail per run.
func exerciseCluster(t *testing.T, o clusterOptions) {
	bin := buildBinary(t)
	cl := setupCluster(t, bin, o)
	c, data, models := cl.c, cl.data, cl.models

	// Everything below is bounded by one deadline.
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	d := newDriver(ctx, c, cl.keys, false)
	began := time.Now()

	killerDone := make(chan struct{})
	stopKiller := make(chan struct{})
	go func() {
		defer close(killerDone)
		c.killer(ctx, stopKiller)
	}()

	startsDone := make(chan struct{})
	go func() {
		defer close(startsDone)
		d.startAll(o.runs)
	}()
	statuses := d.decideUntilEnded(o.runs, startsDone)
	<-startsDone
	close(stopKiller)
	<-killerDone
	elapsed := time.Since(began)
	d.followers.Wait()

	// Restart whatever the killer left down, then ask every key once more.
	for _, n := range c.nodes {
		if !n.up() {
			if err := c.start(n); err != nil {
				t.Fatal(err)
			}
		}
	}
	d.askKeysAgain()
	c.stopAll()

	kills := 0
	for _, n := range c.nodes {
		kills += n.kills
	}
	t.Logf("%d processes, %d runs ended in %s (%.1f runs/s) with %d SIGKILLs (%v); start answers %d, retried %d; decisions accepted %d, refused as already decided %d",
		o.nodes, o.runs, elapsed.Round(time.Millisecond), float64(o.runs)/elapsed.Seconds(), kills, c.killsPerNode(),
		d.startAnswers.Load(), d.startRetries.Load(), d.accepted.Load(), d.conflicts.Load())
	d.mu.Lock()
	for _, e := range d.errs {
		t.Error(e)
	}
	d.mu.Unlock()
	if t.Failed() {
		return
	}
	if statuses[store.StatusCompleted] != o.runs {
		t.Fatalf("runs by status %v, want all %d completed", statuses, o.runs)
	}
	if kills == 0 {
		t.Fatal("no process was killed: the test proved nothing about crashes")
	}

	world := bankWorld.open(t, data)
	p, err := platform.Open(context.Background(), platform.Options{Tools: []catalog.Registrar{world}, DataDir: data,
		Store: o.store, Blobs: o.blobs, ModelsFile: models})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recorded, err := p.Store.ListRuns(context.Background(), store.RunFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(recorded) != o.runs || len(d.runs) != o.runs {
		t.Fatalf("the store holds %d runs and the keys named %d, want %d", len(recorded), len(d.runs), o.runs)
	}
	for _, r := range recorded {
		if d.runs[r.ID] == nil {
			t.Errorf("run %s in the store was named by no Idempotency-Key", r.ID)
		}
	}
	d.checkStreams(p.Store)
	// The command-line check, on a few runs: trace verify through the same
	// store and blobs.
	for _, r := range recorded[:min(3, len(recorded))] {
		if out := cl.cli("trace", "verify", r.ID, "--data", data); !strings.HasPrefix(out, "ok:") {
			t.Errorf("trace verify %s: %s", r.ID, out)
		}
	}
	checkRecorded(t, p, world, bankWorld, "card-dispute", recorded, "card-dispute-assistant@prod", cli.DemoSupervisor)
}

// setup is a cluster ready to drive: its processes started on one
// store and one data directory.
type setup struct {
	c            *cluster
	data, models string
	keys         map[string]string // user -> API key
	cli          func(args ...string) string
}

// setupCluster prepares a data directory (the demo's files, secrets and
// simulated bank, a SQLite file every process shares) on o's store and
// blobs, an API key for the demo's user and its supervisor, and starts
// o.nodes serve processes on it, stopped when tb ends.
func setupCluster(tb testing.TB, bin string, o clusterOptions) *setup {
	tb.Helper()
	dir := tb.TempDir()
	data := filepath.Join(dir, "data")
	var storeArgs []string
	if o.store != "" {
		storeArgs = append(storeArgs, "--store", o.store)
	}
	if o.blobs != "" {
		storeArgs = append(storeArgs, "--blobs", o.blobs)
	}
	env := append(os.Environ(), o.env...)
	cliRun := func(args ...string) string {
		tb.Helper()
		cmd := exec.Command(bin, append(args, storeArgs...)...)
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			tb.Fatalf("agentplane %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return strings.TrimSpace(string(out))
	}
	cliRun("demo", "--setup-only", "--data", data)
	keys := map[string]string{
		cli.DemoUser:       cliRun("apikey", "create", "--tenant", cli.DemoTenant, "--user", cli.DemoUser, "--data", data),
		cli.DemoSupervisor: cliRun("apikey", "create", "--tenant", cli.DemoTenant, "--user", cli.DemoSupervisor, "--scopes", "runs:read,approvals:decide", "--data", data),
	}
	models := filepath.Join(data, "demo", "models.yaml")
	c := &cluster{t: tb, bin: bin, env: env, logDir: dir,
		args: append([]string{"--data", data, "--models", models, "--lease-ttl", "2s"}, storeArgs...)}
	for i := range o.nodes {
		c.nodes = append(c.nodes, &node{i: i, addr: freeAddr(tb)})
	}
	tb.Cleanup(c.stopAll)
	for _, n := range c.nodes {
		if err := c.start(n); err != nil {
			tb.Fatal(err)
		}
	}
	return &setup{c: c, data: data, models: models, keys: keys, cli: cliRun}
}

// freeAddr returns a loopback address with a port free at the time of the
// call; a process restarted after a kill listens on it again.
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// cluster is the serve processes of one test.
type cluster struct {
	t      testing.TB
	bin    string
	args   []string // serve's flags after --addr
	env    []string
	logDir string
	nodes  []*node
}

// node is one serve process slot: the process, restarted on the same
// address after each kill.
type node struct {
	i      int
	addr   string
	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
	gen    atomic.Int64 // grows at each kill: a stream opened before it was cut by the kill
	kills  int
	cpu    atomic.Int64 // user+system CPU of the node's ended processes, in ns
}

func (n *node) up() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return false
	}
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

func (c *cluster) url(i int) string { return "http://" + c.nodes[i%len(c.nodes)].addr }

// start starts a node's process and waits until it answers.
func (c *cluster) start(n *node) error {
	logf, err := os.OpenFile(filepath.Join(c.logDir, fmt.Sprintf("serve-%d.log", n.i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(c.bin, append([]string{"serve", "--addr", n.addr}, c.args...)...)
	cmd.Env = c.env
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start serve %d: %w", n.i, err)
	}
	exited := make(chan struct{})
	go func() {
		cmd.Wait()
		n.cpu.Add(int64(cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()))
		logf.Close()
		close(exited)
	}()
	n.mu.Lock()
	n.cmd, n.exited = cmd, exited
	n.mu.Unlock()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get("http://" + n.addr + "/v1/openapi.json")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("serve %d exited at start:\n%s", n.i, tail(log, 2000))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("serve %d not answering on %s after a minute", n.i, n.addr)
		}
	}
}

// kill SIGKILLs a node's process and waits for it to be gone.
func (c *cluster) kill(n *node) error {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.mu.Unlock()
	n.gen.Add(1)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill serve %d: %w", n.i, err)
	}
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		return fmt.Errorf("serve %d (pid %d) still there 10 s after SIGKILL", n.i, cmd.Process.Pid)
	}
	n.kills++
	return nil
}

// killer SIGKILLs a random process every 0.3 to 1.5 s and restarts it 0
// to 0.5 s later, until stop is closed. One process at most is down at a
// time.
func (c *cluster) killer(ctx context.Context, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-time.After(300*time.Millisecond + rand.N(1200*time.Millisecond)):
		}
		n := c.nodes[rand.N(len(c.nodes))]
		if err := c.kill(n); err != nil {
			c.t.Error(err)
			return
		}
		time.Sleep(rand.N(500 * time.Millisecond))
		if err := c.start(n); err != nil {
			c.t.Error(err)
			return
		}
	}
}

func (c *cluster) killsPerNode() []int {
	var k []int
	for _, n := range c.nodes {
		k = append(k, n.kills)
	}
	return k
}

// stopAll ends every process still running: SIGTERM, then SIGKILL after
// 10 s.
func (c *cluster) stopAll() {
	for _, n := range c.nodes {
		n.mu.Lock()
		cmd, exited := n.cmd, n.exited
		n.mu.Unlock()
		if cmd == nil {
			continue
		}
		select {
		case <-exited:
			continue
		default:
		}
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
	}
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// driver is the clients of one test: run starts, decisions and streams,
// spread over the processes. A bench driver sends each start and each
// decision once, follows no stream and polls approvals more often.
type driver struct {
	c     *cluster
	bench bool
	keys  map[string]string // user -> API key
	ctx   context.Context
	http  *http.Client

	mu      sync.Mutex
	runs    map[string]*runState      // run id -> what the clients know
	order   []string                  // run ids in the order of their keys
	decided map[string]*decisionCount // approval id -> answers
	errs    []string

	followers                            sync.WaitGroup
	startAnswers, startRetries           atomic.Int64
	accepted, conflicts                  atomic.Int64
	streams                              []*stream
	streamsResumed, streamsResumedOnKill atomic.Int64
}

func newDriver(ctx context.Context, c *cluster, keys map[string]string, bench bool) *driver {
	// The processes cap connections per client address (128 by default):
	// stay under it.
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxConnsPerHost, tr.MaxIdleConnsPerHost = 48, 48
	return &driver{c: c, keys: keys, ctx: ctx, bench: bench, runs: map[string]*runState{}, decided: map[string]*decisionCount{},
		http: &http.Client{Timeout: 20 * time.Second, Transport: tr}}
}

type runState struct {
	key     string
	primary int // the process the run's first start request went to
}

type decisionCount struct {
	accepted, inFlight int
}

func (d *driver) fail(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) < 50 {
		d.errs = append(d.errs, fmt.Sprintf(format, args...))
	}
}

// do sends one request to process i as user and returns the answer.
func (d *driver) do(ctx context.Context, i int, user, method, path, body string, hdr ...string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, d.c.url(i)+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+d.keys[user])
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for j := 0; j+1 < len(hdr); j += 2 {
		req.Header.Set(hdr[j], hdr[j+1])
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, b, err
}

// retryable is an answer a client retries on another process: the
// process died under the request, or it is unavailable or busy.
func retryable(status int, err error) bool {
	return err != nil || status >= 500 || status == http.StatusTooManyRequests
}

var runBody = fmt.Sprintf(`{"agent":"card-dispute-assistant","version":"prod","input":%q,"context":{"customer_id":"c_88213"},"mode":"async"}`, cli.DemoTask)

// startOn sends a run start with key to process i, moving to the next
// process while the answer is retryable, and returns the run it names.
func (d *driver) startOn(key string, i int) string {
	for {
		if d.ctx.Err() != nil {
			d.fail("key %s: no answer before the deadline", key)
			return ""
		}
		status, body, err := d.do(d.ctx, i, cli.DemoUser, "POST", "/v1/runs", runBody, "Idempotency-Key", key)
		if retryable(status, err) {
			d.startRetries.Add(1)
			i++
			time.Sleep(50 * time.Millisecond)
			continue
		}
		d.startAnswers.Add(1)
		var run api.Run
		if (status != http.StatusAccepted && status != http.StatusOK && status != http.StatusCreated) || json.Unmarshal(body, &run) != nil || run.ID == "" {
			d.fail("key %s on process %d: %d %s, want the run", key, i%len(d.c.nodes), status, body)
			return ""
		}
		return run.ID
	}
}

// startAll starts n runs, 12 keys at a time, each key sent to two
// processes at once; the answers must name one run.
func (d *driver) startAll(n int) {
	k := len(d.c.nodes)
	sem := make(chan struct{}, 12)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			key := fmt.Sprintf("threeproc-%d", i)
			primary := i % k
			ids := make([]string, 2)
			sends := 2
			if d.bench {
				sends = 1
			}
			var pair sync.WaitGroup
			for j := range sends {
				pair.Go(func() { ids[j] = d.startOn(key, primary+j) })
			}
			pair.Wait()
			if d.bench {
				ids[1] = ids[0]
			}
			if ids[0] == "" || ids[1] == "" {
				return
			}
			if ids[0] != ids[1] {
				d.fail("key %s named two runs: %s and %s", key, ids[0], ids[1])
				return
			}
			d.mu.Lock()
			_, seen := d.runs[ids[0]]
			if !seen {
				d.runs[ids[0]] = &runState{key: key, primary: primary}
				d.order = append(d.order, ids[0])
			}
			d.mu.Unlock()
			if seen {
				d.fail("run %s named by two keys", ids[0])
				return
			}
			if i%10 == 0 && !d.bench {
				d.follow(ids[0], primary+1)
			}
		})
	}
	wg.Wait()
}

// decideUntilEnded polls the pending approvals through the processes in
// turn and decides each through the processes that did not start its run,
// until n runs have ended; it returns the runs by status.
func (d *driver) decideUntilEnded(n int, startsDone <-chan struct{}) map[string]int {
	k := len(d.c.nodes)
	var decisions sync.WaitGroup
	defer decisions.Wait()
	pollEvery, perDecision := 200*time.Millisecond, 2
	if d.bench {
		pollEvery, perDecision = 50*time.Millisecond, 1
	}
	for poll := 0; ; poll++ {
		select {
		case <-d.ctx.Done():
			statuses, _ := d.statuses(poll)
			d.fail("deadline: runs by status %v, want %d ended", statuses, n)
			return statuses
		case <-time.After(pollEvery):
		}
		started := false
		select {
		case <-startsDone:
			started = true
		default:
		}
		if started {
			if statuses, err := d.statuses(poll); err == nil {
				ended := 0
				for s, c := range statuses {
					if store.Terminal(s) {
						ended += c
					}
				}
				if ended == n {
					return statuses
				}
			}
		}
		status, body, err := d.do(d.ctx, poll, cli.DemoSupervisor, "GET", "/v1/approvals", "")
		var list api.ApprovalList
		if err != nil || status != http.StatusOK || json.Unmarshal(body, &list) != nil {
			continue
		}
		for _, a := range list.Approvals {
			d.mu.Lock()
			rs := d.runs[a.RunID]
			dc := d.decided[a.ID]
			if dc == nil {
				dc = &decisionCount{}
				d.decided[a.ID] = dc
			}
			busy := dc.inFlight > 0
			if rs != nil && !busy {
				dc.inFlight = perDecision
			}
			d.mu.Unlock()
			if rs == nil || busy {
				continue // its start has not been answered yet, or a decision is under way
			}
			// The processes that did not take the run's first start; with
			// two processes, the one other process twice.
			var deciders []int
			for j := 1; j < k && len(deciders) < 2; j++ {
				deciders = append(deciders, rs.primary+j)
			}
			switch len(deciders) {
			case 0: // one process: it decides too
				deciders = []int{rs.primary, rs.primary}
			case 1:
				deciders = append(deciders, deciders[0])
			}
			deciders = deciders[:perDecision]
			for _, via := range deciders {
				decisions.Go(func() { d.decide(a.ID, via) })
			}
		}
	}
}

// decide approves one approval through process i (once: a lost answer
// is left to the next poll, which lists the approval again if the
// decision did not take).
func (d *driver) decide(id string, i int) {
	body := `{"decision":"approve","comment":"many-process test"}`
	status, resp, err := d.do(d.ctx, i, cli.DemoSupervisor, "POST", "/v1/approvals/"+id+":decide", body)
	d.mu.Lock()
	defer d.mu.Unlock()
	dc := d.decided[id]
	dc.inFlight--
	switch {
	case retryable(status, err):
	case status == http.StatusAccepted || status == http.StatusOK:
		d.accepted.Add(1)
		dc.accepted++
		if dc.accepted > 1 {
			d.errs = append(d.errs, fmt.Sprintf("approval %s accepted %d times (the last through process %d)", id, dc.accepted, i%len(d.c.nodes)))
		}
	case status == http.StatusConflict:
		d.conflicts.Add(1)
	default:
		d.errs = append(d.errs, fmt.Sprintf("decide %s through process %d: %d %s", id, i%len(d.c.nodes), status, resp))
	}
}

// statuses counts every run by status, through process i (paging).
func (d *driver) statuses(i int) (map[string]int, error) {
	out := map[string]int{}
	for offset := 0; ; {
		status, body, err := d.do(d.ctx, i, cli.DemoUser, "GET", fmt.Sprintf("/v1/runs?limit=1000&offset=%d", offset), "")
		var list api.RunList
		if err != nil || status != http.StatusOK || json.Unmarshal(body, &list) != nil {
			return out, fmt.Errorf("list runs through process %d: %d %v", i%len(d.c.nodes), status, err)
		}
		for _, r := range list.Runs {
			out[r.Status]++
		}
		if len(list.Runs) < 1000 {
			return out, nil
		}
		offset += len(list.Runs)
	}
}

// askKeysAgain sends every key once more, to a process that had not seen
// it: the answer must name the same run.
func (d *driver) askKeysAgain() {
	d.mu.Lock()
	ids := slices.Clone(d.order)
	d.mu.Unlock()
	for _, id := range ids {
		d.mu.Lock()
		rs := d.runs[id]
		d.mu.Unlock()
		if got := d.startOn(rs.key, rs.primary+2); got != id {
			d.fail("key %s asked again: run %q, first answered %s", rs.key, got, id)
		}
	}
}

// stream is what one SSE client received of a run: each event's id and
// the hash of the log event it carried.
type stream struct {
	run     string
	ids     []int64
	hashes  []string
	resumes int
	err     string
}

// follow reads a run's event stream from process i in the background,
// resuming on the next process with Last-Event-ID when it breaks.
func (d *driver) follow(run string, i int) {
	s := &stream{run: run}
	d.mu.Lock()
	d.streams = append(d.streams, s)
	d.mu.Unlock()
	d.followers.Go(func() {
		for {
			if d.ctx.Err() != nil {
				s.err = "deadline before the stream ended"
				return
			}
			n := d.c.nodes[i%len(d.c.nodes)]
			gen := n.gen.Load()
			ended, err := d.streamOnce(s, i)
			if err != nil {
				s.err = err.Error()
				return
			}
			if ended {
				return
			}
			s.resumes++
			d.streamsResumed.Add(1)
			if n.gen.Load() != gen {
				d.streamsResumedOnKill.Add(1)
			}
			i++
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// streamOnce reads the stream from process i after the last event s
// holds; it reports whether the stream ended (the run's end was told). A
// broken connection or an unavailable process is not an error: the
// caller resumes elsewhere. An event out of order is.
func (d *driver) streamOnce(s *stream, i int) (bool, error) {
	req, err := http.NewRequestWithContext(d.ctx, "GET", d.c.url(i)+"/v1/runs/"+s.run+"/events?include=log", nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Authorization", "Bearer "+d.keys[cli.DemoUser])
	req.Header.Set("Accept", "text/event-stream")
	if len(s.ids) > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(s.ids[len(s.ids)-1], 10))
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, nil
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNoContent:
		return true, nil // every event was already received
	case http.StatusOK:
	default:
		return false, nil
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 8<<20)
	var event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "":
			ev, d0 := event, data
			event, data = "", ""
			if ev == api.StreamEnd {
				return true, nil
			}
			if d0 == "" {
				continue
			}
			var se api.StreamEvent
			if err := json.Unmarshal([]byte(d0), &se); err != nil {
				return false, fmt.Errorf("run %s: undecodable %s event: %v", s.run, ev, err)
			}
			if se.Log == nil {
				continue // run.waiting and message.delta carry no log event
			}
			want := int64(len(s.ids) + 1)
			if se.ID != want || se.Log.Seq != se.ID {
				return false, fmt.Errorf("run %s: event %d (log %d) after %d events", s.run, se.ID, se.Log.Seq, len(s.ids))
			}
			s.ids = append(s.ids, se.ID)
			s.hashes = append(s.hashes, se.Log.Hash)
		}
	}
	return false, nil
}

// checkStreams compares what each SSE client received with its run's
// stored log.
func (d *driver) checkStreams(st store.Store) {
	t := d.c.t
	t.Helper()
	t.Logf("%d streams followed, resumed %d times (%d after their process was killed)",
		len(d.streams), d.streamsResumed.Load(), d.streamsResumedOnKill.Load())
	for _, s := range d.streams {
		if s.err != "" {
			t.Errorf("stream of %s: %s", s.run, s.err)
			continue
		}
		evs, err := st.Events(context.Background(), s.run, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != len(s.ids) {
			t.Errorf("stream of %s: %d events received (resumed %d times), the log has %d", s.run, len(s.ids), s.resumes, len(evs))
			continue
		}
		for j, ev := range evs {
			if h := fmt.Sprintf("%x", ev.Hash[:]); h != s.hashes[j] {
				t.Errorf("stream of %s: event %d hash %s, the log's %s", s.run, ev.Seq, s.hashes[j], h)
				break
			}
		}
	}
	if d.streamsResumedOnKill.Load() == 0 {
		t.Error("no stream was cut by a kill and resumed on another process: the resume was not exercised")
	}
}
