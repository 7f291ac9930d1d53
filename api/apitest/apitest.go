// Package apitest starts agentplane's API over the card-dispute demo for
// tests: a data directory with the demo's tools, agent and prod alias, two
// tenants (the bank, with a support agent and a supervisor, and globex, with
// one user), connector secrets for both, API keys for every user, and a
// server with its workers behind an httptest listener, served with the
// API's own http.Server settings and listener caps. Its clock is the wall
// clock plus an offset a test can move, so approvals expire and days pass
// without waiting.
package apitest

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentplane/agentplane/agent"
	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/authz"
	"github.com/agentplane/agentplane/examples/carddispute"
	"github.com/agentplane/agentplane/examples/carddispute/bank"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/loop"
	"github.com/agentplane/agentplane/model"
)

// The demo's tenants and users.
const (
	BankTenant  = "example-bank"
	Priya       = "priya@example-bank.in" // support agent: starts runs
	Meera       = "meera@example-bank.in" // supervisor: approves refunds and emails
	OtherTenant = "globex"
	Gus         = "gus@globex.example" // globex's only user, a supervisor there
	DemoAgent   = "card-dispute-assistant"
	DemoTask    = "Ticket T-40127 (customer c_88213): two charges of 12,499 INR from an airline on 3 Oct look like duplicates. Investigate and resolve."
)

// Users lists every demo user with their tenant.
var Users = []struct{ Tenant, User string }{{BankTenant, Priya}, {BankTenant, Meera}, {OtherTenant, Gus}}

// bankScopes are what the demo's tools ask of the user a run acts for.
var bankScopes = []string{"tickets:read", "customers:read", "transactions:read", "disputes:write", "refunds:write", "email:draft", "email:send"}

var groups = map[string][]string{
	Priya: {"card-ops-agents"},
	Meera: {"card-ops-agents", "card-ops-supervisors"},
	Gus:   {"card-ops-supervisors"},
}

// ModelsFile is where SetupDemo writes the demo's models.yaml.
func ModelsFile(dataDir string) string { return filepath.Join(dataDir, "demo", "models.yaml") }

