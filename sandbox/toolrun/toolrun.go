// Package toolrun connects the tool broker to the sandboxes: it turns a
// call of a tier-2 or tier-3 tool into a command in the run's sandbox (via
// sandbox.Manager) and the command's outcome into the tool's result and the
// boundary record that goes on the tool_result event.
//
// Two kinds of tool run here:
//
//   - run_python (tier 3, side_effects none, no egress): the model's code
//     runs as main.py with input files in the workspace; declared output
//     files come back with stdout and stderr, sanitised.
//   - any other tier-2/3 tool: its image's /tool/run program gets the call's
//     arguments as JSON on stdin and answers with JSON on stdout.
package toolrun

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/agentplane/agentplane/sandbox"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

// Runner executes sandboxed tools of one tier. It satisfies the broker's
// Executor interface.
type Runner struct {
	m    *sandbox.Manager
	tier int
}

// New returns the runner of tier over m.
func New(m *sandbox.Manager, tier int) *Runner { return &Runner{m: m, tier: tier} }

// Executors returns one runner per tier that m can serve (including a
// tier 3 served by tier 2 when the operator allowed the downgrade), keyed
// as broker.Options.Executors wants. Tiers left out fail closed.
func Executors(m *sandbox.Manager) map[int]*Runner {
	out := map[int]*Runner{}
	for _, tier := range []int{2, 3} {
		if _, _, err := m.Executor(tier); err == nil {
			out[tier] = New(m, tier)
		}
	}
	return out
}

// RunPythonName is the built-in code-execution tool.
const RunPythonName = "run_python"

// ToolEntrypoint is the program a generic tier-2/3 tool's image provides.
// It reads the call's arguments (JSON) on stdin and writes its result on
// stdout.
const ToolEntrypoint = "/tool/run"

// CredentialEnv is the environment variable that carries a call's
// short-lived credential to a generic tool's program.
const CredentialEnv = "AGENTPLANE_CREDENTIAL"

// Limits of run_python's arguments and results.
const (
	maxCode        = 256 << 10
	maxInputFiles  = 32
	maxOutputFiles = 16
	maxOutputFile  = 4 << 20
	// maxInputs caps what handles bring into the workspace, all together.
	maxInputs = 32 << 20
)

// PythonArgs are run_python's arguments.
type PythonArgs struct {
	Code string `json:"code"`
	// Files are written into the workspace before the code runs.
	Files map[string]string `json:"files,omitempty"`
	// Inputs are written into the workspace from blob handles the run has
	// seen (name -> "blob:<sha256>"): how data too large for the model's
	// context reaches the code.
	Inputs map[string]string `json:"inputs,omitempty"`
	// Outputs are workspace files to return after it ran.
	Outputs []string `json:"outputs,omitempty"`
}

// PythonResult is what the model sees of a run_python call.
type PythonResult struct {
	Outcome         string            `json:"outcome"`
	ExitCode        int               `json:"exit_code"`
	Stdout          string            `json:"stdout"`
	Stderr          string            `json:"stderr,omitempty"`
	StdoutTruncated bool              `json:"stdout_truncated,omitempty"`
	StderrTruncated bool              `json:"stderr_truncated,omitempty"`
	Files           map[string]string `json:"files,omitempty"`
	Missing         []string          `json:"missing_outputs,omitempty"`
	// Note tells the model when the sandbox did not survive the call.
	Note string `json:"note,omitempty"`
}

// resetNote is what the model reads when a call's sandbox was destroyed
// (the command did not end cleanly): its workspace is gone.
const resetNote = "the sandbox was destroyed after this call because it did not end cleanly; the next call starts in a fresh, empty workspace"

