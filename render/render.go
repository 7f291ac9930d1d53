// Package render neutralises model text for display. Whatever shows a
// model's words to a person or hands them to a markdown renderer — the
// CLI's timeline, `agentplane trace`, the API with ?render=safe — passes
// them through a Policy first, so that text a model was steered into
// writing cannot make a viewer fetch or follow a URL carrying data:
//
//   - every image (markdown inline, reference-style and shortcut images,
//     HTML <img>, <picture>, <video> and the like) is replaced by a visible
//     marker naming its domain: an image is fetched the moment it is
//     rendered, so its URL is an exfiltration channel whatever the domain;
//   - a link (inline, reference-style, reference definition, autolink,
//     bare URL, www. autolink, HTML <a>) stays a link only when it is http
//     or https to a domain on the tenant's list, or a subdomain of one;
//     any other becomes inert text naming its domain;
//   - other raw HTML that could fetch or act (tags with attributes, and
//     script, style, iframe, form, meta, ...) is replaced by a marker;
//   - bidirectional controls (U+202A-U+202E, U+2066-U+2069, U+200E,
//     U+200F, U+061C) and other invisible format characters (zero-width
//     spaces and joiners, tag characters, the byte order mark, variation
//     selectors beyond U+FE0F) are made visible as ⟨U+XXXX⟩ rather than
//     removed, so a reader sees them and removing one cannot join the text
//     around it into new markup.
//
// Domains are compared in their ASCII (punycode) form and named that way,
// so a look-alike such as a Cyrillic "а" in "bаnk.example" is neither
// taken for the listed domain nor shown as if it were. Markers name the
// registrable domain (evil.example, not data.evil.example), so data put in
// a subdomain is not shown either, and use ⟦ ⟧, which no markdown or HTML
// renderer reads as markup.
//
// Each construct neutralised is reported as a Flag. The stored log keeps a
// model's exact bytes (it is the audit record, hash-chained); this package
// works only on copies, at render and export.
package render

import (
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
	"golang.org/x/net/publicsuffix"
)

// Flag names one kind of construct a Policy neutralised.
type Flag string

// The flags, as they appear in run attributes (output_flags) and events.
const (
	// FlagRemoteImage: an image was removed.
	FlagRemoteImage Flag = "remote_image"
	// FlagUnlistedLink: a link to a domain not on the list (or not http
	// or https) was made inert.
	FlagUnlistedLink Flag = "unlisted_link"
	// FlagHTML: raw HTML that could fetch or act was removed.
	FlagHTML Flag = "html"
	// FlagBidi: a bidirectional control character was made visible.
	FlagBidi Flag = "bidi"
	// FlagInvisible: another invisible format character was made visible.
	FlagInvisible Flag = "invisible"
	// FlagIDNDomain: a neutralised URL named an internationalised (non-
	// ASCII or punycode) domain, the usual form of a look-alike.
	FlagIDNDomain Flag = "idn_domain"
)

// Flags is a set of flags.
type Flags map[Flag]bool

// Add puts every flag of o into f.
func (f Flags) Add(o Flags) {
	for k, v := range o {
		if v {
			f[k] = true
		}
	}
}

// Names lists the flags, sorted (never nil, so it encodes as []).
func (f Flags) Names() []string {
	out := []string{}
	for k, v := range f {
		if v {
			out = append(out, string(k))
		}
	}
	sort.Strings(out)
	return out
}

// MaxDomains bounds a tenant's list of link domains.
const MaxDomains = 100

// Policy says which link domains a tenant's viewers may follow. The zero
// Policy lists none: every link is inert. A Policy is immutable and safe
// for concurrent use.
type Policy struct {
	domains []string // ASCII, lower case
}

// NewPolicy returns the policy listing domains (see NormalizeDomains).
func NewPolicy(domains []string) (*Policy, error) {
	ds, err := NormalizeDomains(domains)
	if err != nil {
		return nil, err
	}
	return &Policy{domains: ds}, nil
}

var reLabel = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// NormalizeDomains validates a list of link domains and returns it in
// ASCII (punycode) lower case, sorted, without repeats. A domain is a host
// name of at least two labels, without scheme, port, path or wildcard; its
// subdomains are listed with it.
func NormalizeDomains(domains []string) ([]string, error) {
	if len(domains) > MaxDomains {
		return nil, fmt.Errorf("link domains: at most %d (got %d)", MaxDomains, len(domains))
	}
	out := make([]string, 0, len(domains))
	var errs []error
	for _, d := range domains {
		a, err := idna.Lookup.ToASCII(strings.TrimSuffix(strings.TrimSpace(d), "."))
		a = strings.ToLower(a)
		labels := strings.Split(a, ".")
		bad := err != nil || len(a) > 253 || len(labels) < 2
		for _, l := range labels {
			bad = bad || !reLabel.MatchString(l)
		}
		if bad {
			errs = append(errs, fmt.Errorf("link domain %q: want a host name such as docs.example.com (no scheme, port, path or wildcard)", d))
			continue
		}
		out = append(out, a)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Domains returns the listed domains.
func (p *Policy) Domains() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.domains)
}

