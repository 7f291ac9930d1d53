package broker

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/text/unicode/norm"
	"golang.org/x/text/unicode/runenames"
)

// Limits of the approver warnings: a call's arguments are hostile input.
const (
	maxWarnings      = 8
	maxAddressTokens = 64
	maxTokenBytes    = 320
)

// addressWarnings returns, in plain words, what an approver should know
// about the addresses in a call's arguments before approving it: invisible
// or control characters, %-routing and other relaying forms, letters of
// several scripts in one name, letters that imitate others, and punycode
// that displays as something else. An address is any token with an "@" in
// a string argument, and the host of anything written as a URL. Warnings
// do not decide anything; they are shown with the approval request.
func addressWarnings(args json.RawMessage) []string {
	var v any
	if json.Unmarshal(args, &v) != nil {
		return nil
	}
	var tokens []string
	var walk func(v any)
	walk = func(v any) {
		if len(tokens) >= maxAddressTokens {
			return
		}
		switch x := v.(type) {
		case string:
			tokens = append(tokens, addressTokens(x, maxAddressTokens-len(tokens))...)
		case []any:
			for _, e := range x {
				walk(e)
			}
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys) // the warnings are recorded: same order every time
			for _, k := range keys {
				walk(x[k])
			}
		}
	}
	walk(v)
	var out []string
	for _, t := range tokens {
		for _, w := range addressProblems(t) {
			if len(out) == maxWarnings {
				return append(out[:maxWarnings-1], "and more warnings about the addresses in this call; read them character by character")
			}
			if !slices.Contains(out, w) {
				out = append(out, w)
			}
		}
	}
	return out
}

// addressTokens picks the address-like tokens of s: separated by white
// space (Unicode's, not only ASCII), commas, semicolons, angle brackets
// and quotes; those with an "@" or a "://".
func addressTokens(s string, limit int) []string {
	var out []string
	for _, t := range strings.FieldsFunc(s, func(r rune) bool {
		return r == ' ' || r == '\t' || r == ',' || r == ';' || r == '<' || r == '>' || r == '(' || r == ')' ||
			(unicode.IsSpace(r) && r != '\r' && r != '\n')
	}) {
		if len(out) == limit {
			break
		}
		if !strings.Contains(t, "@") && !strings.Contains(t, "://") {
			continue
		}
		if len(t) > maxTokenBytes {
			t = t[:maxTokenBytes]
		}
		out = append(out, strings.ToValidUTF8(t, "\uFFFD"))
	}
	return out
}

// addressProblems lists what is wrong or deceptive about one address.
func addressProblems(tok string) []string {
	var out []string
	shown := quoteShown(tok)
	if name, ok := firstInvisible(tok); ok {
		out = append(out, fmt.Sprintf("the address %s contains an invisible or control character (%s): it may not be the address it appears to be, or may add mail headers", shown, name))
	}
	host := tok
	if i := strings.Index(tok, "://"); i >= 0 {
		host = tok[i+3:]
		if j := strings.IndexAny(host, "/?#"); j >= 0 {
			host = host[:j]
		}
		if j := strings.LastIndexByte(host, '@'); j >= 0 {
			host = host[j+1:]
		}
	} else {
		at := strings.LastIndexByte(tok, '@')
		local := tok[:at]
		host = tok[at+1:]
		switch {
		case strings.Contains(local, "@"):
			out = append(out, fmt.Sprintf("the address %s contains more than one @: mail may be relayed to another host", shown))
		case strings.Contains(local, "%"):
			out = append(out, fmt.Sprintf("the address %s uses %%-routing: the part before %% may be forwarded to the host after it, not kept at %s", shown, quoteShown(host)))
		case strings.Contains(local, "!") || strings.HasPrefix(local, "@") || strings.Contains(local, ":"):
			out = append(out, fmt.Sprintf("the address %s uses an old relaying form (!, : or a source route): mail may go elsewhere", shown))
		case strings.HasPrefix(local, `"`):
			out = append(out, fmt.Sprintf("the address %s has a quoted local part, which can hide characters", shown))
		}
		if w := scriptWarning(local, tok, "mailbox name"); w != "" {
			out = append(out, w)
		}
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	for _, label := range strings.Split(host, ".") {
		if w := scriptWarning(label, tok, "domain"); w != "" {
			out = append(out, w)
			break
		}
	}
	if strings.Contains(host, "xn--") {
		if u, err := idna.Punycode.ToUnicode(host); err == nil && u != host {
			w := fmt.Sprintf("the domain %s is written in punycode and displays as %s", quoteShown(host), quoteShown(u))
			for _, label := range strings.Split(u, ".") {
				if sw := scriptWarning(label, u, "domain"); sw != "" {
					w += "; " + sw
					break
				}
			}
			out = append(out, w)
		}
	}
	return out
}

// scriptWarning explains a name that mixes scripts, uses compatibility
// forms (fullwidth letters, say), or is made of letters that imitate
// Latin ones; "" for a plain name.
func scriptWarning(name, whole, what string) string {
	if name == "" {
		return ""
	}
	scripts := map[string]bool{}
	var order []string
	var odd rune // the first letter of the second script
	for _, r := range name {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) {
			continue
		}
		s := scriptOf(r)
		if s == "" || s == "Common" || s == "Inherited" {
			continue
		}
		if !scripts[s] {
			scripts[s] = true
			order = append(order, s)
			if len(order) == 2 {
				odd = r
			}
		}
	}
	shown := quoteShown(whole)
	if len(order) > 1 {
		return fmt.Sprintf("the %s in %s mixes %s letters (%s): it may imitate another address", what, shown, joinWords(order), describeRune(odd))
	}
	if folded := norm.NFKC.String(name); folded != name {
		return fmt.Sprintf("the %s in %s uses special forms of characters that read as %s: it may imitate another address", what, shown, quoteShown(folded))
	}
	if skel, ok := latinSkeleton(name); ok && skel != name {
		return fmt.Sprintf("the %s in %s is written in %s letters that look like the Latin %s: it is not the same address", what, shown, joinWords(order), quoteShown(skel))
	}
	return ""
}

