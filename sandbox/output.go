package sandbox

import (
	"bytes"
	"io"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// TailWriter counts everything written to it and keeps only the last Max
// bytes. It never fails a write, so a program printing 100 MB is drained at
// pipe speed instead of blocking. Safe for concurrent use.
type TailWriter struct {
	Max int

	mu    sync.Mutex
	buf   []byte // ring of len Max once full
	start int    // index of the oldest byte when full
	full  bool
	total int64
}

// NewTailWriter keeps the last max bytes (at least 1).
func NewTailWriter(max int) *TailWriter {
	if max < 1 {
		max = 1
	}
	return &TailWriter{Max: max}
}

// Write implements io.Writer.
func (w *TailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	w.total += int64(n)
	if len(p) >= w.Max {
		w.buf = append(w.buf[:0], p[len(p)-w.Max:]...)
		w.start, w.full = 0, true
		return n, nil
	}
	if !w.full {
		room := w.Max - len(w.buf)
		if len(p) <= room {
			w.buf = append(w.buf, p...)
			if len(w.buf) == w.Max {
				w.full = true
			}
			return n, nil
		}
		w.buf = append(w.buf, p[:room]...)
		p = p[room:]
		w.full = true
	}
	for len(p) > 0 {
		c := copy(w.buf[w.start:], p)
		p = p[c:]
		w.start = (w.start + c) % w.Max
	}
	return n, nil
}

// Output returns the kept tail, the total count and whether bytes were
// dropped.
func (w *TailWriter) Output() Output {
	w.mu.Lock()
	defer w.mu.Unlock()
	var tail []byte
	if w.full {
		tail = make([]byte, 0, w.Max)
		tail = append(tail, w.buf[w.start:]...)
		tail = append(tail, w.buf[:w.start]...)
	} else {
		tail = bytes.Clone(w.buf)
	}
	return Output{Tail: tail, Bytes: w.total, Truncated: w.total > int64(len(tail))}
}

var _ io.Writer = (*TailWriter)(nil)

// Secret shapes redacted from output bound for a model or a log. Matching
// is on the text as printed; a secret split by a control character is
// caught after controls are stripped, because redaction runs last.
var secretPatterns = []*regexp.Regexp{
	regexp.MustCompile(`sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}`),                          // Anthropic and OpenAI keys
	regexp.MustCompile(`gh[pousr]_[A-Za-z0-9]{20,}`),                                    // GitHub tokens
	regexp.MustCompile(`github_pat_[A-Za-z0-9_]{20,}`),                                  // GitHub fine-grained tokens
	regexp.MustCompile(`(?:AKIA|ASIA)[0-9A-Z]{16}`),                                     // AWS access key ids
	regexp.MustCompile(`xox[abprs]-[A-Za-z0-9-]{10,}`),                                  // Slack tokens
	regexp.MustCompile(`AIza[0-9A-Za-z_-]{35}`),                                         // Google API keys
	regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`), // JWTs
	regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(?:-----END [A-Z ]*PRIVATE KEY-----|$)`),
	regexp.MustCompile(`(?i)\b(?:password|passwd|secret|api[_-]?key|access[_-]?token|auth[_-]?token)\s*[=:]\s*["']?[^\s"']{6,}`),
	regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9._~+/-]{16,}=*`),
	regexp.MustCompile(`(?i)\b[a-z][a-z0-9+.-]*://[^\s:/@]+:[^\s@/]+@`), // credentials in URLs
}

// Redacted replaces every secret Sanitize finds.
const Redacted = "[redacted]"

// Sanitized is text made safe to show a model or write to a log.
type Sanitized struct {
	Text string `json:"text"`
	// Bytes is the length of the raw input, before anything was cut.
	Bytes int64 `json:"bytes"`
	// Truncated is set when the head was dropped to keep the tail.
	Truncated bool `json:"truncated,omitempty"`
	// Redactions counts secrets replaced.
	Redactions int `json:"redactions,omitempty"`
	// Stripped counts control characters and escape sequences removed.
	Stripped int `json:"stripped,omitempty"`
}

// Sanitize makes raw output safe for a model or a log: ANSI escape
// sequences and control characters (except newline and tab when keepLines
// is set) are removed, invalid UTF-8 is replaced, secrets are redacted, and
// only the last max bytes are kept, cut at a character boundary; Truncated
// then says so. A log line gets keepLines false, so output cannot forge a
// line of its own. alreadyCut says the caller received only a tail (its
// total was larger), and is carried into Truncated.
func Sanitize(raw []byte, max int, keepLines, alreadyCut bool) Sanitized {
	s := Sanitized{Bytes: int64(len(raw)), Truncated: alreadyCut}
	var b strings.Builder
	b.Grow(len(raw))
	for i := 0; i < len(raw); {
		c := raw[i]
		if c == 0x1b { // ESC: drop the whole escape sequence
			i = skipEscape(raw, i)
			s.Stripped++
			continue
		}
		r, size := utf8.DecodeRune(raw[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteRune(utf8.RuneError)
		case r == '\n' || r == '\t':
			if keepLines {
				b.WriteRune(r)
			} else {
				b.WriteByte(' ')
				s.Stripped++
			}
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			// C0, DEL and C1 controls (C1 includes the 8-bit CSI).
			s.Stripped++
		case r == '\u2028' || r == '\u2029' || r == '\u202e' || r == '\u2066' || r == '\u2067' || r == '\u2068' || r == '\u2069' || r == '\u202d':
			// Line separators and bidi overrides that reorder what a reader sees.
			s.Stripped++
		default:
			b.WriteString(string(raw[i : i+size]))
		}
		i += size
	}
	text := b.String()
	for _, re := range secretPatterns {
		text = re.ReplaceAllStringFunc(text, func(string) string {
			s.Redactions++
			return Redacted
		})
	}
	if max > 0 && len(text) > max {
		cut := len(text) - max
		for cut < len(text) && !utf8.RuneStart(text[cut]) {
			cut++
		}
		text = text[cut:]
		s.Truncated = true
	}
	s.Text = text
	return s
}

// skipEscape returns the index after the escape sequence starting at i
// (raw[i] is ESC): CSI (ESC [ ... final), OSC (ESC ] ... BEL or ESC \),
// DCS/SOS/PM/APC (ESC P|X|^|_ ... ESC \), or a two-byte sequence.
func skipEscape(raw []byte, i int) int {
	i++
	if i >= len(raw) {
		return i
	}
	switch raw[i] {
	case '[':
		i++
		for i < len(raw) {
			c := raw[i]
			i++
			if c >= 0x40 && c <= 0x7e {
				return i
			}
		}
		return i
	case ']', 'P', 'X', '^', '_':
		i++
		for i < len(raw) {
			if raw[i] == 0x07 {
				return i + 1
			}
			if raw[i] == 0x1b && i+1 < len(raw) && raw[i+1] == '\\' {
				return i + 2
			}
			i++
		}
		return i
	default:
		return i + 1
	}
}
