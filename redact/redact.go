// Package redact makes text from tools, sandboxes and errors safe to store,
// show to a model, print on a terminal or attach to a span. It does three
// things, and reports each:
//
//   - removes secrets: known shapes (private keys, JWTs, cloud access keys,
//     AWS secret keys labelled, next to their key id or alone on a line,
//     GitHub, OpenAI-style, Slack, Stripe and Google keys, bearer and basic
//     credentials, key=value secrets, passwords in URLs, agentplane's own
//     call credentials) and the exact values a Redactor is given, such as
//     the credentials the secrets broker holds, also in their common
//     encodings (base64, hex, percent-encoding, reversed; see Encodings);
//   - strips control characters, ANSI and other terminal escape sequences,
//     and bidirectional-override characters (newlines and tabs stay in
//     multi-line text; a carriage return becomes a newline), and replaces
//     invalid UTF-8;
//   - bounds the size, measuring the input's byte count before anything is
//     cut and flagging the cut.
//
// Output is JSON-aware: when a tool result is valid JSON, each string in it
// (keys included) is cleaned after JSON unescaping, so "\u001b[31m" and a
// key split by escapes are caught, and the result stays valid JSON unless it
// has to be truncated.
//
// Redaction is a last line of defence, not the control: credentials are
// attached after the model has proposed a call and are never in the model's
// context to begin with. Shapes are matched conservatively, so a redacted
// value is sometimes not a secret; exact values shorter than MinExactLen are
// not matched (they would match ordinary text).
package redact

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode/utf8"
)

// MinExactLen is the shortest exact value a Redactor removes.
const MinExactLen = 8

// Report says what cleaning one payload did.
type Report struct {
	// Bytes is the size of the input, measured before anything was
	// removed or cut.
	Bytes int64
	// Truncated is set when the result was cut to the size bound.
	Truncated bool
	// Redactions counts secrets replaced.
	Redactions int
	// Stripped counts control characters and escape sequences removed.
	Stripped int
}

// Redactor removes secret shapes and a fixed set of exact values. The zero
// value and nil remove shapes only. A Redactor is immutable and safe for
// concurrent use.
type Redactor struct {
	values []string // as given, for With
	exact  []string // every encoding of every value, longest first
}

// shortest is the length of the shortest exact form (text shorter than it
// holds none).
func (r *Redactor) shortest() int { return len(r.exact[len(r.exact)-1]) }

// New returns a Redactor that also removes each of exact, in the forms a
// tool or a library commonly writes a credential in (see Encodings).
// Values shorter than MinExactLen are ignored, and so is any encoded form
// shorter than that.
func New(exact ...string) *Redactor {
	r := &Redactor{}
	seen := map[string]bool{}
	for _, e := range exact {
		if len(e) < MinExactLen || slices.Contains(r.values, e) {
			continue
		}
		r.values = append(r.values, e)
		for _, v := range Encodings(e) {
			if len(v) >= MinExactLen && !seen[v] {
				seen[v] = true
				r.exact = append(r.exact, v)
			}
		}
	}
	// Longest first: a whole padded encoding goes before the part of it
	// that is also the value's encoding inside a longer string.
	sort.SliceStable(r.exact, func(i, j int) bool { return len(r.exact[i]) > len(r.exact[j]) })
	return r
}

// With returns a Redactor that removes r's values and exact too.
func (r *Redactor) With(exact ...string) *Redactor {
	if r == nil {
		return New(exact...)
	}
	return New(append(append([]string(nil), r.values...), exact...)...)
}

// Encodings returns the forms of a secret value that are removed with it:
// the value itself; base64 in the standard and URL alphabets, padded and
// unpadded, and — for each of the three byte alignments it can take inside
// a longer base64 string (base64("user:" + value), a JSON blob encoded
// whole) — the run of characters that only the value's bytes determine;
// hex in lower and upper case; percent-encoding (query and path forms,
// when they differ); and the value reversed.
func Encodings(v string) []string {
	out := []string{v}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
		whole := enc.EncodeToString([]byte(v))
		out = append(out, whole, strings.TrimRight(whole, "="))
		for k := 0; k < 3; k++ {
			// Characters i of the encoding of k filler bytes + v cover
			// bits [6i, 6i+6); the value owns bits [8k, 8k+8n).
			e := enc.EncodeToString(append(make([]byte, k), v...))
			start, end := (8*k+5)/6, (8*k+8*len(v))/6
			if start < end && end <= len(e) {
				out = append(out, e[start:end])
			}
		}
	}
	h := hex.EncodeToString([]byte(v))
	out = append(out, h, strings.ToUpper(h))
	if q := url.QueryEscape(v); q != v {
		out = append(out, q)
	}
	if p := url.PathEscape(v); p != v {
		out = append(out, p)
	}
	rs := []rune(v)
	slices.Reverse(rs)
	out = append(out, string(rs))
	return out
}

