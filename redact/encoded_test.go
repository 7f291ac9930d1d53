package redact_test

import (
	"encoding/base64"
	"encoding/hex"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/agentplane/agentplane/redact"
)

func reversed(s string) string {
	r := []rune(s)
	slices.Reverse(r)
	return string(r)
}

// TestEncodedCredentialsRedacted (issue 15, class 14): a value the
// credential broker holds is removed in the forms a tool writes it in, not
// only as given. The value has bytes whose standard and URL base64 differ
// and whose length leaves padding.
func TestEncodedCredentialsRedacted(t *testing.T) {
	secret := join("crm-key?>", "~Zq81vT0x", "plK3")
	if len(secret)%3 == 0 {
		t.Fatal("the value must leave base64 padding")
	}
	std := base64.StdEncoding.EncodeToString([]byte(secret))
	urlEnc := base64.URLEncoding.EncodeToString([]byte(secret))
	if std == urlEnc || !strings.HasSuffix(std, "=") {
		t.Fatalf("test value does not exercise both alphabets and padding: %s %s", std, urlEnc)
	}
	r := redact.New(secret)
	cases := []struct{ name, leak, in string }{
		{"plain", secret, "key " + secret + " used"},
		{"base64 std padded", std, "x-key: " + std + "\n"},
		{"base64 std unpadded", strings.TrimRight(std, "="), "k=" + strings.TrimRight(std, "=") + "&next"},
		{"base64 url padded", urlEnc, "token " + urlEnc},
		{"base64 url unpadded", strings.TrimRight(urlEnc, "="), "/t/" + strings.TrimRight(urlEnc, "=") + "/x"},
		{"base64 inside a longer string, offset 0", "", "creds " + base64.StdEncoding.EncodeToString([]byte("abc"+secret+"!"))},
		{"base64 inside a longer string, offset 1", "", "creds " + base64.StdEncoding.EncodeToString([]byte("u:"+secret+"!!"))},
		{"base64 inside a longer string, offset 2", "", "creds " + base64.RawURLEncoding.EncodeToString([]byte("user:"+secret))},
		{"hex lower", hex.EncodeToString([]byte(secret)), "0x" + hex.EncodeToString([]byte(secret))},
		{"hex upper", strings.ToUpper(hex.EncodeToString([]byte(secret))), "KEY " + strings.ToUpper(hex.EncodeToString([]byte(secret)))},
		{"reversed", reversed(secret), "yek " + reversed(secret)},
		{"percent-encoded", url.QueryEscape(secret), "https://crm.example/?key=" + url.QueryEscape(secret)},
		{"percent-encoded path", url.PathEscape(secret), "https://crm.example/k/" + url.PathEscape(secret)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out, n := r.String(c.in)
			if n == 0 || !strings.Contains(out, redact.Placeholder("credential")) {
				t.Fatalf("nothing redacted in %q: %q", c.in, out)
			}
			if c.leak != "" && strings.Contains(out, c.leak) {
				t.Fatalf("%q survived: %q", c.leak, out)
			}
			// Whatever remains decodes to at most a few bytes at the
			// edges of the value, never a run of it.
			for _, part := range strings.FieldsFunc(out, func(r rune) bool { return strings.ContainsRune(" :=&/?\n", r) }) {
				for _, dec := range decodings(part) {
					if strings.Contains(dec, secret[2:len(secret)-2]) {
						t.Fatalf("%q still decodes to the value: %q", part, dec)
					}
				}
			}
			// Tool results are JSON: the same holds for a string in it.
			js, _ := r.Output([]byte(`{"debug":`+quote(c.in)+`}`), 0)
			if c.leak != "" && strings.Contains(string(js), c.leak) {
				t.Fatalf("%q survived in JSON: %s", c.leak, js)
			}
		})
	}
	// With keeps the values, not their encodings as new values.
	w := r.With("another-credential-77")
	if out, _ := w.String(std + " " + hex.EncodeToString([]byte("another-credential-77"))); strings.Contains(out, std) || strings.Contains(out, "616e6f74") {
		t.Fatalf("With lost an encoding: %q", out)
	}
	// Ordinary text next to such a redactor is left alone.
	for _, s := range []string{"Refund of Rs 12,499 on txn_1002 for customer c_88213.", "aGVsbG8gd29ybGQ=", "deadbeef00112233"} {
		if out, n := w.String(s); out != s || n != 0 {
			t.Errorf("changed %q -> %q", s, out)
		}
	}
}

func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, c := range s {
		switch c {
		case '"', '\\':
			b.WriteByte('\\')
			b.WriteRune(c)
		case '\n':
			b.WriteString(`\n`)
		default:
			b.WriteRune(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// decodings is part read as each encoding it might be in.
func decodings(part string) []string {
	out := []string{part, reversed(part)}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(part); err == nil {
			out = append(out, string(b))
		}
	}
	if b, err := hex.DecodeString(strings.TrimPrefix(part, "0x")); err == nil {
		out = append(out, string(b))
	}
	if u, err := url.QueryUnescape(part); err == nil {
		out = append(out, u)
	}
	return out
}

// TestBareAWSSecretKey (issue 15, class 14): an AWS secret access key
// without its label is removed when an access key id is near it or when it
// stands alone on its line (or as a whole JSON string); 40-character
// strings that are not keys stay.
func TestBareAWSSecretKey(t *testing.T) {
	redacted := []struct{ name, in string }{
		{"after the key id", "creds: " + awsID + " " + awsSecret},
		{"before the key id, other line", awsSecret + "\nid " + awsID},
		{"csv row", awsID + "," + awsSecret + ",eu-west-1"},
		{"alone on its line", "here are the keys I was given\n  " + awsSecret + "\nthanks"},
		{"alone in quotes", `"` + awsSecret + `".`},
		{"the whole message", awsSecret},
	}
	for _, c := range redacted {
		t.Run(c.name, func(t *testing.T) {
			out, _ := (*redact.Redactor)(nil).String(c.in)
			if strings.Contains(out, awsSecret) || !strings.Contains(out, redact.Placeholder("aws_secret_access_key")) {
				t.Fatalf("survived: %q", out)
			}
		})
	}
	if out, _ := redact.New().Output([]byte(`{"value":"`+awsSecret+`","n":1}`), 0); strings.Contains(string(out), awsSecret) {
		t.Fatalf("whole JSON string survived: %s", out)
	}
	kept := []struct{ name, in string }{
		{"git commit id", "commit 3f2a9c1d4b5e6f708192a3b4c5d6e7f8091a2b3c"},
		{"git commit id alone", "3F2A9C1D4B5E6F708192A3B4C5D6E7F8091A2B3C"},
		{"camel-case name alone", "customerAccountStatementDownloadHandler2"},
		{"path alone", "src/main/java/com/Example/v2/Controller1"},
		{"longer base64", strings.Repeat("Q29ycmVjdEhvcnNl", 4)},
		{"40 characters inside a longer token", "x_" + awsSecret},
		{"padded base64 of 30 bytes", "Q29ycmVjdEhvcnNlQmF0dGVyeVN0YXBsZTEyMzQ1="},
		{"a key in prose with no id near it (not recognised, see bareAWSSecret)", "ticket " + awsSecret + " was escalated"},
	}
	for _, c := range kept {
		t.Run("kept/"+c.name, func(t *testing.T) {
			if out, n := (*redact.Redactor)(nil).String(c.in); out != c.in || n != 0 {
				t.Fatalf("changed %q -> %q", c.in, out)
			}
		})
	}
}
