package mcphost_test

import (
	"encoding/base64"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/broker"
	"github.com/agentplane/agentplane/internal/addrpolicy"
	"github.com/agentplane/agentplane/mcphost"
	"github.com/agentplane/agentplane/mcphost/oauthtest"
	"github.com/agentplane/agentplane/secrets"
	"github.com/agentplane/agentplane/tool"
	"github.com/agentplane/agentplane/trace"
)

func hostPort(raw string) string {
	u, _ := url.Parse(raw)
	return u.Host
}

func oauthSpec(t *testing.T, name string, rs *oauthtest.ResourceServer, as *oauthtest.AuthServer, extra string) *mcphost.Spec {
	t.Helper()
	s, err := mcphost.ParseSpec([]byte(fmt.Sprintf("name: %s\ntransport: http\nendpoint: %s\nauth: oauth\noauth: {client_id: agentplane%s}\nallow: [%q, %q]\n",
		name, rs.URL, extra, hostPort(rs.URL), hostPort(as.URL))))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

const oauthOverlay = "tool: whoami\nname: %s_whoami\nrisk: low\ntier: 2\ntimeout_ms: 10000\nside_effects: none\nauth: {mode: on_behalf_of_user, scopes: [%s:read]}\n"

// oauthWorld is the platform side: sealed store, OAuth client, host, and
// the broker that mints each call's credential.
type oauthWorld struct {
	dir    string
	store  *secrets.FileStore
	oauth  *mcphost.OAuth
	host   *mcphost.Host
	reg    *registry
	broker *broker.Broker
	ms     map[string]*tool.Manifest
}

func newOAuthWorld(t *testing.T, clock *oauthtest.Clock, users ...string) *oauthWorld {
	t.Helper()
	w := &oauthWorld{dir: t.TempDir(), reg: &registry{cs: map[string]*mcphost.Connector{}}, ms: map[string]*tool.Manifest{}}
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	var err error
	w.store, err = secrets.OpenFileStore(secrets.FileOptions{Dir: w.dir, Getenv: func(string) string { return key }})
	if err != nil {
		t.Fatal(err)
	}
	w.oauth, err = mcphost.NewOAuth(mcphost.OAuthOptions{Store: w.store, Policy: &addrpolicy.Policy{Loopback: true}, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	w.host = loopbackHost(t, w.reg, mcphost.Options{OAuth: w.oauth, Clock: clock.Now})
	var ps []*authz.Principal
	for _, u := range users {
		p, err := authz.New("bank", u, []string{"crm:read", "mail:read"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	w.broker, err = broker.New(broker.Options{Catalog: tool.NewCatalog(), Remote: w.host, Directory: authz.NewStatic(ps...), Clock: clock.Now,
		Credentials: &mcphost.Credentials{Service: &secrets.Broker{Store: w.store}, OAuth: w.oauth, Registry: w.reg}})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// connect runs the authorization-code flow for user as their browser
// would: open the URL Start gives (logged in at the authorization server
// as user), follow nothing, hand the redirect's parameters to Finish.
func (w *oauthWorld) connect(t *testing.T, user string, spec *mcphost.Spec) {
	t.Helper()
	authURL, err := w.oauth.Start(t.Context(), "bank", user, spec, "http://127.0.0.1:1/v1/connectors/"+spec.Name+"/oauth/callback")
	if err != nil {
		t.Fatal(err)
	}
	if err := w.oauth.Finish(t.Context(), "bank", user, spec, oauthtest.Authorize(t, authURL, user)); err != nil {
		t.Fatal(err)
	}
}

// review lists the server as the reviewer and registers the connector.
func (w *oauthWorld) review(t *testing.T, reviewer string, spec *mcphost.Spec) {
	t.Helper()
	snap, err := w.host.List(t.Context(), "bank", reviewer, spec)
	if err != nil {
		t.Fatal(err)
	}
	ov, err := mcphost.ParseOverlays([]byte(fmt.Sprintf(oauthOverlay, spec.Name, spec.Name)))
	if err != nil {
		t.Fatal(err)
	}
	ms, err := mcphost.Manifests(spec.Name, snap, ov)
	if err != nil {
		t.Fatal(err)
	}
	if err := mcphost.CheckAuth(spec, ms); err != nil {
		t.Fatal(err)
	}
	w.reg.mu.Lock()
	w.reg.cs[spec.Name] = &mcphost.Connector{Tenant: "bank", Spec: spec, Reviewed: snap, Manifests: ms}
	w.reg.mu.Unlock()
	w.ms[spec.Name] = ms[0]
}

var oauthRuns int

// call executes the connector's whoami through the broker as user, as a
// run's tool call does.
func (w *oauthWorld) call(t *testing.T, user, connector string) broker.Execution {
	t.Helper()
	oauthRuns++
	run := fmt.Sprintf("run_%s_%d", user, oauthRuns)
	m := w.ms[connector]
	ex, err := w.broker.Execute(t.Context(), m, tool.Call{Tool: m.Name, Args: []byte(`{}`), RunID: run, Tenant: "bank", User: user, IdempotencyKey: run + ":1:0"})
	if err != nil {
		t.Fatalf("execute: %v", err)
	}
	return ex
}

func TestOAuthPerUserTokens(t *testing.T) {
	clock := oauthtest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	as := oauthtest.NewAuthServer(t, clock)
	crm := oauthtest.NewResourceServer(t, as, "crm")
	mail := oauthtest.NewResourceServer(t, as, "mail")
	w := newOAuthWorld(t, clock, "priya", "alice", "bob", "carol")
	crmSpec, mailSpec := oauthSpec(t, "crm", crm, as, ""), oauthSpec(t, "mail", mail, as, "")

	t.Run("a 401 leads through RFC 9728 metadata to the issuer", func(t *testing.T) {
		authURL, err := w.oauth.Start(t.Context(), "bank", "priya", crmSpec, "http://127.0.0.1:1/cb")
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(authURL)
		q := u.Query()
		if got := u.Scheme + "://" + u.Host + u.Path; got != as.URL+"/authorize" {
			t.Errorf("authorization URL goes to %s, want the issuer's %s/authorize", got, as.URL)
		}
		if q.Get("resource") != crm.Resource || q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 || q.Get("state") == "" || q.Get("scope") != "crm.read" {
			t.Errorf("authorization request %v: want resource %s, PKCE S256, a state and the server's scope", q, crm.Resource)
		}
		if _, prm := crm.Counts(); prm == 0 {
			t.Error("the protected-resource metadata (named only by the 401's challenge) was never fetched")
		}
	})

	t.Run("issuer checks", func(t *testing.T) {
		pinned := oauthSpec(t, "crm", crm, as, ", issuer: 'http://127.0.0.1:9'")
		if _, err := w.oauth.Start(t.Context(), "bank", "priya", pinned, "http://127.0.0.1:1/cb"); err == nil || !strings.Contains(err.Error(), "not the connector's issuer") {
			t.Errorf("a server naming another issuer than the connector's: %v", err)
		}
		as.Set(func(a *oauthtest.AuthServer) { a.LieIssuer = true })
		_, err := w.oauth.Start(t.Context(), "bank", "priya", crmSpec, "http://127.0.0.1:1/cb")
		as.Set(func(a *oauthtest.AuthServer) { a.LieIssuer = false })
		if err == nil || !strings.Contains(err.Error(), "does not match") {
			t.Errorf("authorization server metadata naming another issuer: %v", err)
		}
	})

	t.Run("discovery goes through the address policy and the allowlist", func(t *testing.T) {
		strict, err := mcphost.NewOAuth(mcphost.OAuthOptions{Store: w.store, Clock: clock.Now})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := strict.Start(t.Context(), "bank", "priya", crmSpec, "http://127.0.0.1:1/cb"); err == nil {
			t.Error("the default policy reached a loopback server")
		}
		narrow, err := mcphost.ParseSpec(fmt.Appendf(nil, "name: crm\ntransport: http\nendpoint: %s\nauth: oauth\noauth: {client_id: agentplane}\nallow: [%q]\n", crm.URL, hostPort(crm.URL)))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.oauth.Start(t.Context(), "bank", "priya", narrow, "http://127.0.0.1:1/cb"); err == nil || !strings.Contains(err.Error(), "allowlist") {
			t.Errorf("an authorization server outside the connector's allowlist: %v", err)
		}
	})

	// The reviewer and alice connect both servers; reviews list as priya.
	for _, u := range []string{"priya", "alice"} {
		w.connect(t, u, crmSpec)
		w.connect(t, u, mailSpec)
	}
	w.review(t, "priya", crmSpec)
	w.review(t, "priya", mailSpec)

	t.Run("each token goes only to its own server", func(t *testing.T) {
		for _, c := range []string{"crm", "mail"} {
			ex := w.call(t, "alice", c)
			if ex.Status != trace.StatusOK || !strings.Contains(string(ex.Output), c+" says you are alice") {
				t.Fatalf("alice calls %s: %s %s", c, ex.Status, ex.Output)
			}
		}
		for _, rs := range []*oauthtest.ResourceServer{crm, mail} {
			seen := rs.Tokens()
			if len(seen) == 0 {
				t.Fatalf("%s saw no token", rs.Resource)
			}
			for _, tok := range seen {
				if g, ok := as.Introspect(tok); !ok || g.Aud != rs.Resource {
					t.Errorf("%s was presented a token for %q", rs.Resource, g.Aud)
				}
			}
		}
	})

	t.Run("a user without a token is told to connect", func(t *testing.T) {
		before := len(crm.Tokens())
		ex := w.call(t, "bob", "crm")
		if ex.Status != trace.StatusDenied || !strings.Contains(string(ex.Output), "connect your account") ||
			!strings.Contains(string(ex.Output), "agentplane connectors connect crm --tenant bank --as bob") {
			t.Errorf("bob without a token: %s %s", ex.Status, ex.Output)
		}
		if after := len(crm.Tokens()); after != before {
			t.Errorf("the server was sent %d tokens for bob's call", after-before)
		}
	})

	t.Run("a wrong-audience token is refused by the server and the call fails closed", func(t *testing.T) {
		as.Set(func(a *oauthtest.AuthServer) { a.Misissue = crm.Resource }) // a confused authorization server
		w.connect(t, "carol", mailSpec)
		as.Set(func(a *oauthtest.AuthServer) { a.Misissue = "" })
		calls, _ := mail.Counts()
		ex := w.call(t, "carol", "mail")
		if ex.Status == trace.StatusOK || !strings.Contains(string(ex.Output), "refused") {
			t.Errorf("a token for crm presented to mail: %s %s", ex.Status, ex.Output)
		}
		if after, _ := mail.Counts(); after != calls {
			t.Error("the tool ran with a token for another server")
		}
	})

	t.Run("a grant for another server is never sent", func(t *testing.T) {
		// An administrator points crm at the mail server: alice's crm
		// token is for crm's old URL, so it is not attached at all.
		moved := oauthSpec(t, "crm", mail, as, "")
		w.reg.mu.Lock()
		c := *w.reg.cs["crm"]
		c.Spec = moved
		w.reg.cs["crm"] = &c
		w.reg.mu.Unlock()
		before := len(mail.Tokens())
		ex := w.call(t, "alice", "crm")
		if ex.Status != trace.StatusDenied || !strings.Contains(string(ex.Output), "connected an account for another server") {
			t.Errorf("a grant for another resource: %s %s", ex.Status, ex.Output)
		}
		if n := len(mail.Tokens()) - before; n != 0 {
			t.Errorf("mail was sent %d tokens", n)
		}
		w.reg.mu.Lock()
		c.Spec = crmSpec
		w.reg.mu.Unlock()
	})

	t.Run("refresh before expiry", func(t *testing.T) {
		var first string
		if ex := w.call(t, "alice", "crm"); ex.Status != trace.StatusOK {
			t.Fatalf("%s %s", ex.Status, ex.Output)
		}
		seen := crm.Tokens()
		first = seen[len(seen)-1]
		as.Set(func(a *oauthtest.AuthServer) { a.Refreshed = 0 })
		clock.Advance(5 * time.Minute) // 5 of 10 minutes left: no refresh
		if ex := w.call(t, "alice", "crm"); ex.Status != trace.StatusOK {
			t.Fatalf("%s %s", ex.Status, ex.Output)
		}
		n := as.Refreshes()
		if n != 0 {
			t.Errorf("refreshed %d times with 5 minutes left", n)
		}
		clock.Advance(3*time.Minute + 30*time.Second) // 90 s left, inside the 2-minute skew
		if ex := w.call(t, "alice", "crm"); ex.Status != trace.StatusOK {
			t.Fatalf("%s %s", ex.Status, ex.Output)
		}
		n = as.Refreshes()
		seen = crm.Tokens()
		last := seen[len(seen)-1]
		if n != 1 || last == first {
			t.Errorf("refreshes %d, last token the first one: %v", n, last == first)
		}
		if g, _ := as.Introspect(last); !clock.Now().Before(g.Exp) {
			t.Error("the token sent had expired")
		}
	})

	t.Run("tokens are sealed", func(t *testing.T) {
		toks := as.Tokens()
		files := 0
		err := filepath.WalkDir(w.dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			files++
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, tok := range toks {
				if strings.Contains(string(b), tok) {
					t.Errorf("%s holds a token in plaintext", path)
				}
			}
			if strings.Contains(string(b), "refresh_token") || strings.Contains(string(b), "verifier") {
				t.Errorf("%s holds a grant's fields in plaintext", path)
			}
			return nil
		})
		if err != nil || files < 5 {
			t.Fatalf("walk: %v, %d files", err, files)
		}
	})
}

func TestOAuthFlowBinding(t *testing.T) {
	clock := oauthtest.NewClock(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC))
	as := oauthtest.NewAuthServer(t, clock)
	crm := oauthtest.NewResourceServer(t, as, "crm")
	w := newOAuthWorld(t, clock, "alice", "mallory")
	spec := oauthSpec(t, "crm", crm, as, "")
	start := func(user string) url.Values {
		authURL, err := w.oauth.Start(t.Context(), "bank", user, spec, "http://127.0.0.1:1/cb")
		if err != nil {
			t.Fatal(err)
		}
		u, _ := url.Parse(authURL)
		return u.Query()
	}
	// A state issued to mallory does not complete alice's connection.
	q := start("mallory")
	start("alice")
	if err := w.oauth.Finish(t.Context(), "bank", "alice", spec, mcphost.Callback{State: q.Get("state"), Code: "x", Iss: as.URL}); err == nil || !strings.Contains(err.Error(), "state") {
		t.Errorf("another user's state: %v", err)
	}
	// The state is single use: alice's flow was consumed by the attempt.
	if err := w.oauth.Finish(t.Context(), "bank", "alice", spec, mcphost.Callback{State: q.Get("state"), Code: "x", Iss: as.URL}); err == nil || !strings.Contains(err.Error(), "no authorization in progress") {
		t.Errorf("a second answer: %v", err)
	}
	// An answer naming another issuer (mix-up) and a late answer are refused.
	q = start("alice")
	if err := w.oauth.Finish(t.Context(), "bank", "alice", spec, mcphost.Callback{State: q.Get("state"), Code: "x", Iss: "http://127.0.0.1:9"}); err == nil || !strings.Contains(err.Error(), "mix-up") {
		t.Errorf("another issuer: %v", err)
	}
	q = start("alice")
	clock.Advance(11 * time.Minute)
	if err := w.oauth.Finish(t.Context(), "bank", "alice", spec, mcphost.Callback{State: q.Get("state"), Code: "x", Iss: as.URL}); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("a late answer: %v", err)
	}
	if _, err := w.oauth.Credential(t.Context(), "bank", "alice", spec); err == nil || !strings.Contains(err.Error(), "connect your account") {
		t.Errorf("after failed flows alice has a token: %v", err)
	}
}

func TestOAuthSpecValidation(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"name: a\ntransport: http\nendpoint: https://a.example/mcp\nauth: oauth\nallow: [a.example:443]\n", "oauth.client_id"},
		{"name: a\ntransport: http\nendpoint: https://a.example/mcp\nauth: none\noauth: {client_id: x}\nallow: [a.example:443]\n", "only with auth: oauth"},
		{"name: a\ntransport: http\nendpoint: https://a.example/mcp\nauth: oauth\noauth: {client_id: x, scopes: ['a b']}\nallow: [a.example:443]\n", "scope token"},
		{"name: a\ntransport: http\nendpoint: https://a.example/mcp\nauth: oauth\noauth: {client_id: x, issuer: 'ftp://x'}\nallow: [a.example:443]\n", "issuer"},
	} {
		if _, err := mcphost.ParseSpec([]byte(tc.spec)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.spec, err, tc.want)
		}
	}
	for in, want := range map[string]string{
		"HTTPS://CRM.Example:443/mcp/": "https://crm.example/mcp",
		"http://127.0.0.1:8080/mcp":    "http://127.0.0.1:8080/mcp",
		"https://crm.example":          "https://crm.example",
	} {
		if got, err := mcphost.CanonicalResource(in); err != nil || got != want {
			t.Errorf("CanonicalResource(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
