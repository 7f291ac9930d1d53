package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/model/anthropic/anthropictest"
)

func writeModels(t *testing.T, url string) string {
	t.Helper()
	dir := t.TempDir()
	yml := `
providers:
  anthropic: {type: anthropic, base_url: "` + url + `", api_key_env: AGENTPLANE_TEST_KEY}
aliases:
  - {name: standard, provider: anthropic, model_id: claude-sonnet-5, max_tokens: 64,
     price: {currency: USD, input_per_mtok: 2000000, output_per_mtok: 10000000, cache_write_per_mtok: 2500000, cache_read_per_mtok: 200000}}
  - {name: unpriced, provider: anthropic, model_id: claude-x}
rates: {USD_INR: 88}
gateway: {base_delay: 1ms, max_delay: 2ms}
`
	path := filepath.Join(dir, "models.yaml")
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Main(t.Context(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestModelsTest(t *testing.T) {
	s := anthropictest.NewServer(anthropictest.Options{Reply: func(c *anthropictest.Call) anthropictest.Reply {
		if c.N == 1 {
			return anthropictest.Reply{Status: 529, ErrorType: "overloaded_error", ErrorMessage: "Overloaded"}
		}
		return anthropictest.DefaultReply(c)
	}})
	defer s.Close()
	t.Setenv("AGENTPLANE_TEST_KEY", "sk-ant-cli")
	path := writeModels(t, s.URL)

	code, out, errOut := runCLI(t, "models", "test", "standard", "--models", path, "--data", t.TempDir())
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"alias     standard -> claude-sonnet-5 (provider anthropic, anthropic)",
		`reply     "pong"`,
		"stop      end_turn",
		"2 attempt(s)",
		"tokens    input 0, output 1, cache write ",
		" USD = ",
		" INR",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	calls := s.Calls()
	if len(calls) != 2 || calls[1].Req.MaxTokens != 16 || !strings.Contains(calls[1].Header.Get("Authorization"), "sk-ant-cli") {
		t.Errorf("server saw %d calls; last max_tokens %d", len(calls), calls[len(calls)-1].Req.MaxTokens)
	}

	code, out, _ = runCLI(t, "models", "test", "unpriced", "--models", path, "--stream", "--prompt", "Say pong")
	if code != 0 || !strings.Contains(out, "cost      unknown") || !strings.Contains(out, "first text after") {
		t.Errorf("unpriced streamed test: exit %d\n%s", code, out)
	}
	if last := s.Calls()[len(s.Calls())-1]; last.LastUserText() != "Say pong" || !last.Req.Stream {
		t.Errorf("prompt %q stream %v", last.LastUserText(), last.Req.Stream)
	}

	code, out, _ = runCLI(t, "models", "list", "--models", path)
	if code != 0 || !strings.Contains(out, "standard") || !strings.Contains(out, "USD 2/10/2.5/0.2") || !strings.Contains(out, "unknown") {
		t.Errorf("models list: exit %d\n%s", code, out)
	}
}

func TestModelsTestFailures(t *testing.T) {
	s := anthropictest.NewServer(anthropictest.Options{Reply: func(*anthropictest.Call) anthropictest.Reply {
		return anthropictest.Reply{Status: 401, ErrorType: "authentication_error", ErrorMessage: "invalid x-api-key"}
	}})
	defer s.Close()
	path := writeModels(t, s.URL)

	// No key in the environment: fails without sending anything.
	t.Setenv("AGENTPLANE_TEST_KEY", "")
	code, out, errOut := runCLI(t, "models", "test", "standard", "--models", path)
	if code != 1 || !strings.Contains(errOut, "AGENTPLANE_TEST_KEY is not set") || !strings.Contains(out, "FAILED") || len(s.Calls()) != 0 {
		t.Errorf("missing key: exit %d, %d calls\nstdout:\n%s\nstderr:\n%s", code, len(s.Calls()), out, errOut)
	}

	// A rejected key is not retried.
	t.Setenv("AGENTPLANE_TEST_KEY", "sk-wrong")
	code, out, errOut = runCLI(t, "models", "test", "standard", "--models", path)
	if code != 1 || !strings.Contains(errOut, "authentication_error") || !strings.Contains(out, "not retryable") || len(s.Calls()) != 1 {
		t.Errorf("rejected key: exit %d, %d calls\nstdout:\n%s\nstderr:\n%s", code, len(s.Calls()), out, errOut)
	}

	if code, _, errOut := runCLI(t, "models", "test", "nope", "--models", path); code != 2 || !strings.Contains(errOut, "unknown alias") {
		t.Errorf("unknown alias: exit %d %s", code, errOut)
	}
	if code, _, _ := runCLI(t, "models"); code != 2 {
		t.Errorf("no subcommand: exit %d", code)
	}
	if code, _, errOut := runCLI(t, "models", "test", "standard", "--data", t.TempDir()); code != 1 || !strings.Contains(errOut, "no models.yaml") {
		t.Errorf("no models file: exit %d %s", code, errOut)
	}
}
