package redact_test

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/agentplane/agentplane/redact"
)

// Test secrets are assembled at run time so that no complete secret-shaped
// literal sits in the source (and trips secret scanners).
func join(parts ...string) string { return strings.Join(parts, "") }

var (
	awsID      = join("AKIA", "IOSFODNN7", "EXAMPLE")
	awsSecret  = join("wJalrXUtnFEMI/K7MDENG/", "bPxRfiCYEXAMPLEKEY")
	ghToken    = join("ghp_", strings.Repeat("a1B2", 9))
	openAIKey  = join("sk-", "proj-", strings.Repeat("Zx9", 8))
	slackToken = join("xoxb-", "123456789012-", "abcdefABCDEF")
	stripeKey  = join("sk_", "live_", strings.Repeat("4eC39HqLyjWD", 2))
	googleKey  = join("AIza", strings.Repeat("Sy", 17), "A")
	jwt        = join("eyJhbGciOiJIUzI1NiJ9", ".", "eyJzdWIiOiJwcml5YSJ9", ".", "c2lnbmF0dXJlLWJ5dGVz")
	privKey    = join("-----BEGIN RSA ", "PRIVATE KEY-----\nMIIEpAIBAAKCAQEA7\nabc\n-----END RSA ", "PRIVATE KEY-----")
	apc        = join("apc1.", "eyJ0b29sIjoiY3JtIn0", ".", "bWFjYnl0ZXNtYWNieXRlcw")
)

func TestShapes(t *testing.T) {
	cases := []struct {
		name, in, secret, kind string
	}{
		{"aws key id", "key id " + awsID + " here", awsID, "aws_access_key_id"},
		{"aws secret", "aws_secret_access_key = " + awsSecret, awsSecret, "aws_secret_access_key"},
		{"github", "token " + ghToken, ghToken, "github_token"},
		{"openai-style", "OPENAI_API_KEY is " + openAIKey + ".", openAIKey, "api_key"},
		{"slack", slackToken, slackToken, "slack_token"},
		{"stripe", "use " + stripeKey, stripeKey, "api_key"},
		{"google", "k=" + googleKey, googleKey, "google_api_key"},
		{"jwt", "session " + jwt, jwt, "jwt"},
		{"private key", "key:\n" + privKey + "\nend", "MIIEpAIBAAKCAQEA7", "private_key"},
		{"private key cut short", "-----BEGIN OPENSSH " + "PRIVATE KEY-----\nb3BlbnNzaC1rZXk", "b3BlbnNzaC1rZXk", "private_key"},
		{"bearer", "Authorization: Bearer abc.def-ghi_jkl012345", "abc.def-ghi_jkl012345", "bearer_token"},
		{"basic", "Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA==", "basic_credential"},
		{"url password", "dial postgres://app:hunter2hunter2@db:5432/x", "hunter2hunter2", "url_password"},
		{"key=value", `password="correct horse"`, "correct", "secret_value"},
		{"api_key=", "api_key: 9f8e7d6c5b4a", "9f8e7d6c5b4a", "secret_value"},
		{"platform credential", "got " + apc, apc, "agentplane_credential"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, n := (*redact.Redactor)(nil).String(c.in)
			if strings.Contains(out, c.secret) || n == 0 {
				t.Fatalf("secret survived (%d redactions): %q", n, out)
			}
			if !strings.Contains(out, redact.Placeholder(c.kind)) {
				t.Errorf("no %s placeholder in %q", c.kind, out)
			}
		})
	}
	// Ordinary text is left alone.
	for _, s := range []string{
		"Refund of Rs 12,499 on txn_1002 for customer c_88213 (dispute D-2026-55102).",
		"The token count was 1200 and the key point is the duplicate.",
		"see https://example-bank.in/help and skip the rest",
		"asha.rao@mail.example",
	} {
		if out, n := (*redact.Redactor)(nil).String(s); out != s || n != 0 {
			t.Errorf("changed ordinary text %q -> %q", s, out)
		}
	}
}

func TestExactValues(t *testing.T) {
	r := redact.New("s3cr3t-value-42", "short", "s3cr3t-value-42-longer")
	out, n := r.String("a s3cr3t-value-42-longer and s3cr3t-value-42, short stays")
	if strings.Contains(out, "s3cr3t") || n != 2 || !strings.Contains(out, "short stays") {
		t.Fatalf("got %q (%d)", out, n)
	}
	if out, _ := r.With("another-secret-9").String("x another-secret-9 s3cr3t-value-42"); strings.Contains(out, "secret-9") || strings.Contains(out, "s3cr3t") {
		t.Fatalf("With lost values: %q", out)
	}
}

