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
// SIGKILLed at random points (0.5 to 5 s into its life; seeded:
// AGENTPLANE_CRASH_SEED, logged) and restarted, until every run has
// completed or it was killed AGENTPLANE_CRASH_KILLS times (default 30),
// after which the last worker finishes the runs. Then checkDataDir: every run completed
// once, every chain verifies, a deterministic re-run reproduces every log,
// and the bank counts exactly one dispute, one refund and one e-mail per
// run. The test logs how many kills landed while the server held an
// activity started by the killed worker.
func TestCrashSIGKILLTemporal(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test builds the binary and runs a Temporal dev server; skipped with -short")
	}
	n := envCount(t, "AGENTPLANE_CRASH_RUNS", 50, 1)
	maxKills := envCount(t, "AGENTPLANE_CRASH_KILLS", 30, 0)
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
	c := &crashCLI{bin: buildBinary(t), data: filepath.Join(dir, "data")}
	c.env = append(os.Environ(), "AGENTPLANE_DATA="+c.data,
		"AGENTPLANE_ENGINE=temporal://"+srv.HostPort+"?namespace="+temporaltest.Namespace+"&task_queue=crash")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
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
	if err := fourAtOnce(n, func(i int) error {
		out, err := c.run(ctx, "run", crashAgent+"@prod", "--detach", "--models", models,
			"--user", crashUser, "--tenant", crashTenant, "--task", crashTask)
		ids[i] = strings.TrimSpace(out)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d runs started with no worker (dev server, build and starts took %v)", n, time.Since(began).Round(time.Millisecond))
	began = time.Now()

	// The approver decides whatever waits, whether a worker lives or not,
	// until every run has ended.
	done := make(chan struct{})
	var decided int
	var deciderErr error
	go func() {
		defer close(done)
		decided, deciderErr = c.decideUntilEnded(ctx, tc, ids)
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
		life := 500*time.Millisecond + time.Duration(rng.Int64N(int64(4500*time.Millisecond)))
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
	t.Logf("worker started %d times, SIGKILLed %d times, %d of the kills with an activity in flight; %d approvals decided; %d runs ended %v after the first worker started",
		starts, kills, inFlight, decided, n, time.Since(began).Round(time.Millisecond))
	if kills == 0 || inFlight == 0 {
		t.Errorf("%d kills, %d with an activity in flight: the test did not crash the worker mid-activity", kills, inFlight)
	}
	if decided != 2*n {
		t.Errorf("%d approvals decided, want 2 per run (%d)", decided, 2*n)
	}
	hc, err := closedOnce(ctx, tc, ids)
	if err != nil {
		t.Error(err)
	}
	t.Logf("on temporal: %d history events, %d activities, %d activity attempts retried, %d workflow tasks timed out (their worker was killed)",
		hc.events, hc.activities, hc.retried, hc.timedOut)
	began = time.Now()
	checkDataDir(t, c.data, n, "card-dispute", crashAgent+"@prod", crashApprover, bankWorld)
	t.Logf("checks took %v", time.Since(began).Round(time.Millisecond))
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
// does (several at once), until the workflows of all the runs ids have
// completed; it returns how many approvals it decided. A workflow that
// closes otherwise ends it with an error.
func (c *crashCLI) decideUntilEnded(ctx context.Context, tc client.Client, ids []string) (int, error) {
	seen, completed := map[string]bool{}, map[string]bool{}
	for {
		out, err := c.run(ctx, "approvals")
		if err != nil {
			return len(seen), err
		}
		var fresh []string
		for _, line := range tableRows(out) {
			if id := strings.Fields(line)[0]; !seen[id] {
				fresh = append(fresh, id)
			}
		}
		if err := fourAtOnce(len(fresh), func(i int) error {
			_, err := c.run(ctx, "approve", fresh[i], "--as", crashApprover, "--comment", "crash test")
			return err
		}); err != nil {
			return len(seen), err
		}
		for _, id := range fresh {
			seen[id] = true
		}
		open := 0
		for _, id := range ids {
			if completed[id] {
				continue
			}
			d, err := tc.DescribeWorkflow(ctx, id, "")
			if err != nil {
				return len(seen), fmt.Errorf("describe run %s: %w", id, err)
			}
			switch st := d.RawResponse.GetWorkflowExecutionInfo().GetStatus(); st {
			case enums.WORKFLOW_EXECUTION_STATUS_COMPLETED:
				completed[id] = true
			case enums.WORKFLOW_EXECUTION_STATUS_RUNNING:
				open++
			default:
				runs, _ := c.run(ctx, "runs")
				return len(seen), fmt.Errorf("the workflow of run %s closed %s:\n%s", id, st, runs)
			}
		}
		if open == 0 {
			return len(seen), nil
		}
		select {
		case <-ctx.Done():
			runs, _ := c.run(context.Background(), "runs")
			return len(seen), fmt.Errorf("%d of %d runs still open at the deadline: %w\n%s", open, len(ids), ctx.Err(), runs)
		case <-time.After(500 * time.Millisecond):
			// Each look starts a process: on a loaded machine, more often
			// takes CPU from the worker.
		}
	}
}

// fourAtOnce calls fn(0) to fn(n-1), four at a time, and returns the
// first error.
func fourAtOnce(n int, fn func(i int) error) error {
	sem := make(chan struct{}, 4)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs <- fn(i)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// historyCounts are counted over the histories of a test's runs.
type historyCounts struct {
	events, activities, retried, timedOut int
}

// closedOnce checks that the workflow of every run ids closed completed,
// in one execution, and counts in their histories the events, the
// activities, the activity attempts retried and the workflow tasks that
// timed out.
func closedOnce(ctx context.Context, tc client.Client, ids []string) (hc historyCounts, err error) {
	for _, id := range ids {
		it := tc.GetWorkflowHistory(ctx, id, "", false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		closed := 0
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				return hc, fmt.Errorf("history of run %s: %w", id, err)
			}
			hc.events++
			switch ev.GetEventType() {
			case enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
				hc.activities++
			case enums.EVENT_TYPE_ACTIVITY_TASK_STARTED:
				if ev.GetActivityTaskStartedEventAttributes().GetAttempt() > 1 {
					hc.retried++
				}
			case enums.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
				hc.timedOut++
			case enums.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
				closed++
			case enums.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, enums.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED,
				enums.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
				return hc, fmt.Errorf("run %s: its workflow closed %s", id, ev.GetEventType())
			}
		}
		if closed != 1 {
			return hc, fmt.Errorf("run %s: its workflow completed %d times", id, closed)
		}
	}
	return hc, nil
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