// Placeholder is what a removed secret becomes: [REDACTED:kind].
func Placeholder(kind string) string { return "[REDACTED:" + kind + "]" }

type shape struct {
	kind string
	re   *regexp.Regexp
	// group, when > 0, is the submatch that is the secret (the first
	// that took part, counting from group); the rest of the match (a
	// label such as "Bearer ") is kept.
	group int
	// hints are lower-case substrings of which every match contains
	// one; they are checked first so that most text skips the
	// expression entirely. None means always run it.
	hints []string
	// minLen skips text shorter than any match.
	minLen int
	// keep, when set, decides whether a match of the secret s[start:end]
	// is one (for shapes a pattern alone cannot tell from ordinary text).
	keep func(s string, start, end int) bool
}

var shapes = []shape{
	{kind: "private_key", hints: []string{"private key"},
		re: regexp.MustCompile(`-----BEGIN[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----(?s:.*?)(?:-----END[A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----|\z)`)},
	{kind: "agentplane_credential", hints: []string{"apc1."},
		re: regexp.MustCompile(`apc1\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)},
	{kind: "jwt", hints: []string{"eyj"},
		re: regexp.MustCompile(`eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}(?:\.[A-Za-z0-9_-]*)?`)},
	{kind: "aws_access_key_id", hints: []string{"akia", "asia", "agpa", "aida", "aroa", "aipa", "anpa", "anva", "abia", "acca"},
		re: regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|ABIA|ACCA)[0-9A-Z]{16}\b`)},
	{kind: "aws_secret_access_key", hints: []string{"secret"}, group: 1,
		re: regexp.MustCompile(`(?i)aws_?secret(?:_?access)?_?key["']?\s*[:=]\s*["']?([A-Za-z0-9/+=]{40})`)},
	// A bare AWS secret access key: 40 characters of the base64 alphabet
	// without padding, standing alone as a token. Alone it looks like much
	// else, so it counts only with mixed case and either an access key id
	// near it or nothing else on its line (see bareAWSSecret).
	{kind: "aws_secret_access_key", group: 1, minLen: 40, keep: bareAWSSecret,
		re: regexp.MustCompile(`(?:^|[^A-Za-z0-9/+_.\-])([A-Za-z0-9/+]{40})(?:$|[^A-Za-z0-9/+=_\-])`)},
	{kind: "github_token", hints: []string{"gh", "github_pat_"},
		re: regexp.MustCompile(`\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{22,})`)},
	{kind: "api_key", hints: []string{"sk", "rk", "pk_"},
		re: regexp.MustCompile(`\b(?:sk|rk)-[A-Za-z0-9_-]{16,}|\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}`)},
	{kind: "slack_token", hints: []string{"xox"},
		re: regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}`)},
	{kind: "google_api_key", hints: []string{"aiza"},
		re: regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}`)},
	{kind: "bearer_token", hints: []string{"bearer"}, group: 1,
		re: regexp.MustCompile(`(?i)\bbearer\s+([A-Za-z0-9._~+/=-]{12,})`)},
	{kind: "basic_credential", hints: []string{"basic"}, group: 1,
		re: regexp.MustCompile(`(?i)authorization["']?\s*[:=]\s*["']?basic\s+([A-Za-z0-9+/=]{8,})`)},
	{kind: "url_password", hints: []string{"://"}, group: 1,
		re: regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@"'<>]+:([^\s@/"'<>]+)@`)},
	{kind: "secret_value", hints: []string{"key", "secret", "pass", "pwd", "token"}, group: 1,
		re: regexp.MustCompile(`(?i)\b(?:api[_-]?key|apikey|secret[_-]?key|client[_-]?secret|secret|password|passwd|pwd|access[_-]?token|auth[_-]?token|refresh[_-]?token|private[_-]?key|token)["']?\s*[:=]\s*(?:"([^"\n]{4,})"|'([^'\n]{4,})'|([^\s"',;{}\[\]]{8,}))`)},
}

