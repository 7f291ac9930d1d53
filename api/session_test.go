package api_test

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/store"
	"github.com/agentplane/agentplane/web"
)

// browser is a session signed in as one user: its cookie and CSRF token.
type browser struct {
	cookie *http.Cookie
	csrf   string
}

func (f *fixture) signIn(user string) (*browser, *response) {
	f.t.Helper()
	r := f.do(user, "POST", "/v1/session", nil)
	if r.status != http.StatusCreated {
		f.t.Fatalf("sign in as %s: %s", user, r)
	}
	var sn api.Session
	r.decode(f.t, &sn)
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == "agentplane_session" {
			return &browser{cookie: c, csrf: sn.CSRFToken}, r
		}
	}
	f.t.Fatalf("sign in set no session cookie: %v", r.header)
	return nil, nil
}

// doBrowser sends a request with the session cookie (and, if csrf, its
// token) and no Authorization header, plus header pairs.
func (f *fixture) doBrowser(b *browser, csrf bool, method, path, body string, hdr ...string) *response {
	f.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, f.http.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	if b != nil {
		req.AddCookie(&http.Cookie{Name: b.cookie.Name, Value: b.cookie.Value})
		if csrf {
			req.Header.Set("X-CSRF-Token", b.csrf)
		}
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return &response{status: resp.StatusCode, header: resp.Header, body: data}
}

// TestSessionCookie: signing in with an API key sets an HttpOnly,
// SameSite=Strict cookie for the whole site (not Secure on plain HTTP, and
// Secure with the __Host- name when configured), the cookie authenticates
// reads as the key's user, signing out ends it server-side, and it expires.
func TestSessionCookie(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.SessionTTL = time.Hour }})
	b, r := f.signIn(priya)
	c := b.cookie
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.Secure || c.MaxAge != 3600 {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, Path=/, not Secure on http, Max-Age 3600", c)
	}
	if len(c.Value) < 40 || strings.Contains(string(r.body), c.Value) {
		t.Fatalf("cookie value %q is short or repeated in the body", c.Value)
	}
	var tn api.Tenant
	got := f.doBrowser(b, false, "GET", "/v1/tenant", "")
	if got.status != 200 {
		t.Fatalf("GET /v1/tenant with the cookie: %s", got)
	}
	got.decode(t, &tn)
	if tn.Tenant != bankTenant || tn.User != priya || !strings.HasPrefix(tn.Via, "session:api_key:") {
		t.Fatalf("tenant through the session = %+v", tn)
	}
	if s := f.doBrowser(b, false, "GET", "/v1/session", ""); s.status != 200 || !strings.Contains(string(s.body), b.csrf) {
		t.Fatalf("GET /v1/session: %s", s)
	}
	// A session cannot open another (it needs a header credential).
	if s := f.doBrowser(b, true, "POST", "/v1/session", ""); s.status != 400 {
		t.Fatalf("POST /v1/session with a session: %s, want 400", s)
	}
	// Sign out: the cookie is cleared and the session is gone server-side,
	// so a kept copy of the cookie no longer works.
	out := f.doBrowser(b, true, "DELETE", "/v1/session", "")
	if out.status != http.StatusNoContent || !strings.Contains(out.header.Get("Set-Cookie"), "Max-Age=0") {
		t.Fatalf("sign out: %s %v", out, out.header)
	}
	if s := f.doBrowser(b, false, "GET", "/v1/tenant", ""); s.status != 401 {
		t.Fatalf("after sign out: %s, want 401", s)
	}
	// Expiry: a session is refused after its TTL.
	b2, _ := f.signIn(priya)
	f.clock.Advance(time.Hour + time.Second)
	if s := f.doBrowser(b2, false, "GET", "/v1/tenant", ""); s.status != 401 {
		t.Fatalf("after the session's TTL: %s, want 401", s)
	}
}

