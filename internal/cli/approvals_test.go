package cli

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

const mailerTools = `
name: echo
description: Sends one email.
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  additionalProperties: false
  required: [to, amount]
  properties:
    to: {type: string, maxLength: 254}
    amount: {type: number}
approval: always
approval_group: mailers
side_effects: external
`

const mailerAgent = `
agent: mailer
version: 1
model: {alias: m}
instructions: Mail.
tools: [{tool: echo}]
policies:
  - name: big-mail-needs-a-head
    when: 'tool == "echo" and args.amount > 100'
    then: 'require_approval(group: heads, expires: 1h)'
budgets: {max_steps: 20, max_input_tokens: 100000, max_cost_usd: 1, max_wall_clock: 1h}
`

const mailerModels = `
providers:
  scripted: {type: scripted, script: turns.yaml}
aliases:
  - {name: m, provider: scripted, model_id: scripted-m, price: {currency: USD, input_per_mtok: 1000000, output_per_mtok: 2000000, cache_write_per_mtok: 0, cache_read_per_mtok: 0}}
`

const mailerTurns = `
turns:
  - tool_calls: [{name: echo, args: {to: "audit@ex\u0430mple.in", amount: 10}}]
  - text: sent
`

// TestApprovalWarningsAndEditsShown: `agentplane approvals` warns the
// approver about a look-alike address in plain words, and after an edit
// into a stricter rule the trace shows the edit (old and new arguments,
// the editor, the comment) and the new request to the other group.
func TestApprovalWarningsAndEditsShown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	for name, body := range map[string]string{"tools.yaml": mailerTools, "agent.yaml": mailerAgent, "models.yaml": mailerModels, "turns.yaml": mailerTurns} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	must := func(want int, args ...string) string {
		t.Helper()
		code, out, errb := runCLI(t, append(args, "--data", data)...)
		if code != want {
			t.Fatalf("agentplane %s: exit %d, want %d\n%s%s", strings.Join(args, " "), code, want, out, errb)
		}
		return out
	}
	must(0, "tools", "apply", "-f", filepath.Join(dir, "tools.yaml"))
	must(0, "agents", "apply", "-f", filepath.Join(dir, "agent.yaml"))
	must(0, "users", "set", "acme", "alice", "--groups", "staff")
	must(0, "users", "set", "acme", "bob", "--groups", "mailers")
	must(3, "run", "mailer", "--task", "mail audit", "--user", "alice", "--tenant", "acme", "--models", filepath.Join(dir, "models.yaml"))

	out := must(0, "approvals")
	id := regexp.MustCompile(`apr_\S+_1_0`).FindString(out)
	if id == "" || !strings.Contains(out, id+": WARNING: the domain in \"audit@exаmple.in\" mixes Latin and Cyrillic letters (U+0430 CYRILLIC SMALL LETTER A)") {
		t.Fatalf("approvals does not warn the approver:\n%s", out)
	}
	must(0, "edit", id, "--as", "bob", "--args", `{"to":"audit@example.in","amount":500}`, "--comment", "the full batch")
	must(0, "worker", "--until-idle", "--models", filepath.Join(dir, "models.yaml"))

	out = must(0, "approvals")
	if !strings.Contains(out, id+".2") || !strings.Contains(out, "heads") ||
		!strings.Contains(out, "asked again: edited by bob; the edited call needs group heads, which bob is not in") {
		t.Fatalf("no new request to heads:\n%s", out)
	}
	out = must(0, "trace", "last")
	for _, want := range []string{
		"approval " + id + " edited by bob: the full batch",
		`edit: amount: 10 -> 500; to: "audit@exаmple.in" -> "audit@example.in"`,
		`old arguments {"amount":10,"to":"audit@exаmple.in"}`,
		`new arguments {"amount":500,"to":"audit@example.in"}`,
		"decided again: needs approval",
		"approval requested " + id + ".2 from group heads",
		"asked again (after " + id + "): edited by bob",
		"WARNING for the approver: the domain in",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
}