// String removes secrets from s and returns the result and how many it
// removed. It does not strip control characters.
func (r *Redactor) String(s string) (string, int) {
	n := 0
	if r != nil && len(r.exact) > 0 && len(s) >= r.shortest() {
		for _, e := range r.exact {
			if c := strings.Count(s, e); c > 0 {
				s = strings.ReplaceAll(s, e, Placeholder("credential"))
				n += c
			}
		}
	}
	lower := ""
	for _, sh := range shapes {
		if len(s) < sh.minLen {
			continue
		}
		if len(sh.hints) > 0 {
			if lower == "" {
				lower = asciiLower(s)
			}
			if !containsAny(lower, sh.hints) {
				continue
			}
		}
		locs := sh.re.FindAllStringSubmatchIndex(s, -1)
		if len(locs) == 0 {
			continue
		}
		var b strings.Builder
		last := 0
		for _, loc := range locs {
			start, end := loc[0], loc[1]
			if sh.group > 0 {
				start = -1
				for g := sh.group; 2*g+1 < len(loc); g++ {
					if loc[2*g] >= 0 {
						start, end = loc[2*g], loc[2*g+1]
						break
					}
				}
				if start < 0 {
					continue
				}
			}
			if strings.HasPrefix(s[start:], "[REDACTED:") {
				continue // a placeholder left by an earlier shape
			}
			if sh.keep != nil && !sh.keep(s, start, end) {
				continue
			}
			b.WriteString(s[last:start])
			b.WriteString(Placeholder(sh.kind))
			last = end
			n++
		}
		b.WriteString(s[last:])
		s = b.String()
		lower = ""
	}
	return s, n
}

// awsKeyID finds an AWS access key id, as written or as already redacted.
var awsKeyID = regexp.MustCompile(`\b(?:AKIA|ASIA)[0-9A-Z]{16}\b|\[REDACTED:aws_access_key_id\]`)

// awsNear is how far from an access key id (in bytes, either side) a
// 40-character token is taken for its secret key.
const awsNear = 256

// bareAWSSecret decides whether the 40-character token s[start:end] is an
// AWS secret access key. It must mix upper and lower case (a git commit id
// and other hex digests do not; 40 random characters of that alphabet do
// but for a chance of about 1e-9). Then it counts when an access key id is
// within awsNear bytes, or when it is alone on its line (quotes, spaces
// and closing punctuation aside) and also holds a digit and looks random:
// a Shannon entropy of at least 4.3 bits per character, which about 3 in
// 10,000 random keys fall below and a path or a CamelCase name usually
// does. A bare key inside prose with neither is not recognised; a
// labelled one is (aws_secret_access_key=..., secret: ...).
func bareAWSSecret(s string, start, end int) bool {
	tok := s[start:end]
	if !strings.ContainsFunc(tok, isUpper) || !strings.ContainsFunc(tok, isLower) {
		return false
	}
	if loc := awsKeyID.FindStringIndex(s[max(0, start-awsNear):min(len(s), end+awsNear)]); loc != nil {
		return true
	}
	ls := strings.LastIndexByte(s[:start], '\n') + 1
	le := strings.IndexByte(s[end:], '\n')
	if le < 0 {
		le = len(s)
	} else {
		le += end
	}
	const around = " \t\r\"'`"
	if strings.Trim(s[ls:start], around) != "" || strings.TrimRight(s[end:le], around+".,;:)]}") != "" {
		return false
	}
	return strings.ContainsFunc(tok, func(r rune) bool { return r >= '0' && r <= '9' }) && entropy(tok) >= 4.3
}

func isUpper(r rune) bool { return r >= 'A' && r <= 'Z' }
func isLower(r rune) bool { return r >= 'a' && r <= 'z' }