// latinSkeleton maps letters that look like Latin ones to those; ok is
// false if name has a non-ASCII letter with no Latin twin.
func latinSkeleton(name string) (string, bool) {
	var b strings.Builder
	changed := false
	for _, r := range name {
		if r < utf8.RuneSelf {
			b.WriteRune(r)
			continue
		}
		l, ok := latinTwin[unicode.ToLower(r)]
		if !ok {
			return "", false
		}
		b.WriteRune(l)
		changed = true
	}
	return b.String(), changed
}

// latinTwin lists lower-case letters of other scripts that render like a
// Latin letter in common fonts (a subset of Unicode's confusables).
var latinTwin = map[rune]rune{
	// Cyrillic
	'а': 'a', 'в': 'b', 'с': 'c', 'ԁ': 'd', 'е': 'e', 'һ': 'h', 'і': 'i', 'ј': 'j', 'к': 'k', 'ӏ': 'l', 'м': 'm', 'п': 'n',
	'о': 'o', 'р': 'p', 'ԛ': 'q', 'г': 'r', 'ѕ': 's', 'т': 't', 'ԝ': 'w', 'х': 'x', 'у': 'y', 'ᴢ': 'z',
	// Greek
	'α': 'a', 'β': 'b', 'ε': 'e', 'η': 'n', 'ι': 'i', 'κ': 'k', 'ο': 'o', 'ρ': 'p', 'τ': 't', 'υ': 'u', 'ν': 'v', 'χ': 'x', 'γ': 'y',
	// Armenian
	'օ': 'o', 'ս': 'u', 'հ': 'h', 'ց': 'g', 'ք': 'p',
}

// scriptOf names the Unicode script of r ("" if none is known).
func scriptOf(r rune) string {
	for _, name := range commonScripts {
		if unicode.Is(unicode.Scripts[name], r) {
			return name
		}
	}
	for _, name := range allScripts {
		if unicode.Is(unicode.Scripts[name], r) {
			return name
		}
	}
	return ""
}

// commonScripts are tried first: the scripts look-alike domains are made of.
var commonScripts = []string{"Latin", "Common", "Inherited", "Cyrillic", "Greek", "Armenian", "Cherokee", "Georgian"}

// allScripts is every script Go knows, in a fixed order.
var allScripts = func() []string {
	out := make([]string, 0, len(unicode.Scripts))
	for name := range unicode.Scripts {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}()

// firstInvisible finds a character that does not show as itself: a
// control character (a CR or LF starts a new mail header), a format
// character (zero-width space and joiners, bidirectional controls, soft
// hyphen), a space other than U+0020, or a combining mark.
func firstInvisible(s string) (string, bool) {
	for _, r := range s {
		if r == utf8.RuneError || unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.Is(unicode.Mn, r) ||
			(r != ' ' && (unicode.IsSpace(r) || unicode.Is(unicode.Zs, r))) {
			return describeRune(r), true
		}
	}
	return "", false
}

func describeRune(r rune) string {
	name := runenames.Name(r)
	if name == "" || name == "<control>" {
		switch r {
		case '\r':
			name = "CARRIAGE RETURN"
		case '\n':
			name = "LINE FEED"
		default:
			name = "CONTROL CHARACTER"
		}
	}
	return fmt.Sprintf("U+%04X %s", r, name)
}

// quoteShown quotes s for a warning with every character that would not
// show (control, format, invisible) escaped, so the approver sees what is
// there; letters of other scripts stay as they look, and the warning names
// them.
func quoteShown(s string) string {
	return fmt.Sprintf("%q", s)
}

func joinWords(ws []string) string {
	switch len(ws) {
	case 0:
		return ""
	case 1:
		return ws[0]
	}
	return strings.Join(ws[:len(ws)-1], ", ") + " and " + ws[len(ws)-1]
}