// TestSessionSecureCookie: with SecureCookies the cookie is Secure and
// named with the __Host- prefix.
func TestSessionSecureCookie(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.SecureCookies = true }})
	r := f.do(priya, "POST", "/v1/session", nil)
	cs := (&http.Response{Header: r.header}).Cookies()
	if r.status != 201 || len(cs) != 1 || cs[0].Name != "__Host-agentplane_session" || !cs[0].Secure || !cs[0].HttpOnly {
		t.Fatalf("secure sign in: %s cookies %+v", r, cs)
	}
}

// TestSessionRevokedKey: revoking the API key ends the sessions it opened.
func TestSessionRevokedKey(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	b, _ := f.signIn(priya)
	keys, err := f.p.Store.ListAPIKeys(context.Background(), bankTenant)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.User == priya {
			if err := f.p.Store.RevokeAPIKey(context.Background(), k.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s := f.doBrowser(b, false, "GET", "/v1/tenant", ""); s.status != 401 {
		t.Fatalf("session of a revoked key: %s, want 401", s)
	}
}

// TestSessionCSRF: a state-changing request made with the cookie is
// refused without the session's token, with another session's token, and
// from a foreign origin; with the token it goes through. Header-
// authenticated calls need no token.
func TestSessionCSRF(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	b, _ := f.signIn(priya)
	other, _ := f.signIn(meera)
	start := `{"agent":"` + demoAgent + `","input":"` + demoTask + `","mode":"async"}`
	for name, r := range map[string]*response{
		"no token":          f.doBrowser(b, false, "POST", "/v1/runs", start),
		"another's token":   f.doBrowser(b, false, "POST", "/v1/runs", start, "X-CSRF-Token", other.csrf),
		"foreign origin":    f.doBrowser(b, true, "POST", "/v1/runs", start, "Origin", "https://evil.example"),
		"sign out no token": f.doBrowser(b, false, "DELETE", "/v1/session", ""),
	} {
		if r.status != http.StatusForbidden || !strings.Contains(string(r.body), "csrf_refused") {
			t.Errorf("%s: %s, want 403 csrf_refused", name, r)
		}
	}
	runs, err := f.p.Store.ListRuns(context.Background(), store.RunFilter{Tenant: bankTenant})
	if err != nil || len(runs) != 0 {
		t.Fatalf("refused requests created %d runs (%v)", len(runs), err)
	}
	if r := f.doBrowser(b, true, "POST", "/v1/runs", start, "Origin", f.http.URL); r.status != http.StatusAccepted {
		t.Fatalf("with the token, same origin: %s", r)
	}
	if r := f.do(priya, "POST", "/v1/runs", map[string]any{"agent": demoAgent, "input": demoTask}); r.status != http.StatusAccepted {
		t.Fatalf("header credential without a token: %s", r)
	}
}

// TestSessionTenantAndStream: a session reads only its tenant's runs
// (another tenant's run is 404), and the event stream accepts the cookie,
// as an EventSource sends it.
func TestSessionTenantAndStream(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	b, _ := f.signIn(gus)
	mine := f.startAsync(gus)
	theirs := f.startAsync(priya)
	f.waitPending(priya, theirs, "issue_refund")
	for _, p := range []string{"/v1/runs/" + theirs, "/v1/runs/" + theirs + "/events", "/v1/runs/" + theirs + "/prompt?seq=3"} {
		if r := f.doBrowser(b, false, "GET", p, ""); r.status != http.StatusNotFound {
			t.Errorf("GET %s of another tenant with a session: %s, want 404", p, r)
		}
	}
	if r := f.doBrowser(b, false, "GET", "/v1/runs", ""); r.status != 200 || strings.Contains(string(r.body), theirs) {
		t.Fatalf("run list through the session shows another tenant's run: %s", r)
	}
	req, _ := http.NewRequest("GET", f.http.URL+"/v1/runs/"+mine+"/events", nil)
	req.Header.Set("Accept", "text/event-stream")
	req.AddCookie(&http.Cookie{Name: b.cookie.Name, Value: b.cookie.Value})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("stream with the cookie: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	rd := bufio.NewReader(resp.Body)
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("stream with the cookie ended before its first event: %v", err)
		}
		if strings.HasPrefix(line, "id: ") {
			if line != "id: 1\n" {
				t.Fatalf("first event %q, want id: 1", line)
			}
			break
		}
	}
}

// TestCORS: off by default (no CORS header on answers or preflights); on
// for a configured origin, which alone gets its origin and credentials
// back, and whose preflight is answered with the path's methods.
func TestCORS(t *testing.T) {
	off := newFixture(t, fixtureOptions{})
	pre := []string{"Origin", "https://console.example-bank.in", "Access-Control-Request-Method", "POST"}
	if r := off.doBrowser(nil, false, "OPTIONS", "/v1/runs", "", pre...); r.header.Get("Access-Control-Allow-Origin") != "" || r.status == http.StatusNoContent {
		t.Fatalf("preflight with CORS off: %s %v", r, r.header)
	}
	if r := off.do(priya, "GET", "/v1/runs", nil, "Origin", "https://console.example-bank.in"); r.header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatalf("CORS off answered with %v", r.header)
	}

	on := newFixture(t, fixtureOptions{config: "cors_origins: [https://console.example-bank.in]\n"})
	r := on.doBrowser(nil, false, "OPTIONS", "/v1/runs", "", pre...)
	h := r.header
	if r.status != http.StatusNoContent || h.Get("Access-Control-Allow-Origin") != "https://console.example-bank.in" ||
		h.Get("Access-Control-Allow-Credentials") != "true" || !strings.Contains(h.Get("Access-Control-Allow-Methods"), "POST") ||
		!strings.Contains(h.Get("Access-Control-Allow-Headers"), "X-CSRF-Token") {
		t.Fatalf("preflight of a configured origin: %s %v", r, h)
	}
	got := on.do(priya, "GET", "/v1/runs", nil, "Origin", "https://console.example-bank.in")
	if got.header.Get("Access-Control-Allow-Origin") != "https://console.example-bank.in" || got.header.Get("Access-Control-Allow-Credentials") != "true" {
		t.Fatalf("answer to a configured origin: %v", got.header)
	}
	for _, o := range []string{"https://evil.example", "https://console.example-bank.in.evil.example", "null"} {
		r := on.doBrowser(nil, false, "OPTIONS", "/v1/runs", "", "Origin", o, "Access-Control-Request-Method", "POST")
		if r.header.Get("Access-Control-Allow-Origin") != "" || r.header.Get("Access-Control-Allow-Credentials") != "" {
			t.Errorf("origin %s got CORS headers: %v", o, r.header)
		}
	}
	if _, err := api.ParseConfig("c", []byte("cors_origins: ['*']\n")); err == nil {
		t.Error("cors_origins '*' was accepted")
	}
}

