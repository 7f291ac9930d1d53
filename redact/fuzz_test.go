package redact_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/agentplane/agentplane/redact"
)

// FuzzOutput feeds arbitrary tool output, with a known secret planted at an
// arbitrary place, through Output. Whatever the input: the secret is gone,
// no control character or escape sequence survives (newlines and tabs
// aside), the result is valid UTF-8 and within the bound, and the report
// measures the input before any cut.
func FuzzOutput(f *testing.F) {
	for _, s := range []string{
		`{"a":"b"}`, `{"debug":"token SECRET","x":[1,"\u001b[31m"]}`, "plain \x1b]0;t\x07 text", "\xff\xfe", "",
		`{"password":"x"}`, "-----BEGIN " + "PRIVATE KEY-----\nabc", `["\ud800"]`, "a\r\nb", "\u202e",
	} {
		f.Add([]byte(s), uint16(3), uint16(64))
	}
	const secret = "QvZkW7mPxYj3Hn"
	f.Fuzz(func(t *testing.T, data []byte, at uint16, bound uint16) {
		pos := int(at) % (len(data) + 1)
		in := append(append(append([]byte(nil), data[:pos]...), secret...), data[pos:]...)
		max := int(bound)
		if max < 16 {
			max = 0 // no bound
		}
		var (
			out  []byte
			rep  redact.Report
			done = make(chan struct{})
		)
		go func() { out, rep = redact.New(secret).Output(in, max); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("Output hangs on %q (bound %d)", in, max)
		}
		if rep.Bytes != int64(len(in)) {
			t.Fatalf("Bytes = %d, input is %d", rep.Bytes, len(in))
		}
		if max > 0 && len(out) > max {
			t.Fatalf("output %d bytes, bound %d", len(out), max)
		}
		if !utf8.Valid(out) {
			t.Fatalf("output is not UTF-8: %q", out)
		}
		for _, r := range string(out) {
			if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) || (r >= 0x202a && r <= 0x202e) {
				t.Fatalf("control character %U survived: %q", r, out)
			}
		}
		if strings.Contains(string(out), secret) {
			t.Fatalf("the secret survived: %q", out)
		}
	})
}