// Execute runs the call in the run's sandbox.
func (r *Runner) Execute(ctx context.Context, m *tool.Manifest, call tool.Call) (tool.Result, *trace.SandboxInfo, error) {
	req := sandbox.Request{
		Tier: r.tier, Tenant: call.Tenant, RunID: call.RunID, Tool: m.Name,
		Spec:  sandbox.Spec{Image: m.Image, MemoryMB: m.MemoryMB},
		Allow: m.Network.Allow,
		Exec: sandbox.Exec{
			Timeout:     m.Timeout(),
			CPUTime:     time.Duration(m.CPUMS) * time.Millisecond,
			TailBytes:   max(m.MaxOutput(), 4096),
			Traceparent: Traceparent(call.RunID, call.IdempotencyKey),
		},
	}
	var pyArgs PythonArgs
	if m.Name == RunPythonName {
		if err := json.Unmarshal(call.Args, &pyArgs); err != nil {
			return tool.ErrorResult("run_python: bad arguments: %v", err), nil, nil
		}
		if len(pyArgs.Code) > maxCode || len(pyArgs.Files)+len(pyArgs.Inputs) > maxInputFiles || len(pyArgs.Outputs) > maxOutputFiles {
			return tool.ErrorResult("run_python: code, files or outputs over the limit"), nil, nil
		}
		if msg := checkNames(pyArgs); msg != "" {
			return tool.ErrorResult("run_python: %s", msg), nil, nil
		}
		req.Exec.Argv = []string{"python3", "-E", "-s", "main.py"}
		req.Exec.Files = append(req.Exec.Files, sandbox.File{Path: "main.py", Data: []byte(pyArgs.Code)})
		names := make([]string, 0, len(pyArgs.Files))
		for n := range pyArgs.Files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			req.Exec.Files = append(req.Exec.Files, sandbox.File{Path: n, Data: []byte(pyArgs.Files[n])})
		}
		in, msg := readInputs(ctx, call.Handles, pyArgs.Inputs)
		if msg != "" {
			return tool.ErrorResult("run_python: %s", msg), nil, nil
		}
		req.Exec.Files = append(req.Exec.Files, in...)
		req.Collect, req.CollectLimit = pyArgs.Outputs, maxOutputFile
	} else {
		req.Exec.Argv = []string{ToolEntrypoint}
		req.Exec.Stdin = call.Args
		// The credential the broker minted for this call reaches the
		// tool's program, in its environment only: not its arguments,
		// not the log. Model-written code (run_python) never gets one.
		if call.Credential != "" {
			req.Exec.Env = append(req.Exec.Env, CredentialEnv+"="+call.Credential)
		}
	}
	c, err := r.m.Run(ctx, req)
	info := boundary(c, err)
	if err != nil {
		if errors.Is(err, sandbox.ErrNoExecutor) {
			return tool.ErrorResult("tool %s needs an isolation tier %d executor, and none is available on this host; refusing to run it at a weaker tier", m.Name, r.tier), info, nil
		}
		return tool.Result{}, info, err
	}
	if m.Name == RunPythonName {
		return pythonResult(c, pyArgs, m.MaxOutput()), info, nil
	}
	return genericResult(c, m), info, nil
}

// fileName is a workspace file name run_python accepts.
var fileName = regexp.MustCompile(`^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$`)

// checkNames refuses, as the model's error, file names that are not plain
// relative paths in the workspace, that name main.py, or that two inputs
// share: the model reads what was wrong instead of losing the sandbox.
func checkNames(a PythonArgs) string {
	seen := map[string]bool{"main.py": true}
	check := func(kind, n string) string {
		bad := len(n) > 200 || !fileName.MatchString(n)
		for _, part := range strings.Split(n, "/") {
			bad = bad || part == "." || part == ".."
		}
		switch {
		case bad:
			return fmt.Sprintf("%s name %q is not a relative path of letters, digits, '.', '_', '-' and '/'", kind, sandbox.Sanitize([]byte(n), 80, false, false).Text)
		case seen[n]:
			return fmt.Sprintf("%s name %q is main.py or already given", kind, n)
		}
		seen[n] = true
		return ""
	}
	for _, kind := range []string{"files", "inputs"} {
		m := a.Files
		if kind == "inputs" {
			m = a.Inputs
		}
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if msg := check(kind, n); msg != "" {
				return msg
			}
		}
	}
	return ""
}

