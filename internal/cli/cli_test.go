package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/agentplane/agentplane/internal/cli"
)

func TestMain(m *testing.M) {
	// A race-enabled binary sleeps a second before it exits (the race
	// runtime's atexit_sleep_ms, so that other threads finish their
	// reports); the scripts run this binary as agentplane about 200
	// times. 10 ms still lets a report in flight finish, and a race in a
	// command still fails its exec (exit status 66). testscript passes
	// GORACE on to the commands it runs.
	if g := os.Getenv("GORACE"); !strings.Contains(g, "atexit_sleep_ms") {
		os.Setenv("GORACE", strings.TrimSpace(g+" atexit_sleep_ms=10"))
	}
	testscript.Main(m, map[string]func(){
		"agentplane": func() { os.Exit(cli.Main(context.Background(), os.Args[1:], os.Stdout, os.Stderr)) },
	})
}

// TestScripts runs the CLI scenarios in testdata/script/*.txtar and the
// eval command's in testdata/eval/*.txtar, against the card-dispute
// example's files ($FILES) and eval set ($EVALS) and the helpdesk
// example's ($HELPDESK: files/ and evals/). The scripts run side by side
// (go test -parallel); the eval ones, the longest, are queued first.
func TestScripts(t *testing.T) {
	t.Parallel()
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
	var scripts []string
	for _, dir := range []string{"testdata/eval", "testdata/script"} {
		m, err := filepath.Glob(filepath.Join(dir, "*.txtar"))
		if err != nil || len(m) == 0 {
			t.Fatalf("no scripts in %s (%v)", dir, err)
		}
		scripts = append(scripts, m...)
	}
	testscript.Run(t, testscript.Params{
		Files: scripts,
		Setup: func(env *testscript.Env) error {
			env.Setenv("AGENTPLANE_DATA", env.WorkDir+"/data")
			env.Setenv("FILES", files)
			env.Setenv("EVALS", evals)
			env.Setenv("HELPDESK", helpdesk)
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"apiserve":    cmdServe,
			"http":        cmdHTTP,
			"waitfile":    cmdWaitFile,
			"waithttp":    cmdWaitHTTP,
			"mcpserve":    cmdMCPServe,
			"mcpdescribe": cmdMCPDescribe,
		},
	})
}

// cmdServe starts `agentplane serve` on a free loopback port for the rest
// of the script, with an API key for TENANT/USER:
//
//	apiserve TENANT USER [serve flags...]
//
// It sets AGENTPLANE_SERVER and AGENTPLANE_TOKEN (so the CLI is a client
// of the server) and writes the server's stderr to $WORK/serve.log.
func cmdServe(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 {
		ts.Fatalf("usage: apiserve TENANT USER [serve flags...]")
	}
	data := ts.Getenv("AGENTPLANE_DATA")
	var tok, kerr bytes.Buffer
	if code := cli.Main(context.Background(), []string{"apikey", "create", "--tenant", args[0], "--user", args[1], "--data", data}, &tok, &kerr); code != 0 {
		ts.Fatalf("apikey create: exit %d: %s", code, kerr.String())
	}
	logf, err := os.Create(filepath.Join(ts.Getenv("WORK"), "serve.log"))
	ts.Check(err)
	pr, pw := io.Pipe()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cli.Main(ctx, append([]string{"serve", "--addr", "127.0.0.1:0", "--data", data}, args[2:]...), pw, logf)
		pw.Close()
	}()
	ts.Defer(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		logf.Close()
	})
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		ts.Fatalf("serve did not start: %v (see serve.log)", err)
	}
	go io.Copy(io.Discard, pr)
	// "agentplane: serving http://ADDR (data DIR, store S)"
	_, rest, ok := strings.Cut(line, "serving ")
	url, _, _ := strings.Cut(rest, " ")
	if !ok || !strings.HasPrefix(url, "http://127.0.0.1:") {
		ts.Fatalf("unexpected serve output %q", line)
	}
	ts.Setenv("AGENTPLANE_SERVER", url)
	ts.Setenv("AGENTPLANE_TOKEN", strings.TrimSpace(tok.String()))
}

// cmdWaitFile waits (up to 20s) until FILE matches REGEXP:
//
//	waitfile FILE REGEXP
func cmdWaitFile(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waitfile FILE REGEXP")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if re.MatchString(ts.ReadFile(args[0])) {
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("%s does not match %q:\n%s", args[0], args[1], ts.ReadFile(args[0]))
		}
	}
}

// cmdWaitHTTP polls GET PATH (up to 20s) until the body matches REGEXP and
// prints the body:
//
//	waithttp PATH REGEXP
func cmdWaitHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: waithttp PATH REGEXP")
	}
	re, err := regexp.Compile(args[1])
	ts.Check(err)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		status, body := httpDo(ts, "GET", args[0], nil, "")
		if status == http.StatusOK && re.Match(body) {
			fmt.Fprintf(ts.Stdout(), "%s\n", body)
			return
		}
		if time.Now().After(deadline) {
			ts.Fatalf("GET %s: %d %s; does not match %q", args[0], status, body, args[1])
		}
	}
}

// httpDo sends one request to the server apiserve started.
func httpDo(ts *testscript.TestScript, method, path string, body io.Reader, contentType string) (int, []byte) {
	req, err := http.NewRequest(method, ts.Getenv("AGENTPLANE_SERVER")+path, body)
	ts.Check(err)
	req.Header.Set("Authorization", "Bearer "+ts.Getenv("AGENTPLANE_TOKEN"))
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	ts.Check(err)
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	ts.Check(err)
	return resp.StatusCode, out
}

// cmdHTTP sends one request to the server apiserve started and prints the
// status code and the body:
//
//	http METHOD PATH [BODY] [CONTENT-TYPE]
//
// BODY may be @FILE. The default content type is application/json. The
// status must be below 400, or with ! at least 400.
func cmdHTTP(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) < 2 || len(args) > 4 {
		ts.Fatalf("usage: http METHOD PATH [BODY] [CONTENT-TYPE]")
	}
	var body io.Reader
	if len(args) >= 3 {
		b := args[2]
		if name, ok := strings.CutPrefix(b, "@"); ok {
			b = ts.ReadFile(name)
		}
		body = strings.NewReader(b)
	}
	ct := ""
	if body != nil {
		ct = "application/json"
		if len(args) == 4 {
			ct = args[3]
		}
	}
	status, out := httpDo(ts, args[0], args[1], body, ct)
	fmt.Fprintf(ts.Stdout(), "%d\n%s\n", status, out)
	if neg != (status >= 400) {
		ts.Fatalf("status %d", status)
	}
}