func TestSanitize(t *testing.T) {
	cases := []struct{ in, multi, single string }{
		{"plain text", "plain text", "plain text"},
		{"red \x1b[31mALERT\x1b[0m done", "red ALERT done", "red ALERT done"},
		{"title \x1b]0;pwned\x07 after", "title  after", "title  after"},
		{"osc st \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "osc st link", "osc st link"},
		{"line1\r\nline2\rline3", "line1\nline2\nline3", "line1 line2 line3"},
		{"tab\there\x00nul\x7fdel\u0085c1", "tab\therenuldelc1", "tab herenuldelc1"},
		{"bidi \u202eevil\u202c ok", "bidi evil ok", "bidi evil ok"},
		{"sep\u2028x", "sep\nx", "sep x"},
		{"bad \xff utf8", "bad \uFFFD utf8", "bad \uFFFD utf8"},
		{"हिन्दी ZWJ\u200d stays", "हिन्दी ZWJ\u200d stays", "हिन्दी ZWJ\u200d stays"},
	}
	for _, c := range cases {
		if got, _ := redact.Sanitize(c.in, true); got != c.multi {
			t.Errorf("Sanitize(%q, true) = %q, want %q", c.in, got, c.multi)
		}
		if got, _ := redact.Sanitize(c.in, false); got != c.single {
			t.Errorf("Sanitize(%q, false) = %q, want %q", c.in, got, c.single)
		}
	}
}

func TestOutputJSON(t *testing.T) {
	secret := "tok-" + strings.Repeat("q", 20)
	in := `{"status":"ok","note":"color \u001b[31mred\u001b[0m","debug":"auth used ` + secret + `",` +
		`"password":"pw","api_token":"x","nested":{"k":["` + jwt + `", 5, null]},"n":12499}`
	out, rep := redact.New(secret).Output([]byte(in), 0)
	if !json.Valid(out) {
		t.Fatalf("output is not JSON: %s", out)
	}
	var v map[string]any
	_ = json.Unmarshal(out, &v)
	if v["note"] != "color red" || v["status"] != "ok" || v["n"] != 12499.0 {
		t.Errorf("cleaned wrongly: %s", out)
	}
	for _, bad := range []string{secret, `"pw"`, `"x"`, "eyJ", "\\u001b"} {
		if strings.Contains(string(out), bad) {
			t.Errorf("%q survived: %s", bad, out)
		}
	}
	if rep.Redactions != 4 || rep.Stripped != 2 || rep.Bytes != int64(len(in)) || rep.Truncated {
		t.Errorf("report %+v", rep)
	}
	// Key order and untouched strings are kept byte for byte.
	clean := `{"z":1,"a":"plain","m":[true,"x"]}`
	if out, rep := redact.New().Output([]byte(clean), 0); string(out) != clean || rep.Redactions+rep.Stripped != 0 {
		t.Errorf("clean JSON changed: %s", out)
	}
}

func TestOutputBounds(t *testing.T) {
	big := `{"doc":"` + strings.Repeat("é", 5000) + `"}`
	out, rep := redact.New().Output([]byte(big), 1000)
	if !rep.Truncated || rep.Bytes != int64(len(big)) || len(out) > 1000 || !utf8.Valid(out) || !strings.HasSuffix(string(out), "[truncated]") {
		t.Fatalf("bounded wrongly: len %d, %+v", len(out), rep)
	}
	// A huge input is cut before it is cleaned; the byte count is still
	// the original one.
	huge := strings.Repeat("A line of sandbox output.\n", 200_000)
	out, rep = redact.New().Output([]byte(huge), 4096)
	if !rep.Truncated || rep.Bytes != int64(len(huge)) || len(out) > 4096 {
		t.Fatalf("huge: len %d, %+v", len(out), rep)
	}
	// Tail keeps the end.
	s, rep2 := redact.New().Text("first line\n"+strings.Repeat("x", 100)+"\nlast line: boom", redact.TextOptions{MaxBytes: 40, Tail: true, KeepNewlines: true})
	if !rep2.Truncated || !strings.HasSuffix(s, "boom") || len(s) > 40 {
		t.Fatalf("tail: %q", s)
	}
	// A secret straddling the bound is removed before the cut, so no part
	// of it is left.
	secret := "Zq" + strings.Repeat("9", 30)
	text := strings.Repeat("a", 990) + secret
	out, _ = redact.New(secret).Output([]byte(text), 1000)
	if strings.Contains(string(out), "Zq9") {
		t.Fatalf("a prefix of the secret survived the cut: %q", out[len(out)-40:])
	}
}

func TestAttrAndError(t *testing.T) {
	v, cut := redact.New().Attr("Traceback:\n  key="+openAIKey+"\n\x1b[2Jdone", 512, true)
	if cut || strings.Contains(v, openAIKey) || strings.ContainsAny(v, "\n\x1b") {
		t.Fatalf("Attr = %q, %v", v, cut)
	}
	if s := redact.New("hunter2hunter2").Error(errFor("dial: password hunter2hunter2 rejected")); strings.Contains(s, "hunter2") {
		t.Fatalf("Error = %q", s)
	}
}

type errFor string

func (e errFor) Error() string { return string(e) }
