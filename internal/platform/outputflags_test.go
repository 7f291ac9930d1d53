package platform_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/render"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/trace"
)

// A model call that failed has no response: its flags are nothing, and
// the run's other text is still read (a run read after a failed model
// call once crashed the reader).
func TestOutputFlagsOfFailedModelCall(t *testing.T) {
	pol, err := render.NewPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	failed, _ := json.Marshal(trace.ModelCall{Error: "provider unavailable"})
	ended, _ := json.Marshal(trace.RunEnded{Result: "see ![x](https://evil.example/p.png?d=1)"})
	evs := []store.Event{{Seq: 1, Type: trace.EvModelCall, Payload: failed}, {Seq: 2, Type: trace.EvRunFailed, Payload: ended}}
	if got := platform.OutputFlags(pol, evs).Names(); !slices.Equal(got, []string{"remote_image"}) {
		t.Fatalf("flags %v, want [remote_image]", got)
	}
}