// listed reports whether host (ASCII, lower case) is a listed domain or a
// subdomain of one.
func (p *Policy) listed(host string) bool {
	if p == nil || host == "" {
		return false
	}
	for _, d := range p.domains {
		if host == d || strings.HasSuffix(host, "."+d) {
			return true
		}
	}
	return false
}

// target is what neutralising learnt about one URL.
type target struct {
	follow bool   // http(s) to a listed domain
	name   string // what a marker shows
	idn    bool
}

// inspect classifies a URL found in model text.
func (p *Policy) inspect(raw string) target {
	raw = strings.TrimSpace(raw)
	raw = strings.TrimSuffix(strings.TrimPrefix(raw, "<"), ">")
	if strings.HasPrefix(strings.ToLower(raw), "www.") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return target{name: "an unreadable URL"}
	}
	scheme := strings.ToLower(u.Scheme)
	host := strings.TrimSuffix(u.Hostname(), ".")
	if host == "" {
		switch {
		case scheme == "":
			return target{name: "a relative URL"}
		case len(scheme) > 16:
			return target{name: "an unreadable URL"}
		}
		return target{name: scheme + ": URL"}
	}
	idn := strings.ContainsFunc(host, func(r rune) bool { return r >= utf8.RuneSelf })
	ascii, err := idna.Lookup.ToASCII(host)
	if err != nil {
		// Not a valid host name (an underscore, a control character):
		// never followed; named by its lenient ASCII form.
		if ascii, err = idna.Punycode.ToASCII(host); err != nil || strings.ContainsFunc(ascii, func(r rune) bool { return r <= ' ' || r > '~' }) {
			return target{name: "an invalid host name", idn: idn}
		}
		t := target{name: strings.ToLower(ascii), idn: idn}
		if reg, err := publicsuffix.EffectiveTLDPlusOne(t.name); err == nil {
			t.name = reg
		}
		return t
	}
	ascii = strings.ToLower(ascii)
	for _, l := range strings.Split(ascii, ".") {
		idn = idn || strings.HasPrefix(l, "xn--")
	}
	t := target{follow: (scheme == "http" || scheme == "https") && p.listed(ascii), idn: idn, name: ascii}
	if reg, err := publicsuffix.EffectiveTLDPlusOne(ascii); err == nil {
		t.name = reg
	}
	if scheme != "http" && scheme != "https" && scheme != "" {
		t.name = scheme + ": " + t.name
	}
	return t
}

// state carries one Text call's flags and the reference definitions.
type state struct {
	p     *Policy
	flags Flags
	refs  map[string]string // normalised label -> destination
	// scan bounds the bytes bracket matching may read in one call, so
	// that text made of unclosed brackets costs linear time. Past it,
	// brackets are left as they are; the bare-URL pass still makes every
	// URL inert, so no image or link to an outside domain survives.
	scan int
}

func (st *state) image(dest string, known bool) string {
	st.flags[FlagRemoteImage] = true
	if !known {
		return "⟦image removed⟧"
	}
	t := st.p.inspect(dest)
	if t.idn {
		st.flags[FlagIDNDomain] = true
	}
	return "⟦image removed: " + t.name + "⟧"
}

func (st *state) inertLink(t target) string {
	st.flags[FlagUnlistedLink] = true
	if t.idn {
		st.flags[FlagIDNDomain] = true
	}
	return "⟦link removed: " + t.name + "⟧"
}

// maxDepth bounds nesting of link text inside link text.
const maxDepth = 4

// Text returns s neutralised and the flags of what was neutralised.
func (p *Policy) Text(s string) (string, Flags) {
	st := &state{p: p, flags: Flags{}, refs: map[string]string{}, scan: 64*len(s) + 1<<16}
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	s = st.definitions(s)
	s = st.inline(s, 0)
	s = st.htmlTags(s)
	s = st.bareURLs(s)
	s = st.format(s)
	return s, st.flags
}