// WriteDemoFiles writes the demo's definition files into dataDir/demo.
func WriteDemoFiles(dataDir string) error {
	fdir := filepath.Join(dataDir, "demo")
	if err := os.MkdirAll(fdir, 0o700); err != nil {
		return err
	}
	for _, name := range []string{"tools.yaml", "agent.yaml", "turns.yaml", "models.yaml"} {
		data, err := carddispute.ReadFile(name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(fdir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// SetupDemo stores the demo's users, connector secrets, tools, agent and
// prod alias in an open platform whose files WriteDemoFiles wrote.
func SetupDemo(ctx context.Context, p *platform.Platform, dataDir string) error {
	for _, u := range Users {
		pr, err := authz.New(u.Tenant, u.User, bankScopes, groups[u.User], nil)
		if err != nil {
			return err
		}
		if err := p.SetUser(ctx, pr); err != nil {
			return err
		}
	}
	for _, tenant := range []string{BankTenant, OtherTenant} {
		for _, c := range []string{"support-desk", "core-banking", "email"} {
			if err := p.Secrets.Put(ctx, tenant, c, []byte("connector-secret-"+tenant+"-"+c+"-0123456789abcdef")); err != nil {
				return err
			}
		}
	}
	fdir := filepath.Join(dataDir, "demo")
	if _, err := p.ApplyTools(ctx, filepath.Join(fdir, "tools.yaml")); err != nil {
		return err
	}
	d, err := agent.LoadDefinitionFile(filepath.Join(fdir, "agent.yaml"))
	if err != nil {
		return err
	}
	if _, err := p.Registry.Apply(ctx, d); err != nil {
		return err
	}
	return p.Registry.SetAlias(ctx, d.Agent, "prod", d.Version, 0, 0)
}

// Clock is the wall clock plus an offset tests move.
type Clock struct {
	mu     sync.Mutex
	offset time.Duration
}

// Now is the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// slowModels delays every model call.
type slowModels struct {
	next  loop.Models
	delay time.Duration
}

func (m slowModels) Complete(ctx context.Context, alias string, req *model.Request, a model.Attribution) (*model.CallResult, error) {
	select {
	case <-time.After(m.delay):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return m.next.Complete(ctx, alias, req, a)
}

// Options configure Start.
type Options struct {
	// Config is the API's YAML config (tenants, issuers).
	Config string
	// API adjusts the server's options before it starts.
	API func(*api.Options)
	// Platform adjusts the platform's options before it opens.
	Platform func(*platform.Options)
	// ModelLatency makes every model call take this long, as a vendor's
	// would (the scripted model answers at once).
	ModelLatency time.Duration
}

// Server is a running demo API.
type Server struct {
	Dir      string
	Platform *platform.Platform
	API      *api.Server
	HTTP     *httptest.Server
	Clock    *Clock
	// Keys holds an API key with every scope for each demo user.
	Keys map[string]string
}

// Start sets the demo up in a fresh directory and starts the API with its
// workers; everything stops when the test ends.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	s := &Server{Dir: t.TempDir(), Clock: &Clock{}, Keys: map[string]string{}}
	if err := WriteDemoFiles(s.Dir); err != nil {
		t.Fatal(err)
	}
	s.start(t, o, true)
	for _, u := range Users {
		s.Keys[u.User] = s.NewKey(t, u.Tenant, u.User, nil)
	}
	return s
}

// Join starts another API process on first's data directory, as a second
// agentplane serve would: its own store handle (the same database, or the
// same PostgreSQL when o names one), its own workers and its own HTTP
// server, sharing first's clock and API keys.
func Join(t testing.TB, first *Server, o Options) *Server {
	t.Helper()
	s := &Server{Dir: first.Dir, Clock: first.Clock, Keys: first.Keys}
	s.start(t, o, false)
	return s
}

// start opens the platform on s.Dir (setting the demo up in it when setup
// is set) and starts the API and its HTTP server.
func (s *Server) start(t testing.TB, o Options, setup bool) {
	t.Helper()
	ctx := context.Background()
	po := platform.Options{DataDir: s.Dir, ModelsFile: ModelsFile(s.Dir), Clock: s.Clock.Now}
	if o.ModelLatency > 0 {
		data, err := os.ReadFile(po.ModelsFile)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := platform.ParseModelsConfig(po.ModelsFile, data)
		if err != nil {
			t.Fatal(err)
		}
		gw, rates, err := cfg.Build(po.ModelsFile, os.ReadFile, nil)
		if err != nil {
			t.Fatal(err)
		}
		po.Gateway, po.Rates = slowModels{gw, o.ModelLatency}, rates
	}
	if o.Platform != nil {
		o.Platform(&po)
	}
	// The card-dispute bank lives in the data directory, as the CLI keeps
	// it; the platform registers its tools and closes it.
	b, err := bank.Open(filepath.Join(po.DataDir, "bank.db"))
	if err != nil {
		t.Fatal(err)
	}
	po.Tools = append(po.Tools, b)
	p, err := platform.Open(ctx, po)
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	s.Platform = p
	t.Cleanup(func() { p.Close() })
	if setup {
		if err := SetupDemo(ctx, p, s.Dir); err != nil {
			t.Fatal(err)
		}
	}
	var cfg *api.Config
	if o.Config != "" {
		if cfg, err = api.ParseConfig("config", []byte(o.Config)); err != nil {
			t.Fatal(err)
		}
	}
	// Every test client comes from 127.0.0.1, many at once: no
	// per-client connection caps unless a test sets them.
	ao := api.Options{Platform: p, Config: cfg, Clock: s.Clock.Now, Workers: 4, InteractiveWorkers: 2, Poll: 10 * time.Millisecond,
		Heartbeat: 200 * time.Millisecond, AllowPrivateWebhooks: true, LeaseTTL: 5 * time.Second,
		MaxConnsPerClient: -1, MaxUnauthenticatedConnsPerClient: -1}
	if o.API != nil {
		o.API(&ao)
	}
	if s.API, err = api.New(ao); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	if err := s.API.Start(sctx); err != nil {
		t.Fatal(err)
	}
	var h http.Handler = s.API
	if Record != nil {
		h = recorder{next: h, record: Record}
	}
	// The server is set up as agentplane serve sets it up: its timeouts,
	// header cap and per-client connection caps.
	s.HTTP = httptest.NewUnstartedServer(h)
	s.HTTP.Config = s.API.HTTPServer(nil)
	s.HTTP.Config.Handler = h
	s.HTTP.Listener = s.API.Listener(s.HTTP.Listener)
	s.HTTP.Start()
	t.Cleanup(func() {
		s.HTTP.CloseClientConnections()
		s.HTTP.Close()
		cancel()
		s.API.Stop()
	})
}

// Stop ends the server's workers and its HTTP server, as the end of its
// process would, and waits for them; the platform's store stays open until
// the test ends. A test then Joins a new server on the same data directory
// to see the runs resume there. Stop is idempotent.
func (s *Server) Stop() {
	s.HTTP.CloseClientConnections()
	s.HTTP.Close()
	s.API.Stop()
}

// NewKey stores an API key and returns its token.
func (s *Server) NewKey(t testing.TB, tenant, user string, scopes []string) string {
	t.Helper()
	tok, rec, err := api.NewAPIKey(tenant, user, "test", scopes, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Platform.Store.PutAPIKey(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
	return tok
}

// Exchange is one request to a test server and its answer. Stream bodies
// are not kept.
type Exchange struct {
	Method, Path, Query string
	ReqContentType      string
	ReqBody             []byte
	Status              int
	ContentType         string
	Body                []byte
}

// Record, when set before Start, receives every exchange of the servers
// started afterwards (the OpenAPI conformance test checks them all).
var Record func(Exchange)

type recorder struct {
	next   http.Handler
	record func(Exchange)
}

func (rc recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// The body is kept as the handler reads it: reading it first would
	// defeat the server's authenticate-before-the-body rule.
	var body bytes.Buffer
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(r.Body, &body), r.Body}
	cw := &captureWriter{ResponseWriter: w}
	rc.next.ServeHTTP(cw, r)
	if cw.status == 0 {
		cw.status = http.StatusOK
	}
	rc.record(Exchange{Method: r.Method, Path: r.URL.EscapedPath(), Query: r.URL.RawQuery, ReqContentType: r.Header.Get("Content-Type"),
		ReqBody: body.Bytes(), Status: cw.status, ContentType: w.Header().Get("Content-Type"), Body: cw.body.Bytes()})
}

// captureWriter keeps the status and (except for streams) the body. It
// unwraps to the real writer, so flushing and write deadlines still work.
type captureWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (c *captureWriter) WriteHeader(code int) {
	if c.status == 0 {
		c.status = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *captureWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.Header().Get("Content-Type") != "text/event-stream" && c.body.Len() < 4<<20 {
		c.body.Write(b)
	}
	return c.ResponseWriter.Write(b)
}

func (c *captureWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