// entropy is the Shannon entropy of s's bytes, in bits per byte.
func entropy(s string) float64 {
	var counts [256]int
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / float64(len(s))
			h -= p * math.Log2(p)
		}
	}
	return h
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// secretKey reports whether a JSON object key names a secret, so that its
// string value is removed whatever its shape.
func secretKey(k string) bool {
	var b strings.Builder
	for _, c := range asciiLower(k) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	n := b.String()
	for _, w := range []string{"password", "passwd", "secret", "apikey", "token", "privatekey", "authorization", "credential", "cookie"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// TextOptions shape Text's result.
type TextOptions struct {
	// MaxBytes bounds the result (0: no bound). A cut result ends with a
	// marker, and the marker counts towards the bound.
	MaxBytes int
	// KeepNewlines keeps \n and \t; otherwise every control character
	// becomes a space (for one-line values such as span attributes).
	KeepNewlines bool
	// Tail keeps the end instead of the beginning when cutting: the
	// useful part of a failure is usually its last lines.
	Tail bool
}

// Text cleans free text (sandbox output, an error message): secrets out,
// control characters and escape sequences out, size bounded.
func (r *Redactor) Text(s string, o TextOptions) (string, Report) {
	rep := Report{Bytes: int64(len(s))}
	s, rep.Stripped = Sanitize(s, o.KeepNewlines)
	s, rep.Redactions = r.String(s)
	if o.MaxBytes > 0 && len(s) > o.MaxBytes {
		rep.Truncated = true
		s = cut(s, o.MaxBytes, o.Tail)
	}
	return s, rep
}

// Output cleans a tool result for the event log, the blob store and the
// model. Valid JSON stays JSON: every string in it is cleaned as Text
// cleans multi-line text. Anything else is cleaned as text. A result
// longer than maxBytes (0: no bound) is cut, at a UTF-8 boundary, with a
// marker, and is then no longer JSON; the report says so.
func (r *Redactor) Output(data []byte, maxBytes int) ([]byte, Report) {
	rep := Report{Bytes: int64(len(data))}
	// Cleaning never needs more than the bound plus the longest secret
	// that can straddle it, so a huge result is cut early (bounded work);
	// the final cut below removes anything left at that edge.
	const slack = 64 << 10
	if maxBytes > 0 && len(data) > 4*maxBytes+slack {
		data = data[:4*maxBytes+slack]
		rep.Truncated = true
	}
	var out []byte
	if !rep.Truncated && json.Valid(data) {
		out = r.cleanJSON(data, &rep)
	} else {
		s, tr := r.Text(string(data), TextOptions{KeepNewlines: true})
		out = []byte(s)
		rep.Redactions, rep.Stripped = tr.Redactions, tr.Stripped
	}
	if maxBytes > 0 && len(out) > maxBytes {
		rep.Truncated = true
		out = []byte(cut(string(out), maxBytes, false))
	} else if rep.Truncated {
		out = append(out, truncMarker...)
	}
	return out, rep
}

// cleanJSON rewrites every string literal of valid JSON, copying
// everything else; structural carriage returns are dropped. A string value
// under a key that names a secret (password, api_key, token, ...) is
// removed whatever it looks like.
func (r *Redactor) cleanJSON(data []byte, rep *Report) []byte {
	var out bytes.Buffer
	out.Grow(len(data))
	var (
		prev      byte // last structural byte seen
		secretVal bool // the last key named a secret
	)
	for i := 0; i < len(data); {
		c := data[i]
		if c == '\r' {
			i++
			continue
		}
		if c != '"' {
			out.WriteByte(c)
			if c != ' ' && c != '\n' && c != '\t' {
				if c != ':' {
					secretVal = false
				}
				prev = c
			}
			i++
			continue
		}
		j := i + 1
		plain := true
		for data[j] != '"' {
			if data[j] == '\\' {
				plain = false
				j++
			} else if data[j] >= 0x80 || data[j] == 0x7f {
				plain = false
			}
			j++
		}
		lit := data[i : j+1]
		i = j + 1
		var s string
		if plain {
			s = string(lit[1 : len(lit)-1])
		} else if err := json.Unmarshal(lit, &s); err != nil {
			out.Write(lit) // unreachable: the input is valid JSON
			continue
		}
		isValue := prev == ':'
		isKey := !isValue && nextIsColon(data[i:])
		prev = '"'
		if isValue && secretVal && s != "" && !strings.HasPrefix(s, "[REDACTED:") {
			secretVal = false
			rep.Redactions++
			writeJSONString(&out, Placeholder("secret_value"))
			continue
		}
		secretVal = isKey && secretKey(s)
		clean, stripped := Sanitize(s, true)
		clean, n := r.String(clean)
		rep.Stripped += stripped
		rep.Redactions += n
		if clean == s && plain {
			out.Write(lit)
			continue
		}
		writeJSONString(&out, clean)
	}
	return out.Bytes()
}

func nextIsColon(rest []byte) bool {
	for _, c := range rest {
		switch c {
		case ' ', '\n', '\t', '\r':
			continue
		case ':':
			return true
		default:
			return false
		}
	}
	return false
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s)       // a string always encodes
	b.Truncate(b.Len() - 1) // Encode's newline
}

const truncMarker = "…[truncated]"

// cut shortens s to at most n bytes including the marker, at a UTF-8
// boundary, keeping the head (or the tail).
func cut(s string, n int, tail bool) string {
	keep := n - len(truncMarker)
	if keep <= 0 {
		return truncMarker[:min(n, len(truncMarker))]
	}
	if tail {
		start := len(s) - keep
		for start < len(s) && !utf8.RuneStart(s[start]) {
			start++
		}
		return truncMarker + s[start:]
	}
	end := keep
	for end > 0 && !utf8.RuneStart(s[end]) {
		end--
	}
	return s[:end] + truncMarker
}

// Sanitize removes control characters, terminal escape sequences (CSI,
// OSC, DCS and the like) and bidirectional overrides, and replaces invalid
// UTF-8 with U+FFFD. With keepNewlines, \n and \t stay and a carriage
// return (or \r\n, U+2028, U+2029) becomes \n; without it, every one of
// them becomes a space. It returns the result and how many characters or
// sequences it removed or replaced.
func Sanitize(s string, keepNewlines bool) (string, int) {
	if clean(s, keepNewlines) {
		return s, 0
	}
	var b strings.Builder
	b.Grow(len(s))
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteRune(utf8.RuneError)
			n++
			i += max(size, 1)
			continue
		case r == 0x1b || r == 0x9b || r == 0x9d || r == 0x90:
			i += escapeLen(s[i:])
			n++
			continue
		case r == '\n' || r == '\t':
			if keepNewlines {
				b.WriteRune(r)
			} else {
				b.WriteByte(' ')
				n++
			}
		case r == '\r' || r == 0x2028 || r == 0x2029:
			if r == '\r' && strings.HasPrefix(s[i+size:], "\n") {
				n++ // \r\n is one newline
				i += size
				continue
			}
			if keepNewlines {
				b.WriteByte('\n')
			} else {
				b.WriteByte(' ')
			}
			n++
		case r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0:
			n++
		case r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c:
			n++ // bidirectional controls can reorder what a reader sees
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String(), n
}

// clean reports whether s needs no change (the common case, checked fast).
func clean(s string, keepNewlines bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x80 {
			// Slow path for non-ASCII: invalid UTF-8, C1 controls,
			// bidi controls and line separators.
			for _, r := range s[i:] {
				if r == utf8.RuneError || r >= 0x80 && r < 0xa0 || r >= 0x202a && r <= 0x202e ||
					r >= 0x2066 && r <= 0x2069 || r == 0x200e || r == 0x200f || r == 0x061c || r == 0x2028 || r == 0x2029 ||
					r < 0x20 && !(keepNewlines && (r == '\n' || r == '\t')) || r == 0x7f {
					return false
				}
			}
			return utf8.ValidString(s[i:])
		}
		if c < 0x20 || c == 0x7f {
			if keepNewlines && (c == '\n' || c == '\t') {
				continue
			}
			return false
		}
	}
	return true
}