// reDef matches a reference definition: [label]: destination "title".
var reDef = regexp.MustCompile(`(?m)^[ \t>*+\-0-9.)]*\[((?:[^\[\]\\\n]|\\.){1,999})\]:[ \t]*\n?[ \t]*(<[^<>\n]*>|[^\s<>]+)([^\n]*)$`)

func normLabel(l string) string { return strings.Join(strings.Fields(strings.ToLower(l)), " ") }

// definitions records every reference definition and makes those of
// destinations not to follow inert (escaped, so no renderer reads them).
func (st *state) definitions(s string) string {
	return reDef.ReplaceAllStringFunc(s, func(m string) string {
		sm := reDef.FindStringSubmatch(m)
		label, dest := normLabel(sm[1]), sm[2]
		if _, seen := st.refs[label]; !seen {
			st.refs[label] = dest
		}
		t := st.p.inspect(dest)
		if t.follow {
			return m
		}
		return "⟦reference " + strings.ReplaceAll(sm[1], "]", "\\]") + "⟧: " + st.inertLink(t)
	})
}

// closing returns the index just past the bracket matching s[i] (s[i] is
// open), allowing nesting and backslash escapes, or -1.
func (st *state) closing(s string, i int, open, close byte) int {
	depth := 0
	for j := i; j < len(s) && j-i < 4096; j++ {
		if st.scan--; st.scan < 0 {
			return -1
		}
		switch s[j] {
		case '\\':
			j++
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j + 1
			}
		case '\n':
			if j+1 < len(s) && s[j+1] == '\n' { // a blank line ends a paragraph
				return -1
			}
		}
	}
	return -1
}

// destination splits an inline link's (dest "title") into the destination.
func destination(inner string) string {
	inner = strings.TrimSpace(inner)
	if strings.HasPrefix(inner, "<") {
		if end := strings.IndexByte(inner, '>'); end > 0 {
			return inner[1:end]
		}
	}
	if i := strings.IndexAny(inner, " \t\n"); i >= 0 {
		return inner[:i]
	}
	return inner
}

// inline rewrites images and links written in brackets.
func (st *state) inline(s string, depth int) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		c := s[i]
		if c == '\\' && i+1 < len(s) && s[i+1] != '!' && s[i+1] != '[' {
			b.WriteString(s[i : i+2])
			i += 2
			continue
		}
		img := c == '!' && i+1 < len(s) && s[i+1] == '['
		if !img && c != '[' {
			b.WriteByte(c)
			i++
			continue
		}
		open := i
		if img {
			open++
		}
		end := st.closing(s, open, '[', ']')
		if end < 0 {
			b.WriteByte(c)
			i++
			continue
		}
		text := s[open+1 : end-1]
		dest, known, next := "", false, end
		switch {
		case end < len(s) && s[end] == '(':
			if close := st.closing(s, end, '(', ')'); close > 0 {
				dest, known, next = destination(s[end+1:close-1]), true, close
			}
		case end < len(s) && s[end] == '[':
			if close := st.closing(s, end, '[', ']'); close > 0 {
				label := s[end+1 : close-1]
				if label == "" {
					label = text
				}
				dest, known = st.refs[normLabel(label)]
				next = close
			}
		default:
			dest, known = st.refs[normLabel(text)]
		}
		switch {
		case img && (known || next > end):
			b.WriteString(st.image(dest, known))
			i = next
		case img:
			// ![text] with nothing after it and no definition is not an
			// image; keep the text, without the "![" a later pass could
			// complete.
			b.WriteString("!⟦" + st.inline(text, depth+1) + "⟧")
			i = end
		case !known:
			// Plain brackets: keep them, rewriting what is inside.
			if depth < maxDepth {
				b.WriteString("[" + st.inline(text, depth+1) + "]")
			} else {
				b.WriteString("⟦" + text + "⟧")
			}
			i = end
		default:
			inner := "…"
			if depth < maxDepth {
				inner = st.inline(text, depth+1)
			}
			if t := st.p.inspect(dest); t.follow {
				b.WriteString("[" + inner + "]" + s[end:next])
			} else {
				b.WriteString(inner + " " + st.inertLink(t))
			}
			i = next
		}
	}
	return b.String()
}

