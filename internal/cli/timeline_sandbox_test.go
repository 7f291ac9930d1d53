package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// TestHostile_TimelineShowsGuestClaimApart (issue 15, class 15): the
// timeline prints the host's measurements as such and the sandbox's own
// report under its name, with the host fields it contradicts.
func TestHostile_TimelineShowsGuestClaimApart(t *testing.T) {
	zero := 0
	p, _ := json.Marshal(trace.ToolResult{Tool: "run_python", Status: trace.StatusError, Sandbox: &trace.SandboxInfo{
		ID: "apg-1", Executor: "gvisor", Tier: 3, Lifecycle: "warm", WallMS: 1500, Outcome: "timeout", ExitCode: 137,
		Unclean: "the host's timer fired",
		Claim:   &trace.SandboxClaim{ExecMS: 9000, ExitCode: &zero, Disputed: []string{"outcome", "exit_code", "wall_ms"}},
	}})
	var out bytes.Buffer
	(&timeline{w: &out}).event(&store.Event{Type: trace.EvToolResult, Payload: p})
	got := out.String()
	for _, want := range []string{"host-measured: provision 0ms, wall 1500ms, timeout exit 137",
		"not clean (sandbox destroyed): the host's timer fired",
		"guest claim (the sandbox's own report, unverified): exec 9000ms, exit 0; DISPUTED by the host: outcome, exit_code, wall_ms"} {
		if !strings.Contains(got, want) {
			t.Errorf("timeline lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "9000ms by the sandbox") {
		t.Errorf("the claim is printed among the host's figures:\n%s", got)
	}
}
