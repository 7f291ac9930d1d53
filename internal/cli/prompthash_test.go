package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// runs --prompt-hash finds the runs that sent an identical prompt, within
// the tenant asked for, and refuses what is not a prompt hash.
func TestRunsByPromptHash(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	files := map[string]string{
		"tools.yaml": "name: echo\ndescription: Returns its arguments.\ntier: 1\ntimeout_ms: 1000\ninput_schema: {type: object}\nside_effects: none\n",
		"agent.yaml": "agent: helper\nversion: 1\nmodel: {alias: m}\ninstructions: Help.\ntools: [{tool: echo}]\n" +
			"budgets: {max_steps: 5, max_input_tokens: 100000, max_cost_usd: 1, max_wall_clock: 1m}\n",
		"models.yaml": "providers:\n  scripted: {type: scripted, script: turns.yaml, repeat: true}\naliases:\n" +
			"  - {name: m, provider: scripted, model_id: scripted-m, price: {currency: USD, input_per_mtok: 1, output_per_mtok: 1, cache_write_per_mtok: 0, cache_read_per_mtok: 0}}\n",
		"turns.yaml": "turns:\n  - text: done\n",
	}
	for n, b := range files {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	must := func(want int, args ...string) string {
		t.Helper()
		code, out, errb := runCLI(t, append(args, "--data", data)...)
		if code != want {
			t.Fatalf("agentplane %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errb)
		}
		return out + errb
	}
	must(0, "tools", "apply", "-f", filepath.Join(dir, "tools.yaml"))
	must(0, "agents", "apply", "-f", filepath.Join(dir, "agent.yaml"))
	hashRe := regexp.MustCompile(`"prompt_hash":"(sha256:[0-9a-f]{64})"`)
	run := func(tenant, task string) (id, hash string) {
		out := must(0, "run", "helper", "--task", task, "--user", "u", "--tenant", tenant, "--models", filepath.Join(dir, "models.yaml"), "--json")
		m := hashRe.FindStringSubmatch(out)
		idm := regexp.MustCompile(`"run_id":"(run_[a-z0-9]+)"`).FindStringSubmatch(out)
		if m == nil || idm == nil {
			t.Fatalf("no run id or prompt hash in\n%s", out)
		}
		return idm[1], m[1]
	}
	a1, h := run("acme", "same question")
	a2, h2 := run("acme", "same question")
	b, hb := run("acme", "another question")
	o, ho := run("other", "same question")
	if h != h2 || h == hb || h != ho {
		t.Fatalf("hashes %s %s %s %s: want the same prompt to hash the same", h, h2, hb, ho)
	}
	out := must(0, "runs", "--prompt-hash", h, "--tenant", "acme")
	if !strings.Contains(out, a1) || !strings.Contains(out, a2) || strings.Contains(out, b) || strings.Contains(out, o) {
		t.Fatalf("runs --prompt-hash (acme) listed:\n%s\nwant %s and %s only", out, a1, a2)
	}
	if out := must(0, "runs", "--prompt-hash", strings.TrimPrefix(h, "sha256:")); !strings.Contains(out, o) {
		t.Fatalf("runs --prompt-hash without a tenant lacks %s:\n%s", o, out)
	}
	must(2, "runs", "--prompt-hash", strings.ToUpper(h))
	must(2, "runs", "--prompt-hash", h[:12])
}