var (
	// reTag matches an HTML tag, comment or declaration.
	reTag = regexp.MustCompile(`(?s)<(/?)([A-Za-z][A-Za-z0-9:-]*)((?:[^>"']|"[^"]*"|'[^']*')*)>|<!--.*?-->|<[!?][^>]*>`)
	// reOpener is what is left of a tag that did not parse (an unclosed
	// quote): an HTML parser would still read it as a tag.
	reOpener = regexp.MustCompile(`<(/?[A-Za-z!?])`)
	// reAttrURL finds URL-bearing attribute values.
	reAttrURL  = regexp.MustCompile(`(?i)\b(?:href|src|srcset|poster|data|action|formaction|background|cite|xlink:href|content)\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)`)
	reHrefOnly = regexp.MustCompile(`(?is)^href\s*=\s*("[^"]*"|'[^']*'|[^\s"'>]+)$`)
	reEmail    = regexp.MustCompile(`^<[A-Za-z0-9.!#$%&'*+/=?^_{|}~-]+@[A-Za-z0-9.-]+>$`)
	// reAutolink matches <scheme:...> (not an e-mail autolink).
	reAutolink = regexp.MustCompile(`<([A-Za-z][A-Za-z0-9+.-]{1,31}:[^\s<>]*)>`)
)

// imageTags fetch when rendered; activeTags can fetch or act. Both are
// removed even without attributes.
var (
	imageTags  = map[string]bool{"img": true, "image": true, "picture": true, "source": true, "video": true, "audio": true, "track": true, "svg": true, "input": true}
	activeTags = map[string]bool{"script": true, "style": true, "iframe": true, "frame": true, "frameset": true, "object": true, "embed": true,
		"base": true, "meta": true, "link": true, "form": true, "button": true, "math": true, "template": true, "noscript": true, "portal": true}
)

// htmlTags rewrites autolinks and raw HTML.
func (st *state) htmlTags(s string) string {
	s = reAutolink.ReplaceAllStringFunc(s, func(m string) string {
		if t := st.p.inspect(m[1 : len(m)-1]); !t.follow {
			return st.inertLink(t)
		}
		return m
	})
	var b strings.Builder
	last := 0
	for _, loc := range reTag.FindAllStringIndex(s, -1) {
		b.WriteString(st.openers(s[last:loc[0]]))
		b.WriteString(st.tag(s[loc[0]:loc[1]]))
		last = loc[1]
	}
	b.WriteString(st.openers(s[last:]))
	return b.String()
}

// openers defuses what is left of a tag that did not parse.
func (st *state) openers(s string) string {
	return reOpener.ReplaceAllStringFunc(s, func(m string) string {
		st.flags[FlagHTML] = true
		return "‹" + m[1:]
	})
}

// tag rewrites one HTML tag, comment or declaration.
func (st *state) tag(m string) string {
	if reAutolink.MatchString(m) || reEmail.MatchString(m) {
		return m // vetted above, or an e-mail autolink (nothing is fetched)
	}
	sm := reTag.FindStringSubmatch(m)
	if sm[2] == "" {
		st.flags[FlagHTML] = true
		if body, ok := strings.CutPrefix(m, "<!--"); ok {
			// A comment hides text from a rendered view: show it, inert.
			return "⟦html comment: " + st.openers(strings.TrimSuffix(body, "-->")) + "⟧"
		}
		return "⟦html removed⟧"
	}
	closeTag, name := sm[1] == "/", strings.ToLower(sm[2])
	attrs := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(sm[3]), "/"))
	var dests []string
	for _, a := range reAttrURL.FindAllStringSubmatch(sm[3], -1) {
		dests = append(dests, html.UnescapeString(strings.Trim(a[1], `"'`)))
	}
	switch {
	case imageTags[name] && !closeTag:
		if len(dests) > 0 {
			return st.image(dests[0], true)
		}
		return st.image("", false)
	case name == "a" && !closeTag && len(dests) == 1 && reHrefOnly.MatchString(attrs):
		if t := st.p.inspect(dests[0]); !t.follow {
			return st.inertLink(t)
		}
		return m
	case !activeTags[name] && !imageTags[name] && attrs == "":
		return m // <b>, </p>, <br/>, </a>: markup that fetches nothing
	}
	st.flags[FlagHTML] = true
	if len(dests) > 0 {
		t := st.p.inspect(dests[0])
		if t.idn {
			st.flags[FlagIDNDomain] = true
		}
		return "⟦html " + sm[1] + name + " removed: " + t.name + "⟧"
	}
	return "⟦html " + sm[1] + name + " removed⟧"
}

// urlEnd reports the characters that end a bare URL.
func urlEnd(r rune) bool {
	return unicode.IsSpace(r) || strings.ContainsRune("<>\"'`⟦⟧", r)
}