// readInputs resolves input handles into workspace files. A handle the run
// has not seen, or input over the limit, is the model's error to read.
func readInputs(ctx context.Context, h tool.HandleReader, inputs map[string]string) ([]sandbox.File, string) {
	if len(inputs) == 0 {
		return nil, ""
	}
	if h == nil {
		return nil, "inputs by handle are only available inside a run"
	}
	names := make([]string, 0, len(inputs))
	for n := range inputs {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []sandbox.File
	left := int64(maxInputs)
	for _, n := range names {
		data, err := h.ReadHandle(ctx, inputs[n], left)
		if err != nil {
			return nil, fmt.Sprintf("input %s: %v", sandbox.Sanitize([]byte(n), 200, false, false).Text, err)
		}
		left -= int64(len(data))
		out = append(out, sandbox.File{Path: n, Data: data})
	}
	return out, ""
}

// Traceparent derives the W3C traceparent passed into a call's sandbox from
// the run (trace id) and the call's idempotency key (span id), so spans a
// program emits inside join the run's trace; nothing they send back is
// trusted.
func Traceparent(runID, key string) string {
	t := sha256.Sum256([]byte("trace:" + runID))
	s := sha256.Sum256([]byte("span:" + key))
	return "00-" + hex.EncodeToString(t[:16]) + "-" + hex.EncodeToString(s[:8]) + "-01"
}

// boundary turns the manager's account of a call into the boundary record.
// Every field but Claim comes from the host's own measurements; the
// sidecar goes into Claim, compared with them, and changes none.
func boundary(c sandbox.Call, err error) *trace.SandboxInfo {
	b := c.Boundary
	if b.Executor == "" {
		return nil
	}
	r := c.Result
	info := &trace.SandboxInfo{
		ID: b.ID, Host: b.Host, Executor: b.Executor, Tier: b.Tier, RequestedTier: b.RequestedTier, Downgraded: b.Downgraded,
		Lifecycle: b.Lifecycle, ProvisionMS: b.ProvisionMS, WallMS: b.WallMS,
		Outcome: r.Outcome, ExitCode: r.ExitCode, Signal: r.Signal, Unclean: r.Unclean,
		BytesIn: b.BytesIn, StdoutBytes: r.Stdout.Bytes, StderrBytes: r.Stderr.Bytes,
		StdoutTruncated: r.Stdout.Truncated, StderrTruncated: r.Stderr.Truncated,
		PeakMemoryBytes: r.PeakMemoryBytes, Teardown: b.Teardown, Traceparent: b.Traceparent,
	}
	for _, a := range b.Egress {
		info.Egress = append(info.Egress, trace.EgressAttempt{Host: a.Host, Port: a.Port, Allowed: a.Allowed, Reason: a.Reason, Addr: a.Addr})
	}
	if err != nil {
		info.Outcome, info.ExitCode = sandbox.OutcomeCrashed, -1
		return info
	}
	info.Claim = claim(r, info)
	info.GuestSpans = c.GuestSpans
	return info
}

// claim records the wrapper's report as the guest's claim and names the
// host fields it contradicts.
func claim(r sandbox.Result, host *trace.SandboxInfo) *trace.SandboxClaim {
	sc := r.Sidecar
	if sc == nil {
		if r.SidecarError == "" {
			return nil
		}
		return &trace.SandboxClaim{Error: r.SidecarError}
	}
	code := sc.ExitCode
	cl := &trace.SandboxClaim{ExecMS: sc.ExecMS, ExitCode: &code, Signal: sc.Signal, PeakMemoryBytes: sc.PeakMemoryBytes}
	if raw, err := json.Marshal(sc); err == nil {
		cl.Report = raw
	}
	// What the claim implies, set against what the host saw.
	outcome, _ := sandbox.Classify(sc.ExitCode, false, false)
	if outcome != host.Outcome {
		cl.Disputed = append(cl.Disputed, "outcome")
	}
	if sc.ExitCode != host.ExitCode {
		cl.Disputed = append(cl.Disputed, "exit_code")
	}
	if sc.Signal != host.Signal {
		cl.Disputed = append(cl.Disputed, "signal")
	}
	if sc.ExecMS > host.WallMS {
		// The wrapper cannot have run the command longer than the host
		// waited for it.
		cl.Disputed = append(cl.Disputed, "wall_ms")
	}
	return cl
}

func pythonResult(c sandbox.Call, args PythonArgs, maxOut int) tool.Result {
	r := c.Result
	// Half the budget to stdout, a quarter to stderr, the rest to files.
	out := sandbox.Sanitize(r.Stdout.Tail, maxOut/2, true, r.Stdout.Truncated)
	errs := sandbox.Sanitize(r.Stderr.Tail, maxOut/4, true, r.Stderr.Truncated)
	pr := PythonResult{Outcome: r.Outcome, ExitCode: r.ExitCode, Stdout: out.Text, Stderr: errs.Text,
		StdoutTruncated: out.Truncated, StderrTruncated: errs.Truncated}
	room := maxOut / 4
	for _, p := range args.Outputs {
		data, ok := c.Files[p]
		if !ok {
			pr.Missing = append(pr.Missing, p)
			continue
		}
		s := sandbox.Sanitize(data, room, true, false)
		if pr.Files == nil {
			pr.Files = map[string]string{}
		}
		pr.Files[p] = s.Text
		room -= len(s.Text)
		if room < 0 {
			room = 0
		}
	}
	if c.Boundary.Teardown == sandbox.TeardownCaller {
		pr.Note = resetNote
	}
	res, _ := tool.JSONResult(pr)
	res.IsError = r.Outcome != sandbox.OutcomeOK
	return res
}

// genericResult takes the tool's stdout as its JSON result.
func genericResult(c sandbox.Call, m *tool.Manifest) tool.Result {
	r := c.Result
	if r.Outcome != sandbox.OutcomeOK {
		note := ""
		if c.Boundary.Teardown == sandbox.TeardownCaller {
			note = " (" + resetNote + ")"
		}
		return tool.ErrorResult("tool %s %s (exit %d)%s: %s", m.Name, describe(r.Outcome), r.ExitCode, note,
			sandbox.Sanitize(r.Stderr.Tail, 2048, false, r.Stderr.Truncated).Text)
	}
	if r.Stdout.Truncated || int(r.Stdout.Bytes) > m.MaxOutput() {
		return tool.ErrorResult("tool %s wrote %d bytes, more than its max_output_bytes %d", m.Name, r.Stdout.Bytes, m.MaxOutput())
	}
	if !json.Valid(r.Stdout.Tail) {
		return tool.ErrorResult("tool %s did not write a JSON result", m.Name)
	}
	// Re-encode the JSON so that no raw control bytes pass through strings.
	var v any
	if err := json.Unmarshal(r.Stdout.Tail, &v); err != nil {
		return tool.ErrorResult("tool %s did not write a JSON result", m.Name)
	}
	res, err := tool.JSONResult(v)
	if err != nil {
		return tool.ErrorResult("tool %s: %v", m.Name, err)
	}
	return res
}

func describe(outcome string) string {
	switch outcome {
	case sandbox.OutcomeTimeout:
		return "timed out"
	case sandbox.OutcomeOOM:
		return "ran out of memory"
	case sandbox.OutcomeKilled:
		return "was killed"
	case sandbox.OutcomeNonZero:
		return "failed"
	case sandbox.OutcomeCrashed:
		return "was cut off by a sandbox failure (its result is unknown; a new sandbox serves the next call)"
	}
	return strings.ReplaceAll(outcome, "_", " ")
}

// Check reports a problem with a tier-2/3 manifest this runner cannot
// serve (at load time, not call time).
func Check(m *tool.Manifest) error {
	if m.Tier < 2 {
		return nil
	}
	if m.Name == RunPythonName && (len(m.Network.Allow) > 0 || m.SideEffects != tool.SideEffectsNone) {
		return fmt.Errorf("run_python must have side_effects none and no network")
	}
	return nil
}
