package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcpserver"
	"github.com/agentplane/agentplane/retention"
	"github.com/agentplane/agentplane/store/postgres"
	"github.com/agentplane/agentplane/web"
)

// serve runs the HTTP API and the workers in one process.
func (c *command) serve(args []string) error {
	var cm common
	fs := c.flags("serve", &cm)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address (port 0 picks a free port)")
	config := fs.String("config", "", "API config YAML: tenants' quotas and weights, trusted JWT issuers (default DATA/api.yaml when present)")
	workers := fs.Int("workers", 8, "runs executed at once (interactive first, then background runs fairly between tenants)")
	interactive := fs.Int("interactive-workers", 2, "extra workers that only take interactive (stream) runs")
	allowPrivate := fs.Bool("allow-private-webhooks", false, "allow webhook URLs on loopback and private networks")
	clockOffset := fs.Duration("clock-offset", 0, "shift the server's clock by this much (drills and tests: let approvals expire without waiting)")
	headerTimeout := fs.Duration("read-header-timeout", 10*time.Second, "bound on reading a request's headers")
	bodyTimeout := fs.Duration("body-timeout", 30*time.Second, "bound on reading a request's body, once the request is authenticated")
	writeTimeout := fs.Duration("write-timeout", 30*time.Second, "bound on each write of a response (a client that stops reading is cut)")
	idleTimeout := fs.Duration("idle-timeout", 2*time.Minute, "close keep-alive connections idle this long")
	maxHeader := fs.Int("max-header-bytes", 64<<10, "cap on a request's header block")
	maxConns := fs.Int("max-conns-per-client", 128, "connections one client address may hold (negative: no cap; behind a proxy, cap there)")
	maxUnauth := fs.Int("max-unauthenticated-conns-per-client", 16, "of those, connections no request has authenticated on yet (negative: no cap)")
	corsOrigins := fs.String("cors-origins", "", "comma-separated origins (https://host[:port]) whose pages may call the API with credentials (default none: CORS off; also cors_origins in the config)")
	secureCookies := fs.Bool("secure-cookies", false, "mark the viewer's session cookies Secure on plain HTTP too (behind a proxy that terminates TLS)")
	sessionTTL := fs.Duration("session-ttl", 12*time.Hour, "how long a browser session lasts from sign-in")
	serveMCP := fs.Bool("mcp", true, "serve the MCP server (agentplane's runs, approvals, trace and replay as tools) over Streamable HTTP at "+api.MCPPath+", authenticated like /v1 (Authorization: Bearer KEY)")
	purgeEvery := fs.Duration("purge-interval", time.Hour, "apply the tenants' retention (the config's retention blocks) at start and then this often; 0 turns it off (agentplane purge does it on demand)")
	metricsToken := fs.String("metrics-token-file", "", "file holding the operator's bearer token for GET /metrics (Prometheus; without it /metrics is off)")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	var token string
	if *metricsToken != "" {
		b, err := os.ReadFile(*metricsToken)
		if err != nil {
			return fmt.Errorf("metrics token: %w", err)
		}
		if token = strings.TrimSpace(string(b)); len(token) < 16 {
			return fmt.Errorf("metrics token in %s: want at least 16 characters (for example: head -c 24 /dev/urandom | base64 > %s)", *metricsToken, *metricsToken)
		}
	}
	cfg, err := loadAPIConfig(*config, cm.data)
	if err != nil {
		return err
	}
	cm.useConfig(cfg)
	clock := time.Now
	if *clockOffset != 0 {
		off := *clockOffset
		clock = func() time.Time { return time.Now().Add(off) }
	}
	logger := slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cm.verbose {
		logger = slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := c.open(&cm, func(o *platform.Options) { o.Clock, o.Logger = clock, logger })
	if err != nil {
		return err
	}
	defer p.Close()
	c.warnNoModels(p, &cm)
	ao := api.Options{Platform: p, Config: cfg, Logger: logger, Clock: clock, Workers: *workers,
		InteractiveWorkers: *interactive, LeaseTTL: cm.leaseTTL, AllowPrivateWebhooks: *allowPrivate,
		ReadHeaderTimeout: *headerTimeout, BodyTimeout: *bodyTimeout, WriteTimeout: *writeTimeout, IdleTimeout: *idleTimeout,
		MaxHeaderBytes: *maxHeader, MaxConnsPerClient: *maxConns, MaxUnauthenticatedConnsPerClient: *maxUnauth,
		UI: web.Handler(), SessionTTL: *sessionTTL, SecureCookies: *secureCookies, CORSOrigins: splitList(*corsOrigins), MetricsToken: token}
	if *serveMCP {
		ao.MCP = mcpserver.Mount(mcpserver.Options{Logger: logger})
	}
	srv, err := api.New(ao)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := srv.Start(ctx); err != nil {
		ln.Close()
		return err
	}
	if pols := cfg.RetentionPolicies(); len(pols) > 0 && *purgeEvery > 0 {
		retention.Every(ctx, *purgeEvery, retention.Options{Store: p.Store, Policies: pols}, func(rep *retention.Report, err error) {
			if err != nil {
				logger.Warn("retention purge failed; the next pass carries on", "err", err)
				return
			}
			logger.Info("retention purge", "runs", rep.Runs, "payloads_expired", rep.PayloadsExpired, "blobs_removed", rep.BlobsRemoved,
				"bytes", rep.Bytes, "runs_deleted", rep.RunsDeleted)
		})
	}
	hs := srv.HTTPServer(slog.NewLogLogger(logger.Handler(), slog.LevelWarn))
	served := make(chan error, 1)
	go func() { served <- hs.Serve(srv.Listener(ln)) }()
	fmt.Fprintf(c.out, "agentplane: serving http://%s (data %s, store %s, engine %s); run viewer at http://%s/ui/\n", ln.Addr(), cm.data, storeName(cm.store), engineName(cm.engine), ln.Addr())
	if *serveMCP {
		fmt.Fprintf(c.out, "agentplane: MCP server (Streamable HTTP) at http://%s%s\n", ln.Addr(), api.MCPPath)
	}
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	srv.Stop() // ends streams and lets the workers leave their runs to the next start
	sctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), 5*time.Second)
	defer cancel()
	if serr := hs.Shutdown(sctx); serr != nil {
		hs.Close()
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// storeName is how a run store is named in messages: never with its
// password.
func storeName(spec string) string {
	if spec == "" {
		return "embedded"
	}
	return postgres.Redact(spec)
}

// engineName is how the engine is named in messages.
func engineName(spec string) string {
	if spec == "" {
		return "embedded"
	}
	return spec
}

// warnNoModels says, when a process that executes runs starts, that no
// model is configured, so that the first failed run is no surprise.
func (c *command) warnNoModels(p *platform.Platform, cm *common) {
	if !p.ModelsConfigured() {
		fmt.Fprintf(c.err, "agentplane: WARNING: no model is configured (no %s and no --models): every run will fail; %s\n",
			filepath.Join(cm.data, "models.yaml"), platform.NoModelsHint)
	}
}

func loadAPIConfig(path, dataDir string) (*api.Config, error) {
	if path == "" {
		def := filepath.Join(dataDir, "api.yaml")
		if _, err := os.Stat(def); err != nil {
			return &api.Config{}, nil
		}
		path = def
	}
	return api.LoadConfig(path)
}

// apikey manages API keys (stored hashed; a key is shown once).
func (c *command) apikey(args []string) error {
	if len(args) == 0 {
		return exitCode{2, "usage: agentplane apikey create --tenant T --user U [--scopes S,S] [--name N] | list [--tenant T] | revoke ID"}
	}
	var cm common
	fs := c.flags("apikey "+args[0], &cm)
	tenant := fs.String("tenant", "", "the key's tenant")
	user := fs.String("user", "", "the key's user")
	scopes := fs.String("scopes", "", "comma-separated scopes (default: "+strings.Join(api.DefaultScopes, ",")+"; "+api.ScopeAdmin+" only by name)")
	name := fs.String("name", "", "a label for the key")
	pos, p, err := c.parseAndOpen(fs, &cm, args[1:])
	if err != nil {
		return err
	}
	defer p.Close()
	switch args[0] {
	case "create":
		var sc []string
		if *scopes != "" {
			sc = strings.Split(*scopes, ",")
		}
		tok, rec, err := api.NewAPIKey(*tenant, *user, *name, sc, time.Now())
		if err != nil {
			return err
		}
		if err := p.Store.PutAPIKey(c.ctx, rec); err != nil {
			return err
		}
		fmt.Fprintln(c.out, tok)
		fmt.Fprintf(c.err, "key %s for %s/%s (scopes %s); the token above is shown once\n", rec.ID, rec.Tenant, rec.User, strings.Join(rec.Scopes, " "))
		return nil
	case "list":
		ks, err := p.Store.ListAPIKeys(c.ctx, *tenant)
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(c.out, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "KEY\tTENANT\tUSER\tNAME\tSCOPES\tCREATED\tREVOKED")
		for _, k := range ks {
			revoked := ""
			if !k.RevokedAt.IsZero() {
				revoked = k.RevokedAt.Format(time.RFC3339)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, k.Tenant, k.User, k.Name, strings.Join(k.Scopes, ","),
				k.CreatedAt.Format(time.RFC3339), revoked)
		}
		return tw.Flush()
	case "revoke":
		if len(pos) != 1 {
			return exitCode{2, "usage: agentplane apikey revoke ID"}
		}
		if err := p.Store.RevokeAPIKey(c.ctx, pos[0], time.Now()); err != nil {
			return err
		}
		fmt.Fprintf(c.out, "key %s revoked\n", pos[0])
		return nil
	}
	if isHelp(args[0]) {
		fmt.Fprintf(c.out, "usage: %s\n", usageLines["apikey"])
		return nil
	}
	return exitCode{2, fmt.Sprintf("apikey: unknown subcommand %q\nusage: %s", args[0], usageLines["apikey"])}
}
