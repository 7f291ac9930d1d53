package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/sandbox/toolrun"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// The demo's analysis step: the example's analysis agent compares a year of
// the customer's card history (30,000 generated transactions plus the
// planted duplicate) with Python run by run_python in a gVisor sandbox.
const (
	AnalysisAgent = "card-dispute-analyst"
	AnalysisTask  = "Check customer c_88213's card transactions from 1 Oct 2025 to 31 Oct 2026 for duplicate charges."
	// analysisRows is how many transactions the step generates.
	analysisRows = 30_000
	analysisSeed = 2026
)

// analysisFiles are written into DATA/demo/analysis under their own names.
var analysisFiles = []string{"agent.yaml", "turns.yaml", "models.yaml", "run_python.yaml"}

// toolsDir is where scripts/sandboxes.sh puts runsc and the sandbox guest.
func toolsDir() string {
	if d := os.Getenv("AGENTPLANE_TOOLS"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "agentplane-tools")
}

// findSandbox fills in the guest and runsc from the tools cache (and runsc
// from PATH) when no flag or environment variable named them. It reports
// whether tier 3 can be served.
func findSandbox(cm *common) bool {
	bin := filepath.Join(toolsDir(), "bin")
	if cm.guest == "" && isExecutable(filepath.Join(bin, "agentplane-guest")) {
		cm.guest = filepath.Join(bin, "agentplane-guest")
	}
	if cm.runsc == "" {
		if p, err := exec.LookPath("runsc"); err == nil {
			cm.runsc = p
		} else if isExecutable(filepath.Join(bin, "runsc")) {
			cm.runsc = filepath.Join(bin, "runsc")
		}
	}
	return cm.guest != "" && (cm.runsc != "" || cm.downgrade)
}

func isExecutable(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// demoAnalysis runs the analysis step after the dispute. mode is auto (run
// it when a tier-3 sandbox is available), on or off.
func (c *command) demoAnalysis(cm common, mode string, extra func(*platform.Options)) error {
	switch mode {
	case "off":
		return nil
	case "auto", "on":
	default:
		return exitCode{2, fmt.Sprintf("demo: --analysis must be auto, on or off, not %q", mode)}
	}
	found := findSandbox(&cm)
	if !found && mode == "auto" {
		fmt.Fprintf(c.out, "\nAnalysis step skipped: run_python runs model-written Python in a tier-3 (gVisor) sandbox, and none was found.\n"+
			"  ./scripts/sandboxes.sh builds runsc and the sandbox guest into %s; run the demo again as root afterwards,\n"+
			"  or pass --analysis on to watch the tool fail closed.\n", filepath.Join(toolsDir(), "bin"))
		return nil
	}
	fdir := filepath.Join(cm.data, "demo", "analysis")
	if err := os.MkdirAll(fdir, 0o700); err != nil {
		return err
	}
	for _, name := range analysisFiles {
		data, err := carddispute.ReadFile("analysis/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(fdir, name), data, 0o600); err != nil {
			return err
		}
	}
	cm.models = filepath.Join(fdir, "models.yaml")
	p, err := c.open(&cm, extra)
	if err != nil {
		return err
	}
	defer p.Close()
	if _, err := p.ApplyTools(c.ctx, filepath.Join(fdir, "run_python.yaml")); err != nil {
		return err
	}
	d, err := agent.LoadDefinitionFile(filepath.Join(fdir, "agent.yaml"))
	if err != nil {
		return err
	}
	if _, err := p.Registry.Apply(c.ctx, d); err != nil {
		return err
	}
	b, err := bankOf(p)
	if err != nil {
		return err
	}
	if err := b.GenerateTransactions(c.ctx, bank.CustomerID, analysisRows, analysisSeed); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "\nAnalysis step: %s compares a year of card history (%d generated transactions plus October's) in Python, in a gVisor sandbox\n\n",
		AnalysisAgent, analysisRows)
	run, final, err := c.playDemoRun(p, &cardDisputeExample.demo, AnalysisAgent, AnalysisTask, false)
	if err != nil {
		return err
	}
	if err := c.printAnalysis(p, run); err != nil {
		return err
	}
	fmt.Fprintf(c.out, "  agentplane trace %s --data %s\n", run.ID, shellQuote(cm.data))
	if !found {
		fmt.Fprintf(c.out, "\nAs expected without a sandbox: run_python refused to run at a weaker tier, and the scripted model, which has no answer without its result, ended the run %s.\n", final.Status)
		return nil
	}
	if final.Status != store.StatusCompleted {
		return exitCode{1, fmt.Sprintf("analysis run ended %s", final.Status)}
	}
	return nil
}

// printAnalysis summarises the run_python call: what the code found and
// what the host measured at the sandbox boundary.
func (c *command) printAnalysis(p *platform.Platform, run *store.Run) error {
	evs, err := p.Store.Events(c.ctx, run.ID, 0, 0)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if ev.Type != trace.EvToolResult {
			continue
		}
		var r trace.ToolResult
		if err := json.Unmarshal(ev.Payload, &r); err != nil {
			return err
		}
		if r.Tool != toolrun.RunPythonName {
			continue
		}
		if r.Status != trace.StatusOK || r.Sandbox == nil {
			fmt.Fprintf(c.out, "\nrun_python did not run: %s\n", clean(r.Output.Text, 300))
			return nil
		}
		out, err := trace.Load(c.ctx, p.Store.Blobs(run.Tenant), r.Output)
		if err != nil {
			return err
		}
		var res toolrun.PythonResult
		var found struct {
			Compared int `json:"compared"`
			Groups   int `json:"duplicate_groups"`
		}
		if json.Unmarshal(out, &res) != nil || json.Unmarshal([]byte(res.Stdout), &found) != nil {
			fmt.Fprintf(c.out, "\nrun_python answered: %s\n", clean(string(out), 300))
			return nil
		}
		b := r.Sandbox
		fmt.Fprintf(c.out, "\nPython compared %d transactions and found %d duplicate group(s) (duplicates.csv came back with the result).\n", found.Compared, found.Groups)
		var claimed int64
		if b.Claim != nil {
			claimed = b.Claim.ExecMS
		}
		fmt.Fprintf(c.out, "Sandbox %s (%s, tier %d): provision %d ms, wall %d ms, %d bytes in, peak memory %.1f MiB, exit %d (host-measured); exec %d ms (the sandbox's claim)\n",
			b.ID, b.Executor, b.Tier, b.ProvisionMS, b.WallMS, b.BytesIn, float64(b.PeakMemoryBytes)/(1<<20), b.ExitCode, claimed)
	}
	return nil
}