// escapeLen returns the length of the escape sequence at the start of s
// (which begins with ESC or a C1 introducer), at least the introducer.
func escapeLen(s string) int {
	intro, size := utf8.DecodeRuneInString(s)
	i := size
	kind := intro
	if intro == 0x1b {
		if i >= len(s) {
			return i
		}
		switch s[i] {
		case '[':
			kind = 0x9b
		case ']':
			kind = 0x9d
		case 'P', 'X', '^', '_':
			kind = 0x90
		default:
			// Two-character escapes (ESC c, ESC 7, ESC ( B ...).
			if s[i] >= 0x20 && s[i] <= 0x2f && i+1 < len(s) {
				return i + 2
			}
			return i + 1
		}
		i++
	}
	switch kind {
	case 0x9b: // CSI: parameters and intermediates, then a final byte.
		for i < len(s) {
			c := s[i]
			i++
			if c >= 0x40 && c <= 0x7e {
				return i
			}
			if c < 0x20 || c > 0x3f && c < 0x40 {
				return i
			}
		}
		return i
	default: // OSC, DCS, SOS, PM, APC: up to BEL or ST (ESC \ or 0x9c).
		for i < len(s) {
			if s[i] == 0x07 {
				return i + 1
			}
			if s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
			if strings.HasPrefix(s[i:], "\u009c") {
				return i + len("\u009c")
			}
			i++
		}
		return i
	}
}

// Error cleans an error message for a log line or a model: one line,
// secrets removed, at most 1 KiB.
func (r *Redactor) Error(err error) string {
	if err == nil {
		return ""
	}
	s, _ := r.Text(err.Error(), TextOptions{MaxBytes: 1024})
	return s
}

// Attr cleans a value for a span attribute: one line, secrets removed, at
// most maxBytes, keeping the tail when tail is set. It returns the value
// and whether it was cut.
func (r *Redactor) Attr(s string, maxBytes int, tail bool) (string, bool) {
	out, rep := r.Text(s, TextOptions{MaxBytes: maxBytes, Tail: tail})
	return out, rep.Truncated
}

// String on a report, for logs.
func (rep Report) String() string {
	return fmt.Sprintf("bytes=%d truncated=%v redactions=%d stripped=%d", rep.Bytes, rep.Truncated, rep.Redactions, rep.Stripped)
}
