package tool_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/tool"
)

const mailTool = `
name: mail
description: Sends one email.
tier: 1
timeout_ms: 1000
input_schema:
  type: object
  additionalProperties: false
  required: [to]
  properties:
    to: {type: string, format: email, maxLength: 254}
    cc: {type: array, items: {type: string, format: email}}
    on: {type: string, format: date}
side_effects: external
`

// TestClass11SchemaFormatsEnforced is class 11 of issue 15: a manifest's
// JSON Schema formats are asserted, not just annotations; "email" is one
// plain mailbox (no CR/LF, no %-routing, no quoted local part, no address
// literal); a value with a Bcc header is refused with a message the model
// can act on, which does not quote the value back; a format the broker
// cannot check is refused when the manifest is loaded.
func TestClass11SchemaFormatsEnforced(t *testing.T) {
	ms, err := tool.ParseManifests("mail.yaml", []byte(mailTool))
	if err != nil {
		t.Fatal(err)
	}
	m := ms[0]
	for _, tc := range []struct {
		args string
		want string // "" = valid
	}{
		{`{"to":"asha.rao@mail.example"}`, ""},
		{`{"to":"first.o'neil+disputes@example-bank.in"}`, ""},
		{`{"to":"asha.rao@mail.example\r\nBcc: compliance@exfil.example"}`, "line break"},
		{`{"to":"asha.rao@mail.example\nBcc: x@y.example"}`, "line break"},
		{`{"to":"audit%exfil.example@example-bank.in"}`, "routes mail"},
		{`{"to":"\"a\u0007b\"@example-bank.in"}`, "control character"},
		{`{"to":"\"a b\"@example-bank.in"}`, "space"},
		{`{"to":"\"ab\"@example-bank.in"}`, "quoted local parts"},
		{`{"to":"exfil.example!audit@example-bank.in"}`, "routing path"},
		{`{"to":"audit@[10.0.0.1]"}`, "address literals"},
		{`{"to":"a@b@example-bank.in"}`, "more than one @"},
		{`{"to":"audit@ex\u0430mple-bank.in"}`, "non-ASCII"},
		{`{"to":"audit@example-bank.in\u200b"}`, "non-ASCII"},
		{`{"to":"audit@localhost"}`, "full domain name"},
		{`{"to":"x@exfil.example, y@example-bank.in"}`, "space"},
		{`{"to":"ok@example-bank.in","cc":["fine@mail.example","bad%x@example-bank.in"]}`, "routes mail"},
		{`{"to":"ok@example-bank.in","on":"3 October"}`, "not a valid date"},
	} {
		err := m.ValidateArgs([]byte(tc.args))
		if tc.want == "" {
			if err != nil {
				t.Errorf("%s: %v", tc.args, err)
			}
			continue
		}
		var ae *tool.ArgsError
		if !errors.As(err, &ae) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want an ArgsError containing %q", tc.args, err, tc.want)
			continue
		}
		if strings.Contains(err.Error(), "Bcc") || strings.ContainsAny(err.Error(), "\r\n") {
			t.Errorf("%s: the refusal quotes the injected header back: %q", tc.args, err)
		}
	}

	for _, f := range []string{"idn-email", "credit-card", "emial"} {
		bad := strings.Replace(mailTool, "format: date", "format: "+f, 1)
		if _, err := tool.ParseManifests("mail.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), "cannot be enforced") {
			t.Errorf("format %s: load error = %v, want it refused", f, err)
		}
	}
}

// TestClass7OutputUntrustedByDefault: a manifest that says nothing about
// its output has untrusted output, and only a tier-1 tool may declare it
// trusted.
func TestClass7OutputUntrustedByDefault(t *testing.T) {
	ms, err := tool.ParseManifests("mail.yaml", []byte(mailTool))
	if err != nil {
		t.Fatal(err)
	}
	if !ms[0].UntrustedOutput {
		t.Fatal("a manifest without untrusted_output has trusted output")
	}
	ms, err = tool.ParseManifests("mail.yaml", []byte(mailTool+"untrusted_output: false\n"))
	if err != nil || ms[0].UntrustedOutput {
		t.Fatalf("tier 1 declaring trusted output: %v", err)
	}
	sandboxed := strings.Replace(mailTool, "tier: 1", "tier: 2\nimage: example/mail:1", 1) + "untrusted_output: false\n"
	if _, err := tool.ParseManifests("mail.yaml", []byte(sandboxed)); err == nil || !strings.Contains(err.Error(), "only a tier-1 tool") {
		t.Fatalf("tier 2 declaring trusted output: %v", err)
	}
}

// FuzzEmailFormat: whatever the model sends as a recipient, an accepted one
// is a single plain mailbox: one @, printable ASCII, no space, line break,
// %, ! or quote, and a dotted domain.
func FuzzEmailFormat(f *testing.F) {
	ms, err := tool.ParseManifests("mail.yaml", []byte(mailTool))
	if err != nil {
		f.Fatal(err)
	}
	m := ms[0]
	for _, s := range []string{"asha.rao@mail.example", "a@b.in\r\nBcc: x@y.example", "a%b@c.in", `"a"@b.in`, "a@[1.2.3.4]", "a@b", "ex\u0430@b.in"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		args, err := json.Marshal(map[string]string{"to": s})
		if err != nil {
			return
		}
		if m.ValidateArgs(args) != nil {
			return
		}
		local, domain, _ := strings.Cut(s, "@")
		if strings.Count(s, "@") != 1 || local == "" || !strings.Contains(domain, ".") || strings.ContainsAny(s, " \t\r\n%!\"[]\\") {
			t.Fatalf("accepted %q", s)
		}
		for _, r := range s {
			if r < 0x21 || r > 0x7e {
				t.Fatalf("accepted %q with %U", s, r)
			}
		}
	})
}
