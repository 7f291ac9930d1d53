package cli_test

import (
	"path/filepath"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"
)

// TestEvalScripts runs the eval command scenarios in testdata/eval/*.txtar
// against the card-dispute example's files ($FILES) and eval set ($EVALS),
// and the helpdesk example's ($HELPDESK: files/ and evals/).
func TestEvalScripts(t *testing.T) {
	files, err := filepath.Abs("../../examples/carddispute/files")
	if err != nil {
		t.Fatal(err)
	}
	evals, err := filepath.Abs("../../examples/carddispute/evals")
	if err != nil {
		t.Fatal(err)
	}
	helpdesk, err := filepath.Abs("../../examples/helpdesk")
	if err != nil {
		t.Fatal(err)
	}
	testscript.Run(t, testscript.Params{
		Dir: "testdata/eval",
		Setup: func(env *testscript.Env) error {
			env.Setenv("AGENTPLANE_DATA", env.WorkDir+"/data")
			env.Setenv("FILES", files)
			env.Setenv("EVALS", evals)
			env.Setenv("HELPDESK", helpdesk)
			return nil
		},
	})
}
