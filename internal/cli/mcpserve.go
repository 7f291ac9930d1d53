package cli

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/agentplane/agentplane/api"
	"github.com/agentplane/agentplane/internal/platform"
	"github.com/agentplane/agentplane/mcpserver"
)

// mcpTokenEnv holds the caller's key for `mcp serve --stdio` (the key the
// CLI sends as a client of a server, too): never a flag, whose value any
// user of the host can read in the process list.
const mcpTokenEnv = "AGENTPLANE_TOKEN"

// mcp dispatches the mcp subcommands.
func (c *command) mcp(args []string) error {
	if len(args) == 0 || args[0] != "serve" {
		if len(args) > 0 && isHelp(args[0]) {
			fmt.Fprintf(c.out, "usage: %s\n", usageLines["mcp serve"])
			return nil
		}
		return exitCode{2, "usage: " + usageLines["mcp serve"]}
	}
	return c.mcpServe(args[1:])
}

// mcpServe serves agentplane's tools (package mcpserver) over stdio as the
// principal of the caller's key, with workers that execute the runs it
// starts unless --workers 0 leaves them to another process.
func (c *command) mcpServe(args []string) error {
	var cm common
	fs := c.flags("mcp serve", &cm)
	stdio := fs.Bool("stdio", false, "serve MCP on stdin and stdout (required; Streamable HTTP is served by agentplane serve at "+api.MCPPath+")")
	tokenFile := fs.String("token-file", "", "file holding the caller's API key (default: the key in env "+mcpTokenEnv+")")
	config := fs.String("config", "", "API config YAML: tenants' quotas, trusted JWT issuers (default DATA/api.yaml when present)")
	workers := fs.Int("workers", 2, "runs executed at once in this process (0: leave them to agentplane serve or worker on the same store)")
	if _, err := parseInterleaved(fs, args); err != nil {
		return err
	}
	if !*stdio {
		return exitCode{2, "mcp serve: --stdio is required (Streamable HTTP is served by agentplane serve at " + api.MCPPath + ")\nusage: " + usageLines["mcp serve"]}
	}
	if *workers < 0 {
		return exitCode{2, "mcp serve: --workers must be 0 or more"}
	}
	token, err := mcpToken(*tokenFile)
	if err != nil {
		return err
	}
	cfg, err := loadAPIConfig(*config, cm.data)
	if err != nil {
		return err
	}
	cm.useConfig(cfg)
	// stdout carries the protocol only: everything else goes to stderr.
	logger := slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if cm.verbose {
		logger = slog.New(slog.NewTextHandler(c.err, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	p, err := c.open(&cm, func(o *platform.Options) { o.Logger = logger })
	if err != nil {
		return err
	}
	defer p.Close()
	if *workers > 0 {
		c.warnNoModels(p, &cm)
	}
	srv, err := api.New(api.Options{Platform: p, Config: cfg, Logger: logger, Workers: *workers, InteractiveWorkers: 1,
		NoWorkers: *workers == 0, LeaseTTL: cm.leaseTTL})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(c.ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	who, err := srv.Authenticate(ctx, token)
	if errors.Is(err, api.ErrUnauthenticated) {
		return fmt.Errorf("mcp serve: the key is not valid (revoked, or of another data directory or store); create one with agentplane apikey create --tenant T --user U")
	}
	if err != nil {
		return fmt.Errorf("mcp serve: checking the key: %w", err)
	}
	m, err := mcpserver.New(mcpserver.Options{API: srv, Logger: logger})
	if err != nil {
		return err
	}
	if err := srv.Start(ctx); err != nil {
		return err
	}
	defer srv.Stop()
	fmt.Fprintf(c.err, "agentplane: MCP server on stdio as %s of tenant %s (scopes %s; data %s, store %s)\n",
		who.User, who.Tenant, strings.Join(who.Scopes, " "), cm.data, storeName(cm.store))
	return m.ServeStdio(ctx, token, os.Stdin, nopWriteCloser{c.out})
}

// mcpToken reads the caller's key from file, else from the environment.
func mcpToken(file string) (string, error) {
	tok := os.Getenv(mcpTokenEnv)
	from := "env " + mcpTokenEnv
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("mcp serve: the key file: %w", err)
		}
		tok, from = string(b), file
	}
	tok = strings.TrimSpace(tok)
	if tok == "" {
		return "", exitCode{2, "mcp serve: no API key: put the caller's key in env " + mcpTokenEnv + " or in a file named by --token-file (never on the command line)"}
	}
	if strings.ContainsFunc(tok, func(r rune) bool { return r < 0x21 || r > 0x7e }) {
		return "", fmt.Errorf("mcp serve: the key in %s is not one token of printable characters", from)
	}
	return tok, nil
}

// nopWriteCloser lets the protocol's writer close without closing stdout.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
