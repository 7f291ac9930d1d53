package sandbox

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestTailWriter(t *testing.T) {
	for _, chunks := range [][]string{
		{"abc"},
		{"abcdefghij"},
		{"abcdefghijklmnop"},
		{"ab", "cd", "ef", "gh", "ij", "kl"},
		{"a", "bcdefghijklmnopqrstuvwxyz", "0123"},
	} {
		w := NewTailWriter(10)
		all := ""
		for _, c := range chunks {
			n, err := w.Write([]byte(c))
			if n != len(c) || err != nil {
				t.Fatalf("Write %q: %d %v", c, n, err)
			}
			all += c
		}
		o := w.Output()
		want := all
		if len(want) > 10 {
			want = want[len(want)-10:]
		}
		if string(o.Tail) != want || o.Bytes != int64(len(all)) || o.Truncated != (len(all) > 10) {
			t.Errorf("%q: got %q %d %v, want %q", chunks, o.Tail, o.Bytes, o.Truncated, want)
		}
	}
}

func TestSanitize(t *testing.T) {
	raw := []byte("ok \x1b[31mred\x1b[0m \x1b]0;title\x07 \x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\ bell\a nul\x00 \u202eevil cr\rline\nnext\ttab \xff end")
	log := Sanitize(raw, 0, false, false)
	for _, bad := range []string{"\x1b", "\a", "\x00", "\u202e", "\r", "\n", "\t", "title"} {
		if strings.Contains(log.Text, bad) {
			t.Errorf("log text holds %q: %q", bad, log.Text)
		}
	}
	if !strings.Contains(log.Text, "red") || !strings.Contains(log.Text, "link") || !utf8.ValidString(log.Text) {
		t.Errorf("log text %q", log.Text)
	}
	model := Sanitize(raw, 0, true, false)
	if !strings.Contains(model.Text, "line\nnext\ttab") {
		t.Errorf("model text lost lines: %q", model.Text)
	}

	sec := Sanitize([]byte("a sk-proj-ABCDEFGHIJKLMNOPQRSTUVWX b ghp_abcdefghijklmnopqrstuvwxyz0123 c AKIAIOSFODNN7EXAMPLE d password=hunter22 e Bearer abcdefghijklmnopqrstuv f eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijklmnop g https://u:p4ssword@host/x"), 0, true, false)
	if sec.Redactions != 7 {
		t.Errorf("redactions %d: %q", sec.Redactions, sec.Text)
	}
	for _, s := range []string{"sk-proj-ABC", "ghp_abc", "AKIAIOSF", "hunter22", "abcdefghijklmnopqrstuv", "eyJzdWIi", "p4ssword"} {
		if strings.Contains(sec.Text, s) {
			t.Errorf("secret %q left: %q", s, sec.Text)
		}
	}
	// A secret split by an escape sequence is still caught.
	split := Sanitize([]byte("sk-ant-\x1b[0mapi03abcdefghijklmnopqrstu"), 0, true, false)
	if split.Redactions != 1 {
		t.Errorf("split secret: %q", split.Text)
	}

	tail := Sanitize([]byte(strings.Repeat("x", 100)+"THE END é"), 12, true, false)
	if !tail.Truncated || !strings.HasSuffix(tail.Text, "THE END é") || len(tail.Text) > 12 || tail.Bytes != 110 {
		t.Errorf("tail %+v", tail)
	}
	if s := Sanitize([]byte("short"), 100, true, true); !s.Truncated {
		t.Errorf("alreadyCut not carried")
	}
}

func FuzzSanitize(f *testing.F) {
	f.Add([]byte("\x1b[31mhi\x1b]0;t\x07 sk-ant-abcdefghijklmnopqrstuv\n"), 10, false)
	f.Add([]byte("\xff\xfe\x9b1m"), 3, true)
	f.Fuzz(func(t *testing.T, raw []byte, max int, keep bool) {
		if max < 0 || max > 1<<16 {
			max = 64
		}
		s := Sanitize(raw, max, keep, false)
		if !utf8.ValidString(s.Text) {
			t.Fatalf("invalid UTF-8: %q", s.Text)
		}
		if max > 0 && len(s.Text) > max {
			t.Fatalf("len %d > %d", len(s.Text), max)
		}
		for _, r := range s.Text {
			if r == 0x1b || r == '\r' || (r < 0x20 && r != '\n' && r != '\t') || (!keep && (r == '\n' || r == '\t')) || (r >= 0x80 && r < 0xa0) {
				t.Fatalf("control %U left in %q", r, s.Text)
			}
		}
		if s.Bytes != int64(len(raw)) {
			t.Fatalf("bytes %d", s.Bytes)
		}
		_ = bytes.MinRead
	})
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		code         int
		timeout, oom bool
		outcome, sig string
	}{
		{0, false, false, OutcomeOK, ""},
		{1, false, false, OutcomeNonZero, ""},
		{124, false, false, OutcomeNonZero, ""},
		{137, false, false, OutcomeKilled, "SIGKILL"},
		{137, false, true, OutcomeOOM, "SIGKILL"},
		{137, true, false, OutcomeTimeout, "SIGKILL"},
		{152, false, false, OutcomeKilled, "SIGXCPU"},
		{-1, true, false, OutcomeTimeout, ""},
	} {
		o, s := Classify(c.code, c.timeout, c.oom)
		if o != c.outcome || s != c.sig {
			t.Errorf("Classify(%d,%v,%v) = %s %s, want %s %s", c.code, c.timeout, c.oom, o, s, c.outcome, c.sig)
		}
	}
}
