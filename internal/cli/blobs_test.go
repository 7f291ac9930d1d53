package cli_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentplane/agentplane/store/s3blob/s3test"
)

// TestBlobsOnS3 runs the CLI scenarios in testdata/s3/*.txtar against a
// real S3-compatible server: runs kept in SQLite, blobs in the bucket
// (--blobs, AGENTPLANE_BLOBS or DATA/storage.yaml), for run, worker, serve
// and trace. $S3_BLOBS is the bucket's URL; the key is in the environment.
func TestBlobsOnS3(t *testing.T) {
	srv := s3test.Start(t)
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v) // for the commands the scripts run in this process (apiserve)
	}
	n := 0
	testscript.Run(t, testscript.Params{
		Dir: "testdata/s3",
		Setup: func(env *testscript.Env) error {
			n++
			env.Setenv("AGENTPLANE_DATA", env.WorkDir+"/data")
			env.Setenv("S3_PREFIX", "cli"+strconv.Itoa(n))
			env.Setenv("S3_BLOBS", srv.URL("cli"+strconv.Itoa(n)))
			env.Setenv("S3_SECRET", srv.SecretAccessKey)
			for _, kv := range srv.Env() {
				k, v, _ := strings.Cut(kv, "=")
				env.Setenv(k, v)
			}
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"apiserve": cmdServe,
			"http":     cmdHTTP,
			"waithttp": cmdWaitHTTP,
			// s3keys PREFIX: the bucket's keys under PREFIX, one a line.
			"s3keys": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 1 {
					ts.Fatalf("usage: s3keys PREFIX")
				}
				keys, err := srv.Keys(context.Background(), args[0])
				ts.Check(err)
				for _, k := range keys {
					ts.Stdout().Write([]byte(k + "\n"))
				}
				if neg != (len(keys) == 0) {
					ts.Fatalf("%d keys under %s", len(keys), args[0])
				}
			},
			// s3storage: DATA/storage.yaml naming the bucket.
			"s3storage": func(ts *testscript.TestScript, neg bool, args []string) {
				data := ts.Getenv("AGENTPLANE_DATA")
				ts.Check(os.MkdirAll(data, 0o700))
				ts.Check(os.WriteFile(filepath.Join(data, "storage.yaml"), []byte("blobs: "+ts.Getenv("S3_BLOBS")+"\n"), 0o600))
			},
		},
	})
}
