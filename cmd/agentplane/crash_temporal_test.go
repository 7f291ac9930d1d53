package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
)

// The card-dispute demo run as scripts/crashtest.sh starts and decides it.
const (
	crashAgent    = "card-dispute-assistant"
	crashUser     = "priya@example-bank.in"
	crashTenant   = "example-bank"
	crashApprover = "meera@example-bank.in"
	crashTask     = "Ticket T-40127 (customer c_88213): two charges of 12,499 INR from an airline on 3 Oct look like duplicates. Investigate and resolve."
)

// TestCrashSIGKILLTemporal is TestCrashSIGKILL on the Temporal engine: a
// dev server started here, AGENTPLANE_CRASH_RUNS (default 50) card-dispute
// demo runs started with `agentplane run --detach` while no worker lives,
// their approvals decided with `agentplane approve` whenever they wait
// (the worker alive or dead), and the `agentplane worker` process
// SIGKILLed at random points (seeded: AGENTPLANE_CRASH_SEED, logged) and
// restarted, AGENTPLANE_CRASH_KILLS times (default 16), after which the
// last worker finishes the runs. Then checkDataDir: every run completed
// once, every chain verifies, a deterministic re-run reproduces every log,
// and the bank counts exactly one dispute, one refund and one e-mail per
// run. The test logs how many kills landed while the server held an
// activity started by the killed worker.
func TestCrashSIGKILLTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds the binary and runs a Temporal dev server; skipped with -short")
	}
	n := envCount(t, "AGENTPLANE_CRASH_RUNS", 50, 1)
	maxKills := envCount(t, "AGENTPLANE_CRASH_KILLS", 16, 0)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("AGENTPLANE_CRASH_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("AGENTPLANE_CRASH_SEED=%q: want an unsigned integer", s)
		}
		seed = v
	}
	t.Logf("seed %d (AGENTPLANE_CRASH_SEED=%d repeats the kill schedule)", seed, seed)
	began := time.Now()

	srv := temporaltest.Start(t, temporaltest.Options{})
	tc := srv.Client(t, client.Options{})
	dir := t.TempDir()
	c := &crashCLI{bin: buildBinary(t, dir), data: filepath.Join(dir, "data")}
	c.env = append(os.Environ(), "AGENTPLANE_DATA="+c.data,
		"AGENTPLANE_ENGINE=temporal://"+srv.HostPort+"?namespace="+temporaltest.Namespace+"&task_queue=crash")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if _, err := c.run(ctx, "demo", "--example", "card-dispute", "--setup-only", "--data", c.data); err != nil {
		t.Fatal(err)
	}
	models := filepath.Join(c.data, "demo", "models.yaml")
	workerLog, err := os.Create(filepath.Join(dir, "worker.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer workerLog.Close()
	workerTail := func() string { b, _ := os.ReadFile(workerLog.Name()); return tail(b, 4000) }

	// Every run is started while no worker lives.
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			out, err := c.run(ctx, "run", crashAgent+"@prod", "--detach", "--models", models,
				"--user", crashUser, "--tenant", crashTenant, "--task", crashTask)
			ids[i] = strings.TrimSpace(out)
			errs <- err
		})
		if i%4 == 3 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d runs started with no worker in %v", n, time.Since(began).Round(time.Millisecond))

	// The approver decides whatever waits, whether a worker lives or not,
	// until every run has ended.
	done := make(chan struct{})
	var decided int
	var deciderErr error
	go func() {
		defer close(done)
		decided, deciderErr = c.decideUntilEnded(ctx, n)
	}()

	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	var kills, inFlight, starts int
	for {
		w, err := c.startWorker(models, workerLog)
		if err != nil {
			t.Fatal(err)
		}
		starts++
		if kills == maxKills {
			// The last worker finishes the runs, then is stopped.
			select {
			case <-done:
			case <-ctx.Done():
			}
			if err := w.stop(); err != nil {
				t.Errorf("last worker: %v\n%s", err, workerTail())
			}
			break
		}
		life := 300*time.Millisecond + time.Duration(rng.Int64N(int64(2700*time.Millisecond)))
		select {
		case <-time.After(life):
		case <-done:
		case <-w.exited:
			t.Fatalf("worker (pid %d) exited on its own: %v\n%s", w.pid(), w.err, workerTail())
		}
		if err := w.kill(); err != nil {
			t.Fatal(err)
		}
		kills++
		if started, err := startedBy(ctx, tc, ids, w.pid()); err != nil {
			t.Fatal(err)
		} else if started > 0 {
			inFlight++
		}
		select {
		case <-done:
		default:
			continue
		}
		break
	}
	<-done
	if deciderErr != nil {
		t.Fatal(deciderErr)
	}
	elapsed := time.Since(began)
	t.Logf("worker started %d times, SIGKILLed %d times, %d of the kills with an activity in flight; %d approvals decided; %d runs ended in %v",
		starts, kills, inFlight, decided, n, elapsed.Round(time.Millisecond))
	if kills == 0 || inFlight == 0 {
		t.Errorf("%d kills, %d with an activity in flight: the test did not crash the worker mid-activity", kills, inFlight)
	}
	if decided != 2*n {
		t.Errorf("%d approvals decided, want 2 per run (%d)", decided, 2*n)
	}
	checkDataDir(t, c.data, n, "card-dispute", crashAgent+"@prod", crashApprover, bankWorld)
}

