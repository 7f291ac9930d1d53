package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/engine/temporal/temporaltest"
)

// TestEngineFlagAndConfig: --engine names a Temporal server, so does the
// engine key of DATA/api.yaml; a spec that is not a temporal:// URL, or
// one without a port, fails the command saying what is accepted; a worker
// on a real dev server starts, finds nothing to do and exits 0.
func TestEngineFlagAndConfig(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"mysql://x", "temporal://127.0.0.1"} {
		code, _, stderr := runCLI(t, "worker", "--until-idle", "--data", t.TempDir(), "--engine", bad)
		if code == 0 || !strings.Contains(stderr, "temporal://HOST:PORT") {
			t.Fatalf("--engine %s: exit %d, stderr %q; want a failure naming the accepted form", bad, code, stderr)
		}
	}
	data := t.TempDir()
	if err := os.WriteFile(filepath.Join(data, "api.yaml"), []byte("engine: temporal://127.0.0.1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "worker", "--until-idle", "--data", data); code == 0 || !strings.Contains(stderr, "engine") {
		t.Fatalf("engine without a port in api.yaml: exit %d, stderr %q", code, stderr)
	}

	srv := temporaltest.Start(t, temporaltest.Options{})
	url := "temporal://" + srv.HostPort + "?namespace=default&task_queue=cli-test"
	if code, out, stderr := runCLI(t, "worker", "--until-idle", "--data", t.TempDir(), "--engine", url); code != 0 {
		t.Fatalf("worker --engine %s: exit %d\n%s%s", url, code, out, stderr)
	}
	data2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(data2, "api.yaml"), []byte("engine: "+url+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(t, "worker", "--until-idle", "--data", data2); code != 0 {
		t.Fatalf("worker with the engine in api.yaml: exit %d\n%s%s", code, out, stderr)
	}
}
