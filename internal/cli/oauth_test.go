package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/internal/cli"
	"github.com/agentplane/agentplane/mcphost/oauthtest"
)

// TestConnectorsConnect: `agentplane connectors connect` prints the
// authorization server's link, receives the answer on its loopback
// listener and stores the user's token, with which `connectors diff --as`
// then lists the server.
func TestConnectorsConnect(t *testing.T) {
	t.Setenv("AGENTPLANE_MCP_ALLOW_LOOPBACK", "1") // test-only: the servers are on loopback
	as := oauthtest.NewAuthServer(t, oauthtest.NewClock(time.Now()))
	crm := oauthtest.NewResourceServer(t, as, "crm")
	dir := t.TempDir()
	host := func(raw string) string { u, _ := url.Parse(raw); return u.Host }
	spec := fmt.Sprintf("name: crm\ntransport: http\nendpoint: %s\nauth: oauth\noauth: {client_id: agentplane}\nallow: [%q, %q]\n", crm.URL, host(crm.URL), host(as.URL))
	overlay := "tool: whoami\nrisk: low\ntier: 2\ntimeout_ms: 5000\nside_effects: none\nauth: {mode: on_behalf_of_user, scopes: ['crm:read']}\n"
	for name, body := range map[string]string{"crm.yaml": spec, "crm-tools.yaml": overlay} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	run := func(args ...string) (int, string) {
		var out bytes.Buffer
		code := cli.Main(context.Background(), append(args, "--data", data), &out, &out)
		return code, out.String()
	}
	if code, out := run("connectors", "add", "-f", filepath.Join(dir, "crm.yaml"), "--overlays", filepath.Join(dir, "crm-tools.yaml"), "--tenant", "bank"); code != 0 {
		t.Fatalf("add: %d %s", code, out)
	}
	if code, out := run("connectors", "connect", "crm", "--tenant", "bank"); code != 2 || !strings.Contains(out, "--as USER is required") {
		t.Fatalf("connect without --as: %d %s", code, out)
	}
	if code, out := run("connectors", "diff", "crm", "--tenant", "bank", "--as", "priya"); code == 0 || !strings.Contains(out, "connect your account") {
		t.Fatalf("diff before connecting: %d %s", code, out)
	}

	pr, pw := io.Pipe()
	rest := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		code := cli.Main(context.Background(), []string{"connectors", "connect", "crm", "--tenant", "bank", "--as", "priya", "--wait", "1m", "--data", data}, pw, rest)
		pw.Close()
		done <- code
	}()
	sc := bufio.NewScanner(pr)
	authURL := ""
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, as.URL+"/authorize?") {
			authURL = line
			break
		}
	}
	if authURL == "" {
		t.Fatalf("connect printed no link (%s)", rest.String())
	}
	go func() { _, _ = io.Copy(rest, pr) }()
	// The user's browser: logged in at the authorization server, sent back
	// to the CLI's listener.
	req, _ := http.NewRequest(http.MethodGet, authURL, nil)
	req.Header.Set("X-Test-User", "priya")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(page), "is connected") {
		t.Fatalf("the page after authorising: %d %s", resp.StatusCode, page)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("connect: exit %d: %s", code, rest.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("connect did not return after the answer")
	}
	code, out := run("connectors", "diff", "crm", "--tenant", "bank", "--as", "priya")
	if code != 0 || !strings.Contains(out, "ADDED whoami") {
		t.Fatalf("diff as priya: %d %s", code, out)
	}
	for _, tok := range as.Tokens() {
		if strings.Contains(out, tok) || strings.Contains(rest.String(), tok) {
			t.Fatal("a token was printed")
		}
	}
	if code, out := run("connectors", "disconnect", "crm", "--tenant", "bank", "--as", "priya"); code != 0 || !strings.Contains(out, "disconnected") {
		t.Fatalf("disconnect: %d %s", code, out)
	}
	if code, out := run("connectors", "diff", "crm", "--tenant", "bank", "--as", "priya"); code == 0 || !strings.Contains(out, "connect your account") {
		t.Fatalf("diff after disconnecting: %d %s", code, out)
	}
}

// syncBuffer is a bytes.Buffer two goroutines may write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