// crashCLI runs the built agentplane binary on one data directory and
// engine (both in env).
type crashCLI struct {
	bin, data string
	env       []string
}

// run runs one command to its end and returns its standard output.
func (c *crashCLI) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Env = c.env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("agentplane %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// decideUntilEnded approves every approval that waits, as crashtest.sh
// does, until all n runs have ended; it returns how many it decided.
func (c *crashCLI) decideUntilEnded(ctx context.Context, n int) (int, error) {
	seen := map[string]bool{}
	for {
		out, err := c.run(ctx, "approvals")
		if err != nil {
			return len(seen), err
		}
		for _, line := range tableRows(out) {
			id := strings.Fields(line)[0]
			if seen[id] {
				continue
			}
			if _, err := c.run(ctx, "approve", id, "--as", crashApprover, "--comment", "crash test"); err != nil {
				return len(seen), err
			}
			seen[id] = true
		}
		out, err = c.run(ctx, "runs")
		if err != nil {
			return len(seen), err
		}
		ended := 0
		for _, line := range tableRows(out) {
			switch f := strings.Fields(line); f[2] {
			case "completed":
				ended++
			case "queued", "running", "waiting":
			default:
				return len(seen), fmt.Errorf("run %s ended %s:\n%s", f[0], f[2], out)
			}
		}
		if ended == n {
			return len(seen), nil
		}
		select {
		case <-ctx.Done():
			return len(seen), fmt.Errorf("%d of %d runs ended before the deadline: %w\n%s", ended, n, ctx.Err(), out)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// tableRows are the non-empty rows of a table the CLI printed, without
// its header.
func tableRows(out string) []string {
	var rows []string
	for i, line := range strings.Split(out, "\n") {
		if i > 0 && strings.TrimSpace(line) != "" && !strings.HasPrefix(line, " ") {
			rows = append(rows, line)
		}
	}
	return rows
}

// crashWorker is one `agentplane worker` process.
type crashWorker struct {
	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// startWorker starts a worker whose output goes to log (shared by all
// the workers, one after the other).
func (c *crashCLI) startWorker(models string, log *os.File) (*crashWorker, error) {
	w := &crashWorker{exited: make(chan struct{})}
	w.cmd = exec.Command(c.bin, "worker", "--concurrency", "8", "--models", models)
	w.cmd.Env = c.env
	w.cmd.Stdout, w.cmd.Stderr = log, log
	// The worker dies with the test binary.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker: %w", err)
	}
	go func() {
		w.err = w.cmd.Wait()
		close(w.exited)
	}()
	return w, nil
}

func (w *crashWorker) pid() int { return w.cmd.Process.Pid }

// kill SIGKILLs the worker (by the PID this test started) and waits for it.
func (w *crashWorker) kill() error {
	if err := w.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill worker %d: %w", w.pid(), err)
	}
	select {
	case <-w.exited:
		return nil
	case <-time.After(30 * time.Second):
		return fmt.Errorf("worker %d still running 30 s after SIGKILL", w.pid())
	}
}

// stop ends the worker with SIGTERM (it stops its Temporal worker and
// exits 0), killing it when it has not exited within a bound.
func (w *crashWorker) stop() error {
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("stop worker %d: %w", w.pid(), err)
	}
	select {
	case <-w.exited:
		return w.err
	case <-time.After(30 * time.Second):
		_ = w.kill()
		return fmt.Errorf("worker %d ignored SIGTERM for 30 s", w.pid())
	}
}

// startedBy counts the activities of the runs ids that the server holds
// as started by the worker process pid (the SDK's identity is PID@HOST@...):
// after that worker was killed, the attempts it was running.
func startedBy(ctx context.Context, tc client.Client, ids []string, pid int) (int, error) {
	prefix := strconv.Itoa(pid) + "@"
	n := 0
	for _, id := range ids {
		d, err := tc.DescribeWorkflow(ctx, id, "")
		if err != nil {
			return 0, fmt.Errorf("describe run %s: %w", id, err)
		}
		for _, a := range d.RawResponse.GetPendingActivities() {
			if a.GetState() == enums.PENDING_ACTIVITY_STATE_STARTED && strings.HasPrefix(a.GetLastWorkerIdentity(), prefix) {
				n++
			}
		}
	}
	return n, nil
}
