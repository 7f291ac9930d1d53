package toolrun

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/agentplane/agentplane/sandbox"
)

// TestHostile_SidecarClaimNeverOverridesHost (issue 15, class 15): the host
// timed a command out and killed it, but a report from inside claims a
// clean exit after a long run. The boundary record keeps the host's
// fields, and records the report only as the guest's claim, with the host
// fields it contradicts.
func TestHostile_SidecarClaimNeverOverridesHost(t *testing.T) {
	lie := &sandbox.Sidecar{Version: sandbox.SidecarVersion, StartedAt: time.Unix(0, 0).UTC(), EndedAt: time.Unix(9, 0).UTC(),
		ExecMS: 9000, ExitCode: 0, PeakMemoryBytes: 1,
		Files: []sandbox.SidecarFile{}, Network: []sandbox.SidecarNet{}, Packages: []sandbox.SidecarPackage{}}
	c := sandbox.Call{
		Result: sandbox.Result{Outcome: sandbox.OutcomeTimeout, ExitCode: 137, Signal: "SIGKILL", Unclean: "the host's timer fired",
			Stdout: sandbox.Output{Bytes: 12}, Stderr: sandbox.Output{Bytes: 3}, ExecMS: 1500, PeakMemoryBytes: 64 << 20, Sidecar: lie},
		Boundary: sandbox.Boundary{ID: "apg-1", Host: "h", Executor: "gvisor", Tier: 3, Lifecycle: sandbox.LifecycleReused,
			ProvisionMS: 1, WallMS: 1500, BytesIn: 7, Teardown: sandbox.TeardownCaller},
	}
	raw, err := json.Marshal(boundary(c, nil))
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(raw, &rec); err != nil {
		t.Fatal(err)
	}
	host := map[string]any{"outcome": "timeout", "exit_code": 137.0, "signal": "SIGKILL", "wall_ms": 1500.0,
		"stdout_bytes": 12.0, "stderr_bytes": 3.0, "peak_memory_bytes": float64(64 << 20), "bytes_in": 7.0}
	for k, want := range host {
		if rec[k] != want {
			t.Errorf("host field %s = %v, want the host's %v (record %s)", k, rec[k], want, raw)
		}
	}
	// Nothing of the claim sits beside the host's fields as if measured.
	for _, k := range []string{"exec_ms", "sidecar", "sidecar_error"} {
		if _, ok := rec[k]; ok {
			t.Errorf("the record holds the guest's %s among the host's fields: %s", k, raw)
		}
	}
	claim, ok := rec["guest_claim"].(map[string]any)
	if !ok {
		t.Fatalf("no guest_claim in the record: %s", raw)
	}
	if claim["exec_ms"] != 9000.0 || claim["exit_code"] != 0.0 || claim["report"] == nil {
		t.Errorf("the claim is not recorded as the guest's: %v", claim)
	}
	disputed := map[string]bool{}
	for _, d := range claim["disputed"].([]any) {
		disputed[d.(string)] = true
	}
	for _, k := range []string{"outcome", "exit_code", "signal", "wall_ms"} {
		if !disputed[k] {
			t.Errorf("the claim contradicts the host's %s but is not marked disputed: %v", k, claim["disputed"])
		}
	}
	if rec["unclean"] != "the host's timer fired" {
		t.Errorf("unclean = %v", rec["unclean"])
	}
}