// TestViewerHeaders: the viewer's files are served with the strict CSP
// (no inline script, nothing remote, no framing), API answers with a CSP
// that loads nothing, and / leads to the viewer.
func TestViewerHeaders(t *testing.T) {
	f := newFixture(t, fixtureOptions{apiOptions: func(o *api.Options) { o.UI = web.Handler() }})
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/app.css"} {
		r := f.doBrowser(nil, false, "GET", p, "")
		csp := r.header.Get("Content-Security-Policy")
		if r.status != 200 || csp != web.ContentSecurityPolicy || r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Fatalf("GET %s: %d CSP %q", p, r.status, csp)
		}
		for _, want := range []string{"default-src 'self'", "script-src 'self'", "img-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("CSP %q lacks %q", csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") || strings.Contains(csp, "http") {
			t.Errorf("CSP %q allows inline code or a remote source", csp)
		}
	}
	page := f.doBrowser(nil, false, "GET", "/ui/", "")
	if strings.Contains(string(page.body), "<script>") || strings.Contains(string(page.body), "http://") || strings.Contains(string(page.body), "https://") {
		t.Fatalf("the page has an inline script or a remote reference:\n%s", page.body)
	}
	if r := f.do(priya, "GET", "/v1/tenant", nil); r.header.Get("Content-Security-Policy") != "default-src 'none'; frame-ancestors 'none'" {
		t.Fatalf("API CSP %q", r.header.Get("Content-Security-Policy"))
	}
	req, _ := http.NewRequest("GET", f.http.URL+"/", nil)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("GET /: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
}