// bareURLs makes bare URLs to domains not to follow inert: what a
// renderer or terminal would turn into a link, with a scheme
// (https://...), protocol-relative (//host/...) or www.-prefixed. It scans
// for "//" and "www." rather than running a regular expression, to stay
// linear and cheap on long answers.
func (st *state) bareURLs(s string) string {
	lower := strings.ToLower(s) // same byte offsets: ToLower keeps ASCII in place, and only ASCII is searched
	if len(lower) != len(s) {
		lower = asciiLower(s)
	}
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); {
		start, ok := -1, false
		switch {
		case strings.HasPrefix(s[i:], "//"):
			start, ok = i, true
			for start > last && start > i-17 && isSchemeByte(s[start-1]) {
				start--
			}
			if start < i && (s[i-1] != ':' || !isLetter(s[start])) {
				// "//" without a scheme before it, or a malformed one: the
				// URL is protocol-relative from "//".
				start = i
			}
		case strings.HasPrefix(lower[i:], "www.") && (i == 0 || !isWordByte(s[i-1])):
			start, ok = i, true
		}
		if !ok {
			i++
			continue
		}
		end := i + 2
		for end < len(s) {
			r, n := utf8.DecodeRuneInString(s[end:])
			if urlEnd(r) {
				break
			}
			end += n
		}
		// As autolinkers do, trailing punctuation and an unbalanced ")"
		// end the text around the URL, not the URL.
		for end > i+2 {
			c := s[end-1]
			if strings.IndexByte(".,;:!?*_~", c) >= 0 || c == ')' && strings.Count(s[start:end], ")") > strings.Count(s[start:end], "(") {
				end--
				continue
			}
			break
		}
		m := s[start:end]
		if host, _, _ := strings.Cut(s[i+2:end], "/"); end-i <= 2 || m == "www." ||
			start == i && !strings.HasPrefix(m, "www.") && !strings.Contains(host, ".") {
			// Nothing after "//", or "//TODO": a protocol-relative URL
			// names a host with a dot (nothing else leaves the machine).
			i = end
			continue
		}
		b.WriteString(s[last:start])
		if t := st.p.inspect(m); !t.follow {
			b.WriteString(st.inertLink(t))
		} else {
			b.WriteString(m)
		}
		last, i = end, end
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

func isLetter(c byte) bool   { return c|0x20 >= 'a' && c|0x20 <= 'z' }
func isWordByte(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' || c == '_' }
func isSchemeByte(c byte) bool {
	return isWordByte(c) && c != '_' || c == '+' || c == '.' || c == '-' || c == ':'
}

// asciiLower lowers ASCII letters only, keeping every byte offset.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'A' && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// bidi reports the bidirectional controls.
func bidi(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

// invisible reports other characters that render as nothing: format
// characters (zero-width space, joiners, BOM, tag characters, soft
// hyphen, ...) and the variation selectors beyond the emoji one.
func invisible(r rune) bool {
	return unicode.Is(unicode.Cf, r) || r >= 0xFE00 && r <= 0xFE0E || r >= 0xE0100 && r <= 0xE01EF || r == 0x115F || r == 0x1160 ||
		r == 0x3164 || r == 0xFFA0 || r == 0x180E
}

// format makes bidirectional controls and invisible characters visible. A
// zero-width joiner between two symbols (an emoji sequence) stays.
func (st *state) format(s string) string {
	if !strings.ContainsFunc(s, func(r rune) bool { return bidi(r) || invisible(r) }) {
		return s
	}
	rs := []rune(s)
	var b strings.Builder
	for i, r := range rs {
		switch {
		case bidi(r):
			st.flags[FlagBidi] = true
		case r == 0x200D && i > 0 && i+1 < len(rs) && unicode.Is(unicode.So, rs[i-1]) && unicode.Is(unicode.So, rs[i+1]):
			b.WriteRune(r)
			continue
		case invisible(r):
			st.flags[FlagInvisible] = true
		default:
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, "⟨U+%04X⟩", r)
	}
	return b.String()
}

// JSON neutralises every string (keys included) in a JSON document and
// returns it re-encoded (object keys sorted) with the flags. A document
// that is not valid JSON is neutralised as text and returned as a JSON
// string.
func (p *Policy) JSON(data []byte) ([]byte, Flags) {
	flags := Flags{}
	var v any
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil || dec.More() {
		s, f := p.Text(string(data))
		out, _ := json.Marshal(s)
		return out, f
	}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case string:
			s, f := p.Text(x)
			flags.Add(f)
			return s
		case []any:
			for i := range x {
				x[i] = walk(x[i])
			}
			return x
		case map[string]any:
			out := make(map[string]any, len(x))
			for k, e := range x {
				out[walk(k).(string)] = walk(e)
			}
			return out
		}
		return v
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		s, f := p.Text(string(data))
		out, _ = json.Marshal(s)
		return out, f
	}
	return out, flags
}
